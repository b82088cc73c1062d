"""One data-parallel shard of a Qwen2.5-VL GRPO step, as the logprob stage receives it: bytes and
times of py_wire against the pickled dict NeMo-RL's driver hands Ray (benchmarks/SCALING.md).

    .venv/bin/python benchmarks/grpo_shard.py --prompts 2 --group 16 --reps 3

A shard is ``--prompts`` prompts x ``--group`` generations; every prompt has ``--images``
images of 1024-4096 patches (log-uniform, even h x w), pixels in bfloat16 (NeMo-RL casts them
to the policy dtype before transfer), and ``input_ids`` with the images' placeholder runs
followed by a response of 256-2048 tokens. Fields are the ``logprob`` stage of the bundled
``nemo_rl/qwen2_5_vl`` schema. Side by side, one thread:

- py_wire, rows of a group sharing the prompt's pixel tensors (a group's images stored once);
- py_wire, every row with its own copy of the pixels (what NeMo-RL's rows hold with
  ``grpo.deduplicate_multimodal_data`` off, its default);
- ``pickle.dumps(protocol=5)`` of the dict NeMo-RL sends: per-token fields padded ``[B, L]``
  (L the longest row, a multiple of 8), per-row pixel tensors (own copies); torch tensors
  pickle in-band, as Ray serialises them; and ``pickle.loads`` on the other side.
"""

from __future__ import annotations

import argparse
import os
import pickle

import machine
import numpy as np
import torch
from profiles import IMAGE_PAD, PATCH_DIM, TEXT_VOCAB, VISION_END, VISION_START
from timing import median_ms  # benchmarks/ is sys.path[0] when run as a script

import py_wire

SCHEMA = "nemo_rl/qwen2_5_vl"


def _grid(rng: np.random.Generator, lo: int, hi: int) -> tuple[int, int]:
    """An even h x w patch grid with lo <= h*w <= hi, log-uniform in area."""
    area = float(np.exp(rng.uniform(np.log(lo), np.log(hi))))
    h = max(2, 2 * round(np.sqrt(area) * float(np.exp(rng.uniform(-0.3, 0.3))) / 2))
    w = max(2, 2 * round(area / h / 2))
    while h * w > hi:
        w -= 2
    while h * w < lo:
        w += 2
    return h, w


def build(prompts: int, group: int, images: int, seed: int = 0) -> tuple[dict, dict, dict]:
    """(shared-pixel batch, own-copy batch, NeMo-RL's padded dict) for one shard."""
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed)
    ids, pixels, grids = [], [], []
    for _ in range(prompts):
        g = [_grid(rng, 1024, 4096) for _ in range(images)]
        text = torch.randint(0, TEXT_VOCAB, (64 * images + 64,), generator=gen).tensor_split(
            images + 1
        )
        parts = [text[0]]
        for (h, w), piece in zip(g, text[1:], strict=True):
            run = [VISION_START] + [IMAGE_PAD] * (h * w // 4) + [VISION_END]
            parts += [torch.tensor(run), piece]
        prompt = torch.cat(parts)
        pix = torch.randn(sum(h * w for h, w in g), PATCH_DIM, generator=gen).to(torch.bfloat16)
        thw = torch.tensor([[1, h, w] for h, w in g], dtype=torch.int64)
        for _ in range(group):
            response = torch.randint(0, TEXT_VOCAB, (int(rng.integers(256, 2049)),), generator=gen)
            ids.append(torch.cat([prompt, response]))
            pixels.append(pix)  # the group's rows share the prompt's tensor
            grids.append(thw)
    lengths = [len(t) for t in ids]
    rows = len(ids)
    # token_mask: 1 on the response, 0 on the prompt (its exact split does not change bytes)
    mask = [(torch.arange(len(t)) >= len(t) // 2).to(torch.int64) for t in ids]
    shared = {
        "input_ids": ids,
        "input_lengths": torch.tensor(lengths, dtype=torch.int32),
        "pixel_values": pixels,
        "image_grid_thw": grids,
        "token_mask": mask,
        "sample_mask": torch.ones(rows),
    }
    own = dict(shared, pixel_values=[p.clone() for p in pixels])
    width = -(-max(lengths) // 8) * 8
    padded_ids = torch.full((rows, width), 151643, dtype=torch.int64)
    padded_mask = torch.zeros((rows, width), dtype=torch.int64)
    for i, (t, m) in enumerate(zip(ids, mask, strict=True)):
        padded_ids[i, : len(t)] = t
        padded_mask[i, : len(m)] = m
    nemo = {
        "input_ids": padded_ids,
        "input_lengths": shared["input_lengths"],
        "token_mask": padded_mask,
        "sample_mask": shared["sample_mask"],
        "pixel_values": own["pixel_values"],
        "image_grid_thw": [g.clone() for g in grids],
    }
    return shared, own, nemo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--group", type=int, default=16, help="GRPO generations per prompt")
    parser.add_argument("--images", type=int, default=4)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("PY_WIRE_THREADS", "1")
    torch.set_num_threads(1)
    shared, own, nemo = build(args.prompts, args.group, args.images)
    schema = py_wire.load_schema(SCHEMA)
    tokens = int(shared["input_lengths"].sum())
    logical_pixels = sum(p.nbytes for p in shared["pixel_values"])
    unique_pixels = logical_pixels // args.group
    print(f"{machine.describe()}\n")
    print(
        f"shard: {args.prompts} prompts x {args.group} generations = {len(shared['input_ids'])} "
        f"rows, {args.images} images per prompt; {tokens} tokens "
        f"({tokens / len(own['input_ids']):.0f} per row, padded width "
        f"{nemo['input_ids'].shape[1]}); pixels bf16: "
        f"{logical_pixels / 1e6:.1f} MB over all rows, {unique_pixels / 1e6:.1f} MB unique; "
        f"medians of {args.reps} after a warm-up, one thread"
    )

    def report(label: str, ms: float, nbytes: int | None = None) -> None:
        size = f"{nbytes / 1e6:10.1f} MB" if nbytes is not None else " " * 13
        rate = f"{nbytes / ms / 1e6:6.2f} GB/s" if nbytes else ""
        print(f"  {label:<58} {ms:9.2f} ms {size} {rate}")

    for label, batch in (("shared pixels", shared), ("own copies", own)):
        frame = py_wire.encode(batch, schema, stage="logprob", threads=1)
        ms = median_ms(lambda b=batch: py_wire.encode(b, schema, stage="logprob", threads=1),
                       args.reps)  # fmt: skip
        report(f"py_wire.encode, {label}", ms, len(frame))
        report(f"py_wire.decode, {label}", median_ms(lambda f=frame: py_wire.decode(f), args.reps))
        del frame
    blob = pickle.dumps(nemo, protocol=5)
    report("NeMo-RL dict: pickle.dumps (in-band, own copies)",
           median_ms(lambda: pickle.dumps(nemo, protocol=5), args.reps), len(blob))  # fmt: skip
    report("NeMo-RL dict: pickle.loads", median_ms(lambda: pickle.loads(blob), args.reps))
    views = [p.view(-1).view(torch.uint8) for p in own["pixel_values"]]
    buffer = torch.empty(logical_pixels, dtype=torch.uint8)
    memcpy = median_ms(lambda: torch.cat(views, out=buffer), args.reps)
    report("memcpy of the pixels (own copies) -> preallocated", memcpy, logical_pixels)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
