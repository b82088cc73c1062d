"""Realistic synthetic batches for the bundled schemas: used by the demo, tests and benchmarks.

Every generator is deterministic for a seed and keeps placeholder runs consistent with its
media, unless asked for a deliberately misaligned batch (``misalign_row``).
:data:`py_wire.synth.registry.GENERATORS` maps each bundled schema name to its generator.
"""

from py_wire.synth.gemma3 import gemma3_batch
from py_wire.synth.nemotron import nemotron_omni_batch
from py_wire.synth.qwen import qwen2_5_vl_batch
from py_wire.synth.qwen3 import qwen3_vl_batch
from py_wire.synth.qwen_video import qwen2_5_vl_video_batch
from py_wire.synth.registry import GENERATORS, generate
from py_wire.synth.smolvlm import smolvlm_batch
from py_wire.synth.text import text_grpo_batch

__all__ = [
    "GENERATORS",
    "gemma3_batch",
    "generate",
    "nemotron_omni_batch",
    "qwen2_5_vl_batch",
    "qwen2_5_vl_video_batch",
    "qwen3_vl_batch",
    "smolvlm_batch",
    "text_grpo_batch",
]
