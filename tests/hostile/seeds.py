"""Seed frames for the hostile-input suite: every bundled schema, kept small (a few rows, tiny
media), plus frame-op outputs (shared and reordered segments, zero rows), frames that lack
optional packed fields, and compact frames (their schema named by fingerprint)."""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass

import torch

import py_wire
from py_wire.synth.registry import GENERATORS

#: Generator arguments that keep each bundled schema's frames small (a few KB).
SMALL: dict[str, dict[str, object]] = {
    "qwen2_5_vl": {"min_patches": 64, "max_patches": 80, "max_response": 64, "max_images": 1},
    "qwen3_vl": {"min_patches": 64, "max_patches": 80, "max_response": 64, "max_images": 1},
    "qwen2_5_vl_video": {
        "min_patches": 64,
        "max_patches": 80,
        "max_response": 64,
        "max_video_t": 2,
        "max_video_side": 4,
    },
    "nemotron_omni": {"min_side": 32, "max_side": 64, "max_response": 64},
    "smolvlm": {"max_response": 64, "tile_sizes": (16,), "max_grid": 1},
    "text_grpo": {"min_tokens": 2, "max_tokens": 24},
    "gemma3": {"max_response": 64},
}


@dataclass(frozen=True)
class Seed:
    name: str
    schema: str  # the bundled schema's name ("" for a variant that is not bundled)
    stages: tuple[str, ...]
    data: bytes


def _small_gemma3() -> py_wire.Schema:
    """gemma3 with 8x8 images instead of 896x896 (a 896 image is 9.6 MB)."""
    from py_wire._schema.files import _load_path, bundled_schemas  # noqa: F401

    path = next(p for p in _schema_files() if p.stem == "gemma3")
    text = re.sub(r"\b896\b", "8", path.read_text())
    return py_wire.Schema.from_toml(text, "gemma3_small")


def _schema_files():
    from importlib import resources

    root = resources.files("py_wire") / "schemas"
    return [p for p in root.iterdir() if p.name.endswith(".toml")]


def _shrink_gemma3(batch: dict[str, object]) -> dict[str, object]:
    pv = batch["pixel_values"]
    rows = pv.rows() if isinstance(pv, py_wire.PackedTensor) else list(pv)  # type: ignore[union-attr]
    small = []
    cache: dict[int, torch.Tensor] = {}
    for r in rows:
        if r is None:
            small.append(None)
            continue
        key = id(r)
        if key not in cache:  # keep GRPO sharing: one small tensor per distinct image
            cache[key] = torch.randn(
                r.shape[0], 3, 8, 8, generator=torch.Generator().manual_seed(len(cache))
            )
        small.append(cache[key])
    batch["pixel_values"] = small
    return batch


def _identified(batch: dict[str, object]) -> dict[str, object]:
    """``batch`` with its media's segments given ids (1, 2, ... as 16 bytes)."""
    out = dict(batch)
    for k in ("pixel_values", "image_grid_thw"):
        v = py_wire.PackedTensor(batch[k])
        if v.num_segments:
            segments, offsets, refs = v.csr()
            ids = [bytes([i + 1]) * 16 for i in range(len(segments))]
            out[k] = py_wire.PackedTensor.from_csr(segments, offsets, refs, v.dim_to_pack, ids)
    return out


def build_seeds(rows: int = 3) -> list[Seed]:
    seeds: list[Seed] = []
    for name in py_wire.bundled_schemas():
        kwargs = dict(SMALL.get(name, {}))
        schema: py_wire.Schema = py_wire.load_schema(name)
        batch = GENERATORS[name](rows, seed=1, group_size=2, **kwargs)
        if name == "gemma3":
            text_only = GENERATORS[name](
                rows, seed=1, group_size=1, text_only_fraction=1.0, **kwargs
            )
            seeds.append(
                Seed(
                    "gemma3/text-only",
                    name,
                    schema.stages,
                    bytes(py_wire.encode(text_only, schema)),
                )
            )
            schema = _small_gemma3()
            batch = _shrink_gemma3(batch)
            bundled = ""
        else:
            bundled = name
        frame = py_wire.encode(batch, schema)
        label = name if bundled else "gemma3_small"
        seeds.append(Seed(label, bundled, schema.stages, bytes(frame)))
        n = frame.num_rows
        # frame-op outputs: reordered and repeated rows (shared segments), zero rows, concat
        seeds.append(Seed(f"{label}/select-rev", bundled, schema.stages,
                          bytes(py_wire.take_rows(frame, [n - 1, 0, 0]))))  # fmt: skip
        seeds.append(Seed(f"{label}/zero-rows", bundled, schema.stages,
                          bytes(py_wire.take_rows(frame, []))))  # fmt: skip
        if bundled and name in ("smolvlm", "text_grpo", "nemotron_omni", "qwen2_5_vl"):
            # compact headers (the schema named by fingerprint; the runner holds it)
            compact = py_wire.encode(batch, schema, compact=True)
            seeds.append(Seed(f"{label}/compact", bundled, schema.stages, bytes(compact)))
            seeds.append(Seed(f"{label}/compact-select-rev", bundled, schema.stages,
                              bytes(py_wire.take_rows(compact, [n - 1, 0, 0]))))  # fmt: skip
        if name == "qwen2_5_vl":
            # segment identity: every packed field's id table (f.seg_ids), then shuffled
            identified = _identified(batch)
            frame = py_wire.encode(identified, schema)
            seeds.append(Seed(f"{label}/segment-ids", bundled, schema.stages, bytes(frame)))
            seeds.append(Seed(f"{label}/segment-ids-concat", bundled, schema.stages,
                              bytes(py_wire.concat([py_wire.take_rows(frame, [n - 1, 0]),
                                                    py_wire.take_rows(frame, [0])]))))  # fmt: skip
        if name in ("smolvlm", "text_grpo", "nemotron_omni"):
            seeds.append(Seed(f"{label}/concat", bundled, schema.stages,
                              bytes(py_wire.concat([frame, py_wire.chunk(frame, 2)[1]]))))  # fmt: skip  # noqa: E501
        # optional packed fields absent (a text-only batch)
        optional = [f for f, d in schema.fields.items() if not d.required and f in batch]
        if optional and name != "gemma3":
            rest = {k: v for k, v in batch.items() if k not in optional}
            with contextlib.suppress(py_wire.WireError):
                seeds.append(Seed(f"{label}/no-optional", bundled, schema.stages,
                                  bytes(py_wire.encode(rest, schema))))  # fmt: skip
    return seeds
