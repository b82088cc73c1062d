"""Deterministic synthetic batches, shaped as RL post-training producers hold them.

A batch is a dict field -> value: ``list[Tensor | None]`` for ragged fields (one entry per
row) and a dense ``[B]`` tensor for scalars. Every row tensor is its own allocation, as a
producer's would be (views of one shared buffer would make pickle serialise that buffer per
row).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

Tier = Literal["per_token", "packed", "scalar"]
Value = list[torch.Tensor | None] | torch.Tensor
Batch = dict[str, Value]

VISION_START, IMAGE_PAD, VISION_END = 151652, 151655, 151653
PATCH_DIM = 1176  # 3 channels * 2 temporal * 14 * 14, Qwen2.5-VL's flattened patch
MERGE = 4  # spatial merge 2x2: one placeholder token per 4 patches
TEXT_VOCAB = 151000


@dataclass(frozen=True)
class Field:
    tier: Tier
    dtype: torch.dtype
    trailing: tuple[int, ...] = ()  # dims after the ragged (or batch) dim


@dataclass
class Profile:
    name: str
    schema: str  # the py_wire schema this batch follows
    fields: dict[str, Field]
    batch: Batch

    @property
    def num_rows(self) -> int:
        return int(self.batch["input_lengths"].numel())

    def tensors(self) -> list[torch.Tensor]:
        """Every payload tensor, in field then row order."""
        out: list[torch.Tensor] = []
        for value in self.batch.values():
            if isinstance(value, torch.Tensor):
                out.append(value)
            else:
                out.extend(t for t in value if t is not None)
        return out

    def payload_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors())


TOKEN_FIELDS = {
    "input_ids": Field("per_token", torch.int64),
    "advantages": Field("per_token", torch.float32),
    "generation_logprobs": Field("per_token", torch.float32),
}
SCALAR_FIELDS = {
    "input_lengths": Field("scalar", torch.int64),
    "loss_multiplier": Field("scalar", torch.float32),
    "reward": Field("scalar", torch.float32),
}
TEXT_FIELDS = {**TOKEN_FIELDS, "token_mask": Field("per_token", torch.bool), **SCALAR_FIELDS}
VLM_FIELDS = {
    **TOKEN_FIELDS,
    "mm_token_type_ids": Field("per_token", torch.int64),
    "pixel_values": Field("packed", torch.float32, (PATCH_DIM,)),
    "image_grid_thw": Field("packed", torch.int64, (3,)),
    **SCALAR_FIELDS,
}
# Non-canonical NaN payloads planted in row 0 so that the bit-exact check means something.
ODD_NANS = np.array([0x7FC00001, 0xFFC01234, 0x7F800001], dtype=np.uint32).view(np.float32)


def _split_rows(flat: torch.Tensor, lengths: list[int]) -> list[torch.Tensor]:
    return [row.clone() for row in flat.split(lengths)]


def _scalars(lengths: list[int], gen: torch.Generator) -> Batch:
    count = len(lengths)
    multiplier = (torch.rand(count, generator=gen) > 0.05).to(torch.float32)
    return {
        "input_lengths": torch.tensor(lengths, dtype=torch.int64),
        "loss_multiplier": multiplier,
        "reward": torch.randn(count, generator=gen),
    }


def _token_floats(lengths: list[int], gen: torch.Generator) -> Batch:
    total = sum(lengths)
    advantages = torch.randn(total, generator=gen)
    advantages[: len(ODD_NANS)] = torch.from_numpy(ODD_NANS.copy())[: min(total, len(ODD_NANS))]
    logprobs = -torch.rand(total, generator=gen) * 8
    return {
        "advantages": _split_rows(advantages, lengths),
        "generation_logprobs": _split_rows(logprobs, lengths),
    }


def _text_batch(rows: int, min_len: int, max_len: int, seed: int) -> Batch:
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed)
    lengths = rng.integers(min_len, max_len + 1, rows).tolist()
    ids = torch.randint(0, TEXT_VOCAB, (sum(lengths),), generator=gen)
    prompt = rng.integers(0, np.maximum(np.array(lengths) // 2, 1))
    mask = [torch.arange(n) >= p for n, p in zip(lengths, prompt.tolist(), strict=True)]
    return {
        "input_ids": _split_rows(ids, lengths),
        **_token_floats(lengths, gen),
        "token_mask": mask,
        **_scalars(lengths, gen),
    }


def _image_grid(rng: np.random.Generator) -> tuple[int, int]:
    """An even h x w patch grid with 256 <= h*w <= 2048, log-uniform in area."""
    area = float(np.exp(rng.uniform(np.log(256), np.log(2048))))
    aspect = float(np.exp(rng.uniform(np.log(0.5), np.log(2.0))))
    h = max(2, 2 * round(np.sqrt(area * aspect) / 2))
    w = max(2, 2 * round(area / h / 2))
    while h * w > 2048:
        w -= 2
    while h * w < 256:
        w += 2
    return h, w


def _vlm_ids(rng: np.random.Generator, grids: list[tuple[int, int]]) -> np.ndarray:
    blocks = [
        np.array([VISION_START] + [IMAGE_PAD] * (h * w // MERGE) + [VISION_END]) for h, w in grids
    ]
    image_tokens = sum(len(b) for b in blocks)
    length = max(int(rng.integers(512, 8193)), image_tokens + 16)
    text = rng.integers(0, TEXT_VOCAB, length - image_tokens)
    cuts = np.sort(rng.integers(0, len(text) + 1, len(blocks)))
    pieces = np.split(text, cuts)
    parts = [pieces[0]]
    for block, piece in zip(blocks, pieces[1:], strict=True):
        parts += [block, piece]
    return np.concatenate(parts).astype(np.int64)


def _vlm_batch(rows: int, seed: int) -> Batch:
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed)
    ids, pixels, grids = [], [], []
    for _ in range(rows):
        count = int(rng.choice(5, p=[0.25, 0.35, 0.2, 0.1, 0.1]))
        grid = [_image_grid(rng) for _ in range(count)]
        ids.append(torch.from_numpy(_vlm_ids(rng, grid)))
        patches = sum(h * w for h, w in grid)
        pixels.append(torch.randn(patches, PATCH_DIM, generator=gen) if grid else None)
        thw = torch.tensor([[1, h, w] for h, w in grid], dtype=torch.int64)
        grids.append(thw if grid else None)
    lengths = [len(t) for t in ids]
    return {
        "input_ids": ids,
        "mm_token_type_ids": [(t == IMAGE_PAD).to(torch.int64) for t in ids],
        **_token_floats(lengths, gen),
        "pixel_values": pixels,
        "image_grid_thw": grids,
        **_scalars(lengths, gen),
    }


def make_profile(name: str, scale: float, seed: int = 0) -> Profile:
    def rows(base: int) -> int:
        return max(1, round(base * scale))

    if name == "vlm":
        return Profile(name, "qwen2_5_vl", VLM_FIELDS, _vlm_batch(rows(64), seed))
    if name == "text":
        return Profile(name, "text_grpo", TEXT_FIELDS, _text_batch(rows(4096), 64, 4096, seed))
    if name == "tiny":
        return Profile(name, "text_grpo", TEXT_FIELDS, _text_batch(rows(65536), 1, 16, seed))
    raise ValueError(f"unknown profile {name!r}")


PROFILES = ("vlm", "text", "tiny")


def row_lengths(rows: list[torch.Tensor | None]) -> list[int]:
    """Length along dim 0 per row; 0 for a row without data."""
    return [0 if t is None else t.shape[0] for t in rows]


def offsets_of(lengths: list[int]) -> torch.Tensor:
    offsets = torch.zeros(len(lengths) + 1, dtype=torch.int64)
    torch.cumsum(torch.tensor(lengths, dtype=torch.int64), 0, out=offsets[1:])
    return offsets


def flat_values(rows: list[torch.Tensor | None], spec: Field) -> torch.Tensor:
    """All rows concatenated along dim 0 (one copy); an empty tensor when no row has data."""
    present = [t for t in rows if t is not None]
    if not present:
        return torch.empty((0, *spec.trailing), dtype=spec.dtype)
    return torch.cat(present)


def jagged(rows: list[torch.Tensor | None], spec: Field) -> torch.Tensor:
    """A jagged ``torch.nested`` tensor of the rows (None rows become empty rows)."""
    lengths = row_lengths(rows)
    return torch.nested.nested_tensor_from_jagged(flat_values(rows, spec), offsets_of(lengths))


def packed_batch(profile: Profile) -> Batch:
    """The batch with per-token fields as jagged nested tensors, built once outside timing."""
    return {
        name: jagged(value, profile.fields[name])
        if profile.fields[name].tier == "per_token"
        else value
        for name, value in profile.batch.items()
    }
