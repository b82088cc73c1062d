"""Encode against memcpy at one thread, from 32 MiB to --max-gb GiB of payload in doubling steps.

    .venv/bin/python benchmarks/encode_curve.py --max-gb 8 --reps 5

Each size runs in its own child process (so nothing one size allocated, pooled mappings
included, is left for the next) on a vlm-like batch (Qwen2.5-VL rows as in
``profiles._vlm_batch``: 0-4 images of 256-2048 float32 patches each, so most bytes are large
``pixel_values`` segments), built row by row until its payload reaches the size. Side by side, in
the same process, interleaved rep by rep (so a neighbour's load hits all three alike):

- ``memcpy``: every payload tensor's bytes ``torch.cat`` into one preallocated buffer (the
  ``memcpy → prealloc`` peer of bench.py);
- ``encode``: ``py_wire.encode(batch, schema, threads=1)``, each frame dropped before the next
  (repeated encodes reuse the pooled mapping, ``PY_WIRE_FRAME_POOL_BYTES``);
- ``encode(out=)``: into a preallocated buffer (the memcpy buffer, sized by
  ``py_wire.encoded_nbytes``).

One untimed warm-up call of each (its time is reported as "first call": page faults included),
then the median of ``--reps``. Before timing, the two encodes' frames are checked to be
byte-identical and to decode to the batch's pixels. Memory per size: the batch, one frame and the
preallocated buffer (about 3x the payload); above ``--lean-above-gb`` each encode runs in its own
child beside its own memcpy (about 2x: for the pooled encode the memcpy's destination is the
frame the previous encode made), so 8 GiB fits in 24 GiB. A size that would not fit in
MemAvailable is skipped with a note. Writes encode_curve.json, encode_curve.md and
encode_curve.png under --out.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import machine

MIB = 2**20
GIB = 2**30
TIMES = "\u00d7"  # the multiplication sign, spelled out for the linter
TARGET = 1.25  # issue 10: encode at one thread <= 1.25x memcpy at every size
METHODS = ("memcpy", "encode", "encode_out")
LABELS = {
    "memcpy": "memcpy → preallocated",
    "encode": "py_wire.encode (pooled)",
    "encode_out": "py_wire.encode(out=preallocated)",
}


# -- child: one size ---------------------------------------------------------------------------


def _vlm_rows(target: int, seed: int) -> tuple[dict[str, Any], int]:
    """A qwen2_5_vl batch drawn row by row like ``profiles._vlm_batch``, until its payload
    reaches ``target`` bytes. Returns (batch, payload bytes)."""
    import numpy as np
    import torch
    from profiles import IMAGE_PAD, PATCH_DIM, _image_grid, _scalars, _token_floats, _vlm_ids

    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed)
    ids: list[torch.Tensor] = []
    pixels: list[torch.Tensor | None] = []
    grids: list[torch.Tensor | None] = []
    payload = 0
    while payload < target:
        count = int(rng.choice(5, p=[0.25, 0.35, 0.2, 0.1, 0.1]))
        grid = [_image_grid(rng) for _ in range(count)]
        while grid and payload + sum(h * w for h, w in grid) * PATCH_DIM * 4 > target * 1.02:
            grid.pop()  # land within 2% of the size: the last rows carry fewer images
        count = len(grid)
        row_ids = torch.from_numpy(_vlm_ids(rng, grid))
        ids.append(row_ids)
        patches = sum(h * w for h, w in grid)
        if grid:
            pixels.append(torch.empty(patches, PATCH_DIM).normal_(generator=gen))
            grids.append(torch.tensor([[1, h, w] for h, w in grid], dtype=torch.int64))
        else:
            pixels.append(None)
            grids.append(None)
        # input_ids + mm_token_type_ids (int64), advantages + logprobs (float32), 3 scalars
        payload += len(row_ids) * 24 + patches * PATCH_DIM * 4 + count * 24 + 16
    lengths = [len(t) for t in ids]
    batch = {
        "input_ids": ids,
        "mm_token_type_ids": [(t == IMAGE_PAD).to(torch.int64) for t in ids],
        **_token_floats(lengths, gen),
        "pixel_values": pixels,
        "image_grid_thw": grids,
        **_scalars(lengths, gen),
    }
    return batch, payload


def _tensors(batch: dict[str, Any]) -> list[Any]:
    import torch

    out = []
    for value in batch.values():
        if isinstance(value, torch.Tensor):
            out.append(value)
        else:
            out.extend(t for t in value if t is not None)
    return out


def _same_bytes(a: Any, b: Any, chunk: int = 64 * MIB) -> bool:
    """Byte equality of two buffers, compared in chunks (no payload-sized temporary)."""
    import numpy as np

    x = np.frombuffer(memoryview(a), dtype=np.uint8)
    y = np.frombuffer(memoryview(b), dtype=np.uint8)
    if x.shape != y.shape:
        return False
    return all(np.array_equal(x[i : i + chunk], y[i : i + chunk]) for i in range(0, len(x), chunk))


def run_size(target: int, reps: int, seed: int, only: str | None = None) -> dict[str, Any]:
    """One size. ``only="encode"`` / ``"encode_out"`` (the lean mode for sizes whose three
    buffers would not fit): that method beside a memcpy, in about twice the payload; for
    ``encode`` the memcpy's preallocated destination is the frame the previous encode made
    (warm, pooled memory), dropped before the next encode."""
    os.environ.setdefault("PY_WIRE_THREADS", "1")
    import torch

    import py_wire

    t0 = time.perf_counter()
    torch.set_num_threads(max(1, len(os.sched_getaffinity(0))))  # generation only
    batch, _ = _vlm_rows(target, seed)
    torch.set_num_threads(1)
    build_s = time.perf_counter() - t0

    schema = py_wire.load_schema("qwen2_5_vl")
    tensors = _tensors(batch)
    payload = sum(t.nbytes for t in tensors)
    frame_bytes = py_wire.encoded_nbytes(batch, schema)

    def byte_view(t: torch.Tensor) -> torch.Tensor:
        return t.reshape(-1).view(torch.uint8)

    if only == "encode":
        return _lean_encode(batch, schema, tensors, payload, frame_bytes, reps, build_s, target)
    buffer = torch.empty(frame_bytes, dtype=torch.uint8)  # preallocated, not yet touched
    out = buffer.numpy()
    dst = buffer[:payload]
    calls = {
        "memcpy": lambda: torch.cat([byte_view(t) for t in tensors], out=dst),
        "encode": lambda: py_wire.encode(batch, schema, threads=1),
        "encode_out": lambda: py_wire.encode(batch, schema, threads=1, out=out),
    }
    methods = METHODS if only is None else ("memcpy", "encode_out")

    first: dict[str, float] = {}
    for name in methods:
        t = time.perf_counter()
        calls[name]()
        first[name] = (time.perf_counter() - t) * 1e3

    # Correctness, outside the timing: both encodes give the same bytes, which decode to the
    # batch (every pixel row of the first and last image rows, and the row count).
    borrowed = py_wire.encode(batch, schema, threads=1, out=out)
    pooled = py_wire.encode(batch, schema, threads=1) if only is None else borrowed
    assert len(pooled) == frame_bytes == len(borrowed), (len(pooled), frame_bytes)
    assert _same_bytes(pooled, borrowed), "encode and encode(out=) frames differ"
    decoded = py_wire.decode(pooled)
    rows = [i for i, p in enumerate(batch["pixel_values"]) if p is not None]
    pv = decoded["pixel_values"]
    for i in (rows[0], rows[-1]) if rows else ():
        (got,) = pv[i]  # one segment per row
        assert torch.equal(got.view(torch.uint8), batch["pixel_values"][i].view(torch.uint8))
    assert decoded["input_lengths"].shape[0] == len(batch["input_ids"])
    del pooled, borrowed, decoded, pv

    times: dict[str, list[float]] = {name: [] for name in methods}
    for _ in range(reps):
        for name in methods:  # interleaved: drift and neighbours hit every method alike
            t = time.perf_counter()
            calls[name]()
            times[name].append((time.perf_counter() - t) * 1e3)
    return _point(batch, tensors, payload, frame_bytes, target, build_s, first, times)


def _lean_encode(
    batch: dict[str, Any],
    schema: Any,
    tensors: list[Any],
    payload: int,
    frame_bytes: int,
    reps: int,
    build_s: float,
    target: int,
) -> dict[str, Any]:
    import torch

    import py_wire

    first: dict[str, float] = {}
    times: dict[str, list[float]] = {"memcpy": [], "encode": []}
    for rep in range(reps + 1):
        t = time.perf_counter()
        frame = py_wire.encode(batch, schema, threads=1)
        encode_ms = (time.perf_counter() - t) * 1e3
        assert len(frame) == frame_bytes
        dst = torch.frombuffer(frame, dtype=torch.uint8)[:payload]
        t = time.perf_counter()
        torch.cat([t.reshape(-1).view(torch.uint8) for t in tensors], out=dst)
        memcpy_ms = (time.perf_counter() - t) * 1e3
        del dst, frame  # back to the pool for the next encode
        if rep == 0:
            first = {"encode": encode_ms, "memcpy": memcpy_ms}
        else:
            times["encode"].append(encode_ms)
            times["memcpy"].append(memcpy_ms)
    return _point(batch, tensors, payload, frame_bytes, target, build_s, first, times)


def _point(
    batch: dict[str, Any],
    tensors: list[Any],
    payload: int,
    frame_bytes: int,
    target: int,
    build_s: float,
    first: dict[str, float],
    times: dict[str, list[float]],
) -> dict[str, Any]:
    medians = {name: statistics.median(v) for name, v in times.items()}
    pixel_bytes = sum(p.nbytes for p in batch["pixel_values"] if p is not None)
    return {
        "target_bytes": target,
        "payload_bytes": payload,
        "frame_bytes": frame_bytes,
        "pixel_share": pixel_bytes / payload,
        "rows": len(batch["input_ids"]),
        "tensors": len(tensors),
        "build_s": build_s,
        "first_call_ms": first,
        "times_ms": times,
        "median_ms": medians,
        "ratio": {name: medians[name] / medians["memcpy"] for name in medians},
        "load_average_after": os.getloadavg(),
    }


# -- parent: the curve -------------------------------------------------------------------------


def _merge(results: list[dict[str, Any]]) -> dict[str, Any]:
    """A lean size's two children as one point: each method's ratio is to the memcpy of its
    own child; the memcpy shown is the encode child's."""
    encode, out = results
    p = dict(encode, lean=True)
    for key in ("first_call_ms", "times_ms", "median_ms", "ratio"):
        p[key] = dict(encode[key])
        p[key]["encode_out"] = out[key]["encode_out"]
    p["memcpy_out_ms"] = out["median_ms"]["memcpy"]
    return p


def sizes(min_mb: int, max_gb: float) -> list[int]:
    out, size = [], min_mb * MIB
    while size <= max_gb * GIB + 1:
        out.append(size)
        size *= 2
    return out


def human(n: float) -> str:
    return f"{n / GIB:.2f} GiB" if n >= GIB else f"{n / MIB:.0f} MiB"


def table(points: list[dict[str, Any]]) -> str:
    head = (
        f"| payload | rows | memcpy ms | encode ms | {TIMES} memcpy | encode(out=) ms "
        f"| {TIMES} memcpy "
        "| first call: memcpy / encode / out= ms | GB/s encode | MemAvailable before | load |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for p in points:
        if "skipped" in p:
            lines.append(f"| {human(p['target_bytes'])} | skipped: {p['skipped']} |||||||||\n")
            continue
        m, r, f = p["median_ms"], p["ratio"], p["first_call_ms"]
        lines.append(
            f"| {human(p['payload_bytes'])} | {p['rows']} | {m['memcpy']:.1f} | "
            f"{m['encode']:.1f} | {r['encode']:.2f} | {m['encode_out']:.1f} | "
            f"{r['encode_out']:.2f} | {f['memcpy']:.0f} / {f['encode']:.0f} / "
            f"{f['encode_out']:.0f} | {p['payload_bytes'] / m['encode'] / 1e6:.2f} | "
            f"{p['mem_available_gib_before']:.1f} GiB | {p['load_before']:.2f} |\n"
        )
    return head + "".join(lines)


def verdict(points: list[dict[str, Any]]) -> list[str]:
    done = [p for p in points if "skipped" not in p]
    if not done:
        return ["no size ran"]
    out = []
    for name in ("encode", "encode_out"):
        ratios = [p["ratio"][name] for p in done]
        worst = max(range(len(done)), key=lambda i: ratios[i])
        over = [human(p["payload_bytes"]) for p in done if p["ratio"][name] > TARGET]
        steps = [
            f"{human(done[i - 1]['payload_bytes'])} → {human(done[i]['payload_bytes'])} "
            f"({ratios[i - 1]:.2f} → {ratios[i]:.2f})"
            for i in range(1, len(done))
            if ratios[i] > ratios[i - 1] * 1.25 and ratios[i] > TARGET
        ]
        out.append(
            f"{LABELS[name]}: worst {ratios[worst]:.2f}x memcpy at "
            f"{human(done[worst]['payload_bytes'])}; target <= {TARGET}x "
            + ("met at every size" if not over else f"MISSED at {', '.join(over)}")
            + ("; steps: " + "; ".join(steps) if steps else "; no step")
        )
    return out


def chart(points: list[dict[str, Any]], path: Path, pool: str) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return f"no chart: matplotlib is not installed ({REQS})"
    done = [p for p in points if "skipped" not in p]
    if not done:
        return "no chart: no size ran"
    x = [p["payload_bytes"] / GIB for p in done]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.6))
    styles = {"memcpy": ("black", "o"), "encode": ("C0", "s"), "encode_out": ("C1", "^")}
    for name, (color, marker) in styles.items():
        gbs = [p["payload_bytes"] / p["median_ms"][name] / 1e6 for p in done]
        left.plot(x, gbs, color=color, marker=marker, label=LABELS[name])
        if name != "memcpy":
            ratios = [p["ratio"][name] for p in done]
            right.plot(x, ratios, color=color, marker=marker, label=LABELS[name])
    right.axhline(TARGET, color="red", linestyle="--", linewidth=1, label=f"target {TARGET}{TIMES}")
    right.axhline(1.0, color="k", linewidth=0.8)
    budget = _pool_budget_bytes(pool)
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xticks(x, [human(p["payload_bytes"]) for p in done], rotation=45, fontsize=8)
        ax.minorticks_off()
        if budget and x[0] <= budget / GIB <= x[-1]:
            ax.axvline(budget / GIB, color="grey", linestyle=":", label="pool budget")
        ax.set_xlabel("payload (GiB)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    left.set_ylabel("GB/s (payload / median)")
    left.set_title("encode at one thread against memcpy")
    right.set_ylabel(f"{TIMES} memcpy (median, same run)")
    right.set_title(f"ratio to memcpy (pool budget: {pool})")
    right.set_ylim(0, max(2.0, max(max(p["ratio"].values()) for p in done) * 1.1))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return f"chart: {path}"


REQS = "pyproject's bench extra"


def _pool_budget_bytes(pool: str) -> int | None:
    if pool.startswith("default"):
        return 2 * GIB
    try:
        return int(pool) or None
    except ValueError:
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min-mb", type=int, default=32, help="smallest payload, MiB")
    parser.add_argument("--max-gb", type=float, default=8.0, help="largest payload, GiB")
    parser.add_argument("--reps", type=int, default=5, help="timed reps per size after warm-up")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "out")
    parser.add_argument(
        "--force", action="store_true", help="run sizes that look too large for MemAvailable"
    )
    parser.add_argument(
        "--lean-above-gb",
        type=float,
        default=2.0,
        help="above this payload, run encode and encode(out=) in separate children (each beside "
        "its own memcpy) so a size needs about 2x its payload in memory instead of 3x",
    )
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--only", choices=("encode", "encode_out"), help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker is not None:
        print(json.dumps(run_size(args.worker, args.reps, args.seed, args.only)))
        return

    env = dict(os.environ, PY_WIRE_THREADS="1", OMP_NUM_THREADS="1")
    pool = env.get("PY_WIRE_FRAME_POOL_BYTES", "default (2 GiB)")
    print("encode at one thread against memcpy into a preallocated buffer (vlm batch)")
    print(machine.describe())
    print(f"pool budget: {pool}; reps {args.reps} after a warm-up; interleaved")
    points: list[dict[str, Any]] = []
    start = machine.facts()
    t_start = time.time()
    for target in sizes(args.min_mb, args.max_gb):
        avail = machine.meminfo_gib("MemAvailable") or 0.0
        load = os.getloadavg()[0]
        lean = target > args.lean_above_gb * GIB
        # batch + frame (+ buffer), plus the interpreter
        need = ((2.1 if lean else 3.1) * target + 0.5 * GIB) / GIB
        print(
            f"\n{human(target)}: MemAvailable {avail:.1f} GiB, need ~{need:.1f} GiB, "
            f"load {load:.2f}" + (" (lean: one child per method)" if lean else ""),
            flush=True,
        )
        if need > avail and not args.force:
            note = f"needs ~{need:.1f} GiB, {avail:.1f} GiB available"
            print(f"  skipped ({note}; --force runs it anyway)")
            points.append({"target_bytes": target, "skipped": note})
            continue
        children = []
        for only in ("encode", "encode_out") if lean else (None,):
            cmd = [sys.executable, __file__, "--worker", str(target), "--reps", str(args.reps)]
            cmd += ["--seed", str(args.seed)] + (["--only", only] if only else [])
            children.append(subprocess.run(cmd, capture_output=True, text=True, env=env))
        failed = [c for c in children if c.returncode != 0]
        if failed:
            print(failed[0].stderr[-3000:], file=sys.stderr)
            note = f"child failed with exit code {failed[0].returncode}"
            print(f"  skipped ({note})")
            points.append({"target_bytes": target, "skipped": note})
            continue
        results = [json.loads(c.stdout.strip().splitlines()[-1]) for c in children]
        p = _merge(results) if lean else results[0]
        p.update(mem_available_gib_before=avail, load_before=load)
        points.append(p)
        m, r = p["median_ms"], p["ratio"]
        print(
            f"  payload {human(p['payload_bytes'])} ({p['rows']} rows, "
            f"{p['pixel_share']:.0%} pixels), built in {p['build_s']:.1f} s\n"
            f"  memcpy {m['memcpy']:.1f} ms | encode {m['encode']:.1f} ms "
            f"({r['encode']:.2f}x) | encode(out=) {m['encode_out']:.1f} ms "
            f"({r['encode_out']:.2f}x) | first call: encode {p['first_call_ms']['encode']:.0f} "
            f"ms, memcpy {p['first_call_ms']['memcpy']:.0f} ms",
            flush=True,
        )
    end = machine.facts()
    lines = verdict(points)
    print("\n" + table(points))
    print("\n".join(lines))
    args.out.mkdir(parents=True, exist_ok=True)
    print(chart(points, args.out / "encode_curve.png", pool))
    (args.out / "encode_curve.json").write_text(
        json.dumps(
            {
                "machine_before": start,
                "machine_after": end,
                "pool_budget": pool,
                "reps": args.reps,
                "points": points,
                "verdict": lines,
            },
            indent=1,
        )
    )
    cmd = " ".join([Path(sys.executable).name, *sys.argv])
    (args.out / "encode_curve.md").write_text(
        "# encode at one thread against memcpy (vlm batch)\n\n"
        f"`{cmd}` (wall {time.time() - t_start:.0f} s), pool budget {pool}, medians of "
        f"{args.reps} interleaved reps after a warm-up; {TIMES} memcpy is the ratio to a memcpy "
        "of the same tensors into a preallocated buffer in the same process.\n\n"
        "Before:\n\n```\n"
        + machine.describe(start)
        + "\n```\n\n"
        + table(points)
        + "\n"
        + "\n".join(f"- {line}" for line in lines)
        + "\n\nAfter: load average "
        + ", ".join(f"{x:.2f}" for x in end["load_average"])
        + f", MemAvailable {end['mem_available_gib']:.1f} GiB\n"
    )
    print(f"wrote {args.out / 'encode_curve.md'} and {args.out / 'encode_curve.json'}")


if __name__ == "__main__":
    main()
