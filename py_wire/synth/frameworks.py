"""Batches in the frameworks' own names and dtypes (schemas ``nemo_rl/*`` and ``verl/*``), built
from the framework-neutral generators: the same tokens, media and GRPO sharing, renamed and
re-typed the way NeMo-RL's ``grpo.py`` and verl's ``DataProto`` carry them."""

from __future__ import annotations

from typing import Any

import torch

from py_wire.synth.gemma3 import gemma3_batch
from py_wire.synth.nemotron import nemotron_omni_batch
from py_wire.synth.qwen import qwen2_5_vl_batch
from py_wire.synth.qwen3 import qwen3_vl_batch
from py_wire.synth.smolvlm import smolvlm_batch
from py_wire.synth.text import text_grpo_batch

#: The neutral generators' non-media keys; every other key (media, geometry, per-token type ids)
#: passes through to the NeMo-RL batch as the model's processor gives it.
_NEUTRAL_CORE = frozenset({"input_ids", "input_lengths", "token_mask", "loss_multiplier",
                           "reward", "generation_logprobs", "advantages"})  # fmt: skip


def _shared_cast(rows: list[Any], dtype: torch.dtype) -> list[Any]:
    """Cast each row's tensor (or each segment of a row's list of segments) once, keeping a GRPO
    group's rows, and their segments, the same objects."""
    done: dict[int, Any] = {}

    def cast(r: Any) -> Any:
        if r is None:
            return None
        if id(r) not in done:
            done[id(r)] = [cast(s) for s in r] if isinstance(r, list) else r.to(dtype)
        return done[id(r)]

    return [cast(r) for r in rows]


def _nemo_rl(batch: dict[str, Any], gen: torch.Generator) -> dict[str, Any]:
    """grpo.py's train_data: token_mask int64, input_lengths int32, sample_mask, no reward,
    prev / reference logprobs next to the generation logprobs."""
    gen_lp = batch["generation_logprobs"]
    out = {
        "input_ids": batch["input_ids"],
        "input_lengths": batch["input_lengths"].to(torch.int32),
        "token_mask": [m.to(torch.int64) for m in batch["token_mask"]],
        "sample_mask": batch["loss_multiplier"],
        "generation_logprobs": gen_lp,
        "prev_logprobs": [lp + 0.01 * torch.randn(lp.shape, generator=gen) for lp in gen_lp],
        "reference_policy_logprobs": [
            lp + 0.05 * torch.randn(lp.shape, generator=gen) for lp in gen_lp
        ],
        "advantages": batch["advantages"],
    }
    for key, value in batch.items():
        if key not in _NEUTRAL_CORE:
            # get_multimodal_dict(pixel_dtype=...) casts pixel_values only; the rest is as is
            out[key] = _shared_cast(value, torch.bfloat16) if key == "pixel_values" else value
    return out


def nemo_rl_qwen2_5_vl_batch(
    num_samples: int = 32, *, seed: int = 0, misalign_row: int | None = None, **kw: Any
) -> dict[str, Any]:
    """A batch for ``nemo_rl/qwen2_5_vl`` (keywords as :func:`qwen2_5_vl_batch`)."""
    gen = torch.Generator().manual_seed(seed + 1)
    base = qwen2_5_vl_batch(num_samples, seed=seed, misalign_row=misalign_row, **kw)
    return _nemo_rl(base, gen)


def nemo_rl_qwen3_vl_batch(
    num_samples: int = 16, *, seed: int = 0, misalign_row: int | None = None, **kw: Any
) -> dict[str, Any]:
    """A batch for ``nemo_rl/qwen3_vl`` (keywords as :func:`qwen3_vl_batch`)."""
    gen = torch.Generator().manual_seed(seed + 1)
    return _nemo_rl(qwen3_vl_batch(num_samples, seed=seed, misalign_row=misalign_row, **kw), gen)


def nemo_rl_gemma3_batch(
    num_samples: int = 8, *, seed: int = 0, misalign_row: int | None = None, **kw: Any
) -> dict[str, Any]:
    """A batch for ``nemo_rl/gemma3`` (keywords as :func:`gemma3_batch`)."""
    gen = torch.Generator().manual_seed(seed + 1)
    return _nemo_rl(gemma3_batch(num_samples, seed=seed, misalign_row=misalign_row, **kw), gen)


def nemo_rl_nemotron_omni_batch(
    num_samples: int = 16, *, seed: int = 0, misalign_row: int | None = None, **kw: Any
) -> dict[str, Any]:
    """A batch for ``nemo_rl/nemotron_omni`` (keywords as :func:`nemotron_omni_batch`)."""
    gen = torch.Generator().manual_seed(seed + 1)
    base = nemotron_omni_batch(num_samples, seed=seed, misalign_row=misalign_row, **kw)
    return _nemo_rl(base, gen)


def nemo_rl_smolvlm_batch(
    num_samples: int = 8, *, seed: int = 0, misalign_row: int | None = None, **kw: Any
) -> dict[str, Any]:
    """A batch for ``nemo_rl/smolvlm`` (keywords as :func:`smolvlm_batch`)."""
    gen = torch.Generator().manual_seed(seed + 1)
    return _nemo_rl(smolvlm_batch(num_samples, seed=seed, misalign_row=misalign_row, **kw), gen)


def nemo_rl_text_batch(num_samples: int = 64, *, seed: int = 0, **kw: Any) -> dict[str, Any]:
    """A batch for ``nemo_rl/text`` (keywords as :func:`text_grpo_batch`)."""
    gen = torch.Generator().manual_seed(seed + 1)
    return _nemo_rl(text_grpo_batch(num_samples, seed=seed, **kw), gen)


def _verl(batch: dict[str, Any], gen: torch.Generator, group_size: int) -> dict[str, Any]:
    """The unpadded rows of a DataProto: response-aligned tensors are the rows' response parts."""
    ids = batch["input_ids"]
    starts = [int(m.to(torch.int64).argmax()) if bool(m.any()) else len(m) for m in
              batch["token_mask"]]  # fmt: skip
    responses = [t[s:] for t, s in zip(ids, starts, strict=True)]
    lp = [t[s:] for t, s in zip(batch["generation_logprobs"], starts, strict=True)]
    adv = [t[s:] for t, s in zip(batch["advantages"], starts, strict=True)]
    scores = []
    for r, reward in zip(responses, batch["reward"].tolist(), strict=True):
        s = torch.zeros(len(r), dtype=torch.float32)
        if len(r):
            s[-1] = reward
        scores.append(s)
    out: dict[str, Any] = {
        "input_ids": ids,
        "responses": responses,
        "response_mask": [torch.ones(len(r), dtype=torch.int64) for r in responses],
        "old_log_probs": [x + 0.01 * torch.randn(x.shape, generator=gen) for x in lp],
        "ref_log_prob": [x + 0.05 * torch.randn(x.shape, generator=gen) for x in lp],
        "rollout_log_probs": lp,
        "token_level_scores": scores,
        "token_level_rewards": scores,
        "advantages": adv,
        "returns": adv,
        "uid": [f"group-{i // group_size}" for i in range(len(ids))],
    }
    if "pixel_values" in batch:
        out["pixel_values"] = batch["pixel_values"]
        out["image_grid_thw"] = batch["image_grid_thw"]
        seqlens: dict[int, torch.Tensor] = {}
        rows: list[torch.Tensor | None] = []
        for g in batch["image_grid_thw"]:
            if g is None:
                rows.append(None)
                continue
            if id(g) not in seqlens:
                seqlens[id(g)] = torch.repeat_interleave(g[:, 1] * g[:, 2], g[:, 0])
            rows.append(seqlens[id(g)])
        out["images_seqlens"] = rows
        # text positions on row 0; the 3 mRoPE rows (t, h, w) are text positions too here
        out["position_ids"] = [torch.arange(len(t)).expand(4, len(t)).clone() for t in ids]
    else:
        out["position_ids"] = [torch.arange(len(t)) for t in ids]
    return out


def verl_qwen2_5_vl_batch(
    num_samples: int = 32,
    *,
    seed: int = 0,
    group_size: int = 4,
    misalign_row: int | None = None,
    **kw: Any,
) -> dict[str, Any]:
    """A batch for ``verl/qwen2_5_vl`` (keywords as :func:`qwen2_5_vl_batch`)."""
    gen = torch.Generator().manual_seed(seed + 1)
    base = qwen2_5_vl_batch(
        num_samples, seed=seed, group_size=group_size, misalign_row=misalign_row, **kw
    )
    return _verl(base, gen, group_size)


def verl_text_batch(
    num_samples: int = 64, *, seed: int = 0, group_size: int = 4, **kw: Any
) -> dict[str, Any]:
    """A batch for ``verl/text`` (keywords as :func:`text_grpo_batch`)."""
    gen = torch.Generator().manual_seed(seed + 1)
    return _verl(
        text_grpo_batch(num_samples, seed=seed, group_size=group_size, **kw), gen, group_size
    )
