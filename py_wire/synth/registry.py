"""Generators by bundled schema name: ``generate("gemma3", 8, seed=1)``."""

from __future__ import annotations

import inspect
from collections.abc import Callable

from py_wire.synth.frameworks import (
    nemo_rl_gemma3_batch,
    nemo_rl_nemotron_omni_batch,
    nemo_rl_qwen2_5_vl_batch,
    nemo_rl_qwen3_vl_batch,
    nemo_rl_smolvlm_batch,
    nemo_rl_text_batch,
    verl_qwen2_5_vl_batch,
    verl_text_batch,
)
from py_wire.synth.gemma3 import gemma3_batch
from py_wire.synth.nemotron import nemotron_omni_batch
from py_wire.synth.qwen import qwen2_5_vl_batch
from py_wire.synth.qwen3 import qwen3_vl_batch
from py_wire.synth.qwen_video import qwen2_5_vl_video_batch
from py_wire.synth.smolvlm import smolvlm_batch
from py_wire.synth.text import text_grpo_batch

#: Every bundled schema's generator: ``fn(num_samples, *, seed=0, ...) -> batch``.
GENERATORS: dict[str, Callable[..., dict[str, object]]] = {
    "gemma3": gemma3_batch,
    "nemotron_omni": nemotron_omni_batch,
    "qwen2_5_vl": qwen2_5_vl_batch,
    "qwen2_5_vl_video": qwen2_5_vl_video_batch,
    "qwen3_vl": qwen3_vl_batch,
    "smolvlm": smolvlm_batch,
    "text_grpo": text_grpo_batch,
    "nemo_rl/gemma3": nemo_rl_gemma3_batch,
    "nemo_rl/nemotron_omni": nemo_rl_nemotron_omni_batch,
    "nemo_rl/qwen2_5_vl": nemo_rl_qwen2_5_vl_batch,
    "nemo_rl/qwen3_vl": nemo_rl_qwen3_vl_batch,
    "nemo_rl/smolvlm": nemo_rl_smolvlm_batch,
    "nemo_rl/text": nemo_rl_text_batch,
    "verl/qwen2_5_vl": verl_qwen2_5_vl_batch,
    "verl/text": verl_text_batch,
}


def generate(
    schema_name: str, num_samples: int, seed: int = 0, misalign_row: int | None = None
) -> dict[str, object]:
    """A deterministic batch for the bundled schema ``schema_name``. ``misalign_row`` drops one
    placeholder token from that row's first media run (the row must have media); schemas
    without placeholder runs reject it."""
    try:
        fn = GENERATORS[schema_name]
    except KeyError:
        raise ValueError(
            f"no generator for schema {schema_name!r}; known: {sorted(GENERATORS)}"
        ) from None
    if misalign_row is None:
        return fn(num_samples, seed=seed)
    if "misalign_row" not in inspect.signature(fn).parameters:
        raise ValueError(f"schema {schema_name!r} has no placeholder runs to misalign")
    return fn(num_samples, seed=seed, misalign_row=misalign_row)
