"""The placeholder contract on one long row: ``py_wire.placeholder_runs`` over a 32,768-token row
with 16 image runs, and ``py_wire.encoded_nbytes`` of that row (every check encode makes,
the placeholder contract against ``image_grid_thw`` included, and no copy). Medians in µs.

    .venv/bin/python benchmarks/contract_check.py --tokens 32768 --images 16 --reps 200
"""

from __future__ import annotations

import argparse
import os

import torch
from profiles import IMAGE_PAD, MERGE, PATCH_DIM, TEXT_VOCAB, VISION_END, VISION_START
from timing import median_ms  # benchmarks/ is sys.path[0] when run as a script

import py_wire


def long_row(tokens: int, images: int, grid: tuple[int, int]) -> torch.Tensor:
    """``tokens`` ids with ``images`` runs of vision_start, image_pad x h*w/4, vision_end,
    spread evenly through random text."""
    h, w = grid
    run = [VISION_START] + [IMAGE_PAD] * (h * w // MERGE) + [VISION_END]
    text = tokens - images * len(run)
    if text < images:
        raise SystemExit(f"{images} images of {h}x{w} patches do not fit in {tokens} tokens")
    gen = torch.Generator().manual_seed(0)
    pieces = torch.randint(0, TEXT_VOCAB, (text,), generator=gen).tensor_split(images)
    parts: list[torch.Tensor] = []
    for piece in pieces:
        parts += [piece, torch.tensor(run)]
    return torch.cat(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=32768)
    parser.add_argument("--images", type=int, default=16)
    parser.add_argument("--grid", type=int, nargs=2, default=(32, 32), help="patches h w")
    parser.add_argument("--reps", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(1)
    h, w = args.grid
    ids = long_row(args.tokens, args.images, (h, w))
    patches = args.images * h * w
    batch = {
        "input_ids": [ids],
        "pixel_values": [torch.empty(patches, PATCH_DIM)],  # not read by encoded_nbytes
        "image_grid_thw": [torch.tensor([[1, h, w]] * args.images)],
        "advantages": [torch.zeros(len(ids))],
        "generation_logprobs": [torch.zeros(len(ids))],
        "input_lengths": torch.tensor([len(ids)]),
        "loss_multiplier": torch.ones(1),
        "reward": torch.zeros(1),
    }
    schema = py_wire.load_schema("qwen2_5_vl")
    runs = py_wire.placeholder_runs(ids, IMAGE_PAD)
    assert runs == [[h * w // MERGE] * args.images], runs
    print(
        f"one row of {len(ids)} tokens, {args.images} images of {h}x{w} patches; "
        f"{os.cpu_count()} cpus, load average {os.getloadavg()[0]:.2f}; medians of {args.reps}"
    )
    figures = {
        "placeholder_runs(row, image_pad)": lambda: py_wire.placeholder_runs(ids, IMAGE_PAD),
        "encoded_nbytes(batch) (all encode checks, no copy)": lambda: py_wire.encoded_nbytes(
            batch, schema
        ),
    }
    for name, fn in figures.items():
        print(f"  {name:<52} {median_ms(fn, args.reps) * 1e3:8.1f} us")


if __name__ == "__main__":
    main()
