"""Realistic synthetic batches for the bundled schemas: used by the demo, tests and benchmarks.

Every generator is deterministic for a seed and keeps placeholder runs consistent with its
media, unless asked for a deliberately misaligned batch.
"""

from py_wire.synth.qwen import qwen2_5_vl_batch
from py_wire.synth.text import text_grpo_batch

__all__ = ["qwen2_5_vl_batch", "text_grpo_batch"]
