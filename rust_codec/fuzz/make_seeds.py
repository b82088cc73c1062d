"""Seed corpora for the cargo-fuzz targets: real frames of every bundled schema.

Run from the repository root with the dev venv (``bash scripts/dev.sh setup``):

    .venv/bin/python rust_codec/fuzz/make_seeds.py

The synthetic generators (``py_wire.synth.registry``) make realistic but large media (Qwen's
smallest grid is 64 patches of 1176 floats, Gemma3's images are 3x896x896), so media rows are
built here by hand at the smallest sizes each schema's rules allow, with placeholder runs that
satisfy its contract; text-only batches come from the registry's generators with small
lengths. Every frame is encoded by ``py_wire.encode`` against the bundled schema (Gemma3 also
against a copy whose image side is 4 instead of 896, so that an image fits in a seed), then
frame ops (take_rows reversed, with repeated rows, first row only; concat of two frames; an empty
selection) add their outputs. Each seed is at most 64 KiB. Writes ``seeds/frames/`` (the seeds
of every target that reads one frame), ``seeds/gather/`` and ``seeds/schema_json/``
(deterministic names and bytes); ``scripts/fuzz.sh`` starts each target's working corpus
(outside the repository) from them.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import struct
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root

import py_wire
from py_wire.synth.registry import GENERATORS
from tests.hostile.mutate import Parsed, format_1_table

HERE = Path(__file__).resolve().parent
SCHEMAS = HERE.parent.parent / "py_wire" / "schemas"
MAX_SEED = 64 * 1024

g = torch.Generator().manual_seed(7)


def text(n: int) -> list[int]:
    return torch.randint(10, 1000, (n,), generator=g).tolist()


def run(token: int, count: int, begin: int | None, end: int | None) -> list[int]:
    return (
        ([begin] if begin is not None else [])
        + [token] * count
        + ([end] if end is not None else [])
    )


def training(ids: list[list[int]]) -> dict[str, object]:
    """The per-token and scalar training fields every bundled schema shares."""
    out: dict[str, object] = {
        "advantages": [torch.randn(len(r), generator=g) for r in ids],
        "generation_logprobs": [-torch.rand(len(r), generator=g) for r in ids],
        "token_mask": [torch.rand(len(r), generator=g) > 0.3 for r in ids],
        "input_lengths": torch.tensor([len(r) for r in ids], dtype=torch.int64),
        "loss_multiplier": torch.ones(len(ids)),
        "reward": torch.randn(len(ids), generator=g),
    }
    return out


def qwen(images: list[list[tuple[int, int, int]]], width: int, videos=None) -> dict[str, object]:
    """Rows of (t, h, w) image grids (and optionally video grids): t*h*w patches of `width`
    floats, t*h*w/4 pad tokens per image between vision start/end."""
    ids, types, pix, grids, vpix, vgrids, secs = [], [], [], [], [], [], []
    for r, row in enumerate(images):
        toks, tt = text(3), [0, 0, 0]
        for t, h, w in row:
            rr = run(151655, t * h * w // 4, 151652, 151653)
            toks += rr
            tt += [1] * len(rr)
        vrow = videos[r] if videos else []
        for t, h, w in vrow:
            rr = run(151656, t * h * w // 4, 151652, 151653)
            toks += rr
            tt += [2] * len(rr)
        toks += text(2)
        tt += [0, 0]
        ids.append(toks)
        types.append(tt)
        n = sum(t * h * w for t, h, w in row)
        pix.append(torch.randn(n, width, generator=g) if row else None)
        grids.append(torch.tensor(row, dtype=torch.int64) if row else None)
        if videos is not None:
            nv = sum(t * h * w for t, h, w in vrow)
            vpix.append(torch.randn(nv, width, generator=g) if vrow else None)
            vgrids.append(torch.tensor(vrow, dtype=torch.int64) if vrow else None)
            secs.append(torch.full((len(vrow),), 0.5) if vrow else None)
    batch = {
        "input_ids": [torch.tensor(r, dtype=torch.int64) for r in ids],
        "mm_token_type_ids": [torch.tensor(r, dtype=torch.int64) for r in types],
        "pixel_values": pix,
        "image_grid_thw": grids,
        **training(ids),
    }
    if videos is not None:
        batch.update(pixel_values_videos=vpix, video_grid_thw=vgrids, second_per_grid_ts=secs)
    return batch


def gemma3(images: list[int], side: int) -> dict[str, object]:
    """Rows of n images (`side` x `side`), 256 soft tokens each between BOI/EOI."""
    ids, types, pix, crops = [], [], [], []
    for n in images:
        toks = text(3)
        for _ in range(n):
            toks += run(262144, 256, 255999, 256000)
        toks += text(2)
        ids.append(toks)
        types.append([1 if t == 262144 else 0 for t in toks])
        pix.append(torch.randn(n, 3, side, side, generator=g) if n else None)
        crops.append(torch.zeros(n, dtype=torch.int64) if n else None)
    return {
        "input_ids": [torch.tensor(r, dtype=torch.int64) for r in ids],
        "token_type_ids": [torch.tensor(r, dtype=torch.int64) for r in types],
        "pixel_values": pix,
        "num_crops": crops,
        **training(ids),
    }


def nemotron(images: list[list[tuple[int, int]]]) -> dict[str, object]:
    """Rows of (H, W) images: int((H//16)*0.5)*int((W//16)*0.5) tokens between <img>/</img>."""
    ids, pix, sizes, frames = [], [], [], []
    for row in images:
        toks = text(3)
        for h, w in row:
            toks += run(131072, int((h // 16) * 0.5) * int((w // 16) * 0.5), 131073, 131074)
        toks += text(2)
        ids.append(toks)
        if row:
            hm, wm = max(h for h, _ in row), max(w for _, w in row)
            pix.append(torch.randn(len(row), 3, hm, wm, generator=g))
            sizes.append(torch.tensor(row, dtype=torch.int64))
            frames.append(torch.ones(len(row), dtype=torch.int64))
        else:
            pix.append(None)
            sizes.append(None)
            frames.append(None)
    return {
        "input_ids": [torch.tensor(r, dtype=torch.int64) for r in ids],
        "pixel_values": pix,
        "imgs_sizes": sizes,
        "num_frames": frames,
        **training(ids),
    }


def smolvlm(tiles: list[int], side: int = 4) -> dict[str, object]:
    """Rows of `tiles` tiles ([1, tiles, 3, side, side]) and their attention masks."""
    ids, pix, masks = [], [], []
    for n in tiles:
        toks = text(3) + [49190] * (4 * n) + text(2)
        ids.append(toks)
        pix.append(torch.randn(1, n, 3, side, side, generator=g) if n else None)
        masks.append(torch.ones(1, n, side, side, dtype=torch.int64) if n else None)
    return {
        "input_ids": [torch.tensor(r, dtype=torch.int64) for r in ids],
        "pixel_values": pix,
        "pixel_attention_mask": masks,
        **training(ids),
    }


def small_gemma3_schema(tmp: Path) -> Path:
    """gemma3.toml with 4x4 images instead of 896x896 (the field table travels in the frame,
    so the codec reads it like any other; the contract is unchanged)."""
    text_ = (SCHEMAS / "gemma3.toml").read_text()
    assert "896, 896" in text_
    out = tmp / "gemma3.toml"
    out.write_text(text_.replace("896, 896", "4, 4"))
    return out


def frames() -> list[tuple[str, bytes]]:
    out: list[tuple[str, py_wire.Frame]] = []

    def add(name: str, batch: dict[str, object], schema) -> None:
        out.append((name, py_wire.encode(batch, schema)))

    add("qwen2_5_vl-2img-text", qwen([[(1, 2, 2)], []], 1176), "qwen2_5_vl")
    add("qwen2_5_vl-text-img", qwen([[], [(1, 2, 2)]], 1176), "qwen2_5_vl")
    add("qwen3_vl-img", qwen([[(1, 2, 2)], []], 1536), "qwen3_vl")
    add(
        "qwen2_5_vl_video-img-video",
        qwen([[(1, 2, 2)], []], 1176, videos=[[], [(1, 2, 2)]]),
        "qwen2_5_vl_video",
    )
    add("nemotron_omni-2img", nemotron([[(32, 32), (32, 48)], []]), "nemotron_omni")
    add("nemotron_omni-1img", nemotron([[], [(48, 32)], []]), "nemotron_omni")
    add("smolvlm-tiles", smolvlm([1, 0, 2]), "smolvlm")
    add("gemma3-text-only", gemma3([0, 0], 896), "gemma3")
    with tempfile.TemporaryDirectory() as tmp:
        small = small_gemma3_schema(Path(tmp))
        add("gemma3-small-2img", gemma3([1, 0, 1], 4), small)
        add("gemma3-small-1img", gemma3([0, 1], 4), small)
    for name, fn in GENERATORS.items():
        if name == "text_grpo":
            b = fn(3, seed=1, min_tokens=4, max_tokens=24, group_size=2)
            add("text_grpo-3", b, "text_grpo")
    # Frame operations over the frames above.
    base = dict(out)
    ops: list[tuple[str, py_wire.Frame]] = []
    for name, f in base.items():
        n = f.num_rows
        ops.append((f"{name}.select-rev", py_wire.take_rows(f, list(range(n))[::-1])))
        ops.append((f"{name}.select-dup", py_wire.take_rows(f, [n - 1, 0, n - 1])))
        ops.append((f"{name}.select-first", py_wire.take_rows(f, [0])))
    ops.append(
        (
            "qwen2_5_vl.concat",
            py_wire.concat([base["qwen2_5_vl-2img-text"], base["qwen2_5_vl-text-img"]]),
        )
    )
    ops.append(
        (
            "nemotron.concat",
            py_wire.concat([base["nemotron_omni-2img"], base["nemotron_omni-1img"]]),
        )
    )
    ops.append(("text_grpo.zero-rows", py_wire.take_rows(base["text_grpo-3"], [])))
    ops.append(("qwen2_5_vl.zero-rows", py_wire.take_rows(base["qwen2_5_vl-2img-text"], [])))
    return [(n, bytes(memoryview(f))) for n, f in out + ops]


def main() -> None:
    seeds: dict[str, dict[str, bytes]] = {"frames": {}, "gather": {}, "schema_json": {}}
    all_frames = frames()
    for name, data in all_frames:
        if len(data) > MAX_SEED:
            print(f"skip {name}: {len(data)} bytes")
            continue
        seeds["frames"][name] = data
        # gather: [flags, split u16, k] ++ frame ++ k u16 rows (see fuzz_targets/gather.rs).
        rows = struct.pack("<3H", 0, 1, 0)
        seeds["gather"][name] = bytes([2, 0, 0, 3]) + data + rows
        # The field table its schema implies (format-1 headers carried it in py_wire.fields).
        table = format_1_table(Parsed.of(data)) or []
        seeds["schema_json"][name + ".fields"] = json.dumps(table).encode()
        for spec in table[:3]:
            seeds["schema_json"][f"{name}.field-{spec['name']}"] = json.dumps(spec).encode()
    # Pairs for the two-frame gather (concat of two frames, then a row selection).
    small = [(n, d) for n, d in all_frames if len(d) <= 30 * 1024]
    for (n1, d1), (n2, d2) in itertools.pairwise(small):
        if len(d1) + len(d2) + 10 <= MAX_SEED:
            rows = struct.pack("<3H", 1, 0, 2)
            seeds["gather"][f"pair.{n1}+{n2}"] = (
                bytes([1]) + struct.pack("<H", len(d1)) + bytes([3]) + d1 + d2 + rows
            )
    for name in ("qwen2_5_vl", "qwen2_5_vl_video", "gemma3", "nemotron_omni"):
        for c in py_wire.load_schema(name)._contracts_json:
            cname = json.loads(c)["name"]
            seeds["schema_json"][f"contract.{name}.{cname}"] = c.encode()
        # The embedded schema text itself (schema::embedded: canonical form, the schema model).
        seeds["schema_json"][f"schema.{name}"] = py_wire.load_schema(name).canonical_json.encode()
    for t, files in seeds.items():
        d = HERE / "seeds" / t
        d.mkdir(parents=True, exist_ok=True)
        for name, data in sorted(files.items()):
            digest = hashlib.sha1(data).hexdigest()[:8]
            (d / f"seed-{name}-{digest}").write_bytes(data)
        print(f"{t}: {len(files)} seeds, largest {max(map(len, files.values()))} bytes")


if __name__ == "__main__":
    main()
