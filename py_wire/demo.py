"""The README's first command: a realistic Qwen2.5-VL GRPO batch through the codec and back.

Generates the batch (a few dozen samples, 0-4 images each at varied resolutions, some text-only,
placeholder runs consistent with ``image_grid_thw``), encodes it, decodes it, checks the round
trip bit for bit, shows the silent failures hand-rolled pipelines train on (an image dropped,
a placeholder token overwritten, a per-token field one short, a wrong dtype) refused with the
field, row and values, and prints per-field sizes and throughput beside a plain memcpy.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

import py_wire
from py_wire._compare import assert_batch_equal
from py_wire.synth import qwen2_5_vl_batch


def _median_seconds(fn: Callable[[], object], reps: int) -> float:
    fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _payload_bytes(batch: dict[str, object]) -> int:
    """Bytes a producer holds, each distinct tensor counted once."""
    seen: dict[int, int] = {}

    def visit(v: object) -> None:
        if isinstance(v, torch.Tensor):
            seen[id(v)] = v.nbytes
        elif isinstance(v, list | tuple):
            for x in v:
                visit(x)

    for v in batch.values():
        visit(v)
    return sum(seen.values())


PLACEHOLDER_TOKEN, OTHER_TOKEN = 151655, 151643  # Qwen2.5-VL's <|image_pad|>, <|endoftext|>


def _show_refusals(batch: dict[str, Any], schema: py_wire.Schema) -> None:
    """Breaks one row of the batch four ways and prints what ``encode`` says of each."""
    row = next((i for i, grid in enumerate(batch["image_grid_thw"]) if grid.shape[0] > 0), None)
    if row is None:
        print("\n(no row has an image: run with more --samples to see what encode refuses)")
        return
    grid = batch["image_grid_thw"][row]
    ids = batch["input_ids"][row].clone()
    ids[int((ids == PLACEHOLDER_TOKEN).nonzero()[0])] = OTHER_TOKEN
    patches = int(grid[-1].prod())
    breaks: dict[str, dict[str, Any]] = {
        f"row {row}'s last image dropped": {
            "pixel_values": batch["pixel_values"][row][:-patches],
            "image_grid_thw": grid[:-1],
        },
        f"row {row}: one placeholder token overwritten": {"input_ids": ids},
        f"row {row}: advantages one token short": {"advantages": batch["advantages"][row][:-1]},
    }
    print("\nwhat encode refuses (each a silent failure in a hand-rolled pipeline):")
    for what, changes in [*breaks.items(), ("reward as float64", {})]:
        broken = dict(batch)
        for name, value in changes.items():
            rows = list(batch[name])
            rows[row] = value
            broken[name] = rows
        if not changes:
            broken["reward"] = batch["reward"].double()
        try:
            py_wire.encode(broken, schema)
        except py_wire.WireError as err:
            message = str(err)
            print(f"  {what:<44} {type(err).__name__}: {message[:110]}{'…' * (len(message) > 110)}")
        else:
            raise SystemExit(f"demo: encode accepted a batch with {what}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args(argv)

    schema = py_wire.load_schema("qwen2_5_vl")
    batch = qwen2_5_vl_batch(args.samples, seed=args.seed)
    frame = py_wire.encode(batch, schema)
    decoded = py_wire.decode(frame)
    assert_batch_equal(decoded, batch, schema)

    print(f"schema {schema.name} v{schema.version}  {schema.fingerprint[:19]}…")
    print(f"{frame.num_rows} rows, frame {len(frame) / 2**20:.1f} MiB; round trip bit-exact\n")
    print(f"{'field':<22}{'tier':<11}{'dtype':<10}{'rows':>6}{'segments':>10}{'bytes':>14}")
    for f in frame.layout.fields:
        value = decoded[f.name]
        segments = value.num_segments if isinstance(value, py_wire.PackedTensor) else "-"
        print(
            f"{f.name:<22}{f.tier:<11}{f.stored_dtype:<10}{frame.num_rows:>6}"
            f"{segments!s:>10}{f.values.nbytes:>14,}"
        )

    _show_refusals(batch, schema)

    payload = _payload_bytes(batch)
    src = torch.empty(payload, dtype=torch.uint8).fill_(1)
    dst = torch.empty_like(src)
    t_memcpy = _median_seconds(lambda: dst.copy_(src), args.reps)
    t_encode = _median_seconds(lambda: py_wire.encode(batch, schema), args.reps)
    t_decode = _median_seconds(lambda: py_wire.decode(frame), args.reps)
    gbs = payload / 1e9
    print(f"\npayload {payload / 2**20:.1f} MiB (distinct input tensors)")
    print(f"{'memcpy (preallocated)':<24}{t_memcpy * 1e3:9.2f} ms {gbs / t_memcpy:8.2f} GB/s")
    print(
        f"{'py_wire.encode':<24}{t_encode * 1e3:9.2f} ms {gbs / t_encode:8.2f} GB/s"
        f"   {t_encode / t_memcpy:5.2f}x memcpy"
    )
    print(
        f"{'py_wire.decode':<24}{t_decode * 1e3:9.2f} ms {gbs / t_decode:8.2f} GB/s"
        f"   {t_decode / t_memcpy:5.2f}x memcpy (zero-copy views)"
    )


if __name__ == "__main__":
    main()
