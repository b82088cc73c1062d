"""Frame ops (take_rows, concat, chunk, shard) against rows: time, GB/s, the ratio to a memcpy
of the same output bytes into preallocated buffers, one per output frame (same process, warm
memory), and peak memory beyond the output frame, per row. Each case runs in a fresh process so
peak RSS is its own.

    .venv/bin/python benchmarks/ops_memory.py --rows 1000 65536 262144 1048576 --chart out.png

Every timed call (op and baselines alike) starts with cold caches: twice the last-level cache
is written before it, so each reads its source from memory. Two baselines, timed beside the op
rep by rep: ``memcpy`` is torch's ``copy_`` into
preallocated tensors; ``floor`` is libc's ``memcpy`` (``ctypes.memmove``) into anonymous
mappings advised ``MADV_NOHUGEPAGE`` and written once, with glibc told to stream from py_wire's
own threshold (``GLIBC_TUNABLES``, as ``encode_floor.py`` explains), so it is one streaming
memcpy per output frame wherever py_wire streams.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import machine
from encode_floor import py_wire_threshold

OPS = ("take_rows", "concat", "chunk", "shard")

CHILD = r"""
import json, os, resource, statistics, sys, time
import ctypes, mmap
import torch, py_wire
torch.set_num_threads(1)
rows, tokens, op, reps = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
schema = py_wire.load_schema("text_grpo")
lengths = torch.full((rows,), tokens, dtype=torch.int64)
values = torch.arange(rows * tokens, dtype=torch.int64)
nested = torch.nested.nested_tensor_from_jagged(values, torch.arange(0, rows * tokens + 1, tokens))
floats = torch.nested.nested_tensor_from_jagged(values.float(), nested.offsets())
batch = {"input_ids": nested, "advantages": floats, "generation_logprobs": floats,
         "input_lengths": lengths, "loss_multiplier": torch.ones(rows), "reward": torch.ones(rows)}
frame = py_wire.encode(batch, schema, threads=1)
ops = {
    "take_rows": lambda: [py_wire.take_rows(frame, range(rows))],
    "concat": lambda: [py_wire.concat([frame, frame])],
    "chunk": lambda: py_wire.chunk(frame, 8),
    "shard": lambda: [py_wire.shard(frame, 1, 2)],
}
# Peak memory of the first (cold) call beyond what this process already peaked at; then warm
# calls (pooled output buffers, warm code), each beside a memcpy of the same output bytes.
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
out = ops[op]()
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
out_bytes = sum(len(f) for f in out)
out_rows = sum(f.num_rows for f in out)
sources = [torch.frombuffer(f, dtype=torch.uint8) for f in out]
# One preallocated destination per output frame, as the op writes each into its own buffer
# (copying every piece into one reused buffer keeps it in cache and flatters memcpy).
dsts = [torch.empty(len(f), dtype=torch.uint8) for f in out]
def memcpy():
    for src, dst in zip(sources, dsts):
        dst.copy_(src)
def mapping(n):
    m = mmap.mmap(-1, max(n, 1))
    m.madvise(mmap.MADV_NOHUGEPAGE)
    ctypes.memset(ctypes.addressof(ctypes.c_char.from_buffer(m)), 1, max(n, 1))
    return m
maps = [mapping(len(f)) for f in out]
pieces = [(ctypes.addressof(ctypes.c_char.from_buffer(m)), s.data_ptr(), len(f))
          for m, s, f in zip(maps, sources, out)]
def floor():
    for d, s, n in pieces:
        ctypes.memmove(d, s, n)
memcpy()
floor()
del out
# Before every timed call, caches are flushed by writing twice the last-level cache: each
# method then reads its source from memory, as a copy of a frame that just arrived does (else
# the baselines, which copy the op's output, would find it in the cache the op left it in).
evict = torch.zeros(int(sys.argv[5]), dtype=torch.uint8)
def cold():
    evict.add_(1)
op_times, copy_times, floor_times = [], [], []
for _ in range(reps):
    cold()
    t = time.perf_counter()
    ops[op]()
    op_times.append(time.perf_counter() - t)
    cold()
    t = time.perf_counter()
    memcpy()
    copy_times.append(time.perf_counter() - t)
    cold()
    t = time.perf_counter()
    floor()
    floor_times.append(time.perf_counter() - t)
print(json.dumps({"seconds": statistics.median(op_times),
                  "memcpy_seconds": statistics.median(copy_times),
                  "floor_seconds": statistics.median(floor_times), "out_bytes": out_bytes,
                  "out_rows": out_rows, "frame_bytes": len(frame),
                  "peak_growth": after - before}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1000, 65536, 262144, 1048576])
    parser.add_argument("--tokens", type=int, default=16, help="tokens per row")
    parser.add_argument("--reps", type=int, default=5, help="warm calls per case (median)")
    parser.add_argument("--chart", type=Path, help="write a PNG of time and memory against rows")
    args = parser.parse_args()
    env = dict(os.environ, PY_WIRE_THREADS="1")
    threshold = py_wire_threshold()
    tunable = f"glibc.cpu.x86_non_temporal_threshold={threshold:#x}"
    env["GLIBC_TUNABLES"] = ":".join(filter(None, [env.get("GLIBC_TUNABLES"), tunable]))
    print(machine.describe())
    print(f"py_wire and the floor's memcpy stream from {threshold / 2**20:.0f} MiB")
    evict_bytes = max(4 * threshold, 64 << 20)  # twice the last-level cache
    print(f"caches flushed before every timed call ({evict_bytes >> 20} MiB written)")
    extra = "peak beyond output, B/out row"
    print(
        f"{'op':<10}{'rows':>9}{'warm ms':>9}{'memcpy ms':>10}{'x memcpy':>9}{'floor ms':>9}"
        f"{'x floor':>8}{'GB/s':>7}{'out MB':>8}{extra:>31}"
    )
    results: dict[str, list[tuple[int, float, float]]] = {op: [] for op in OPS}
    for rows in args.rows:
        for op in OPS:
            child_args = (rows, args.tokens, op, args.reps, evict_bytes)
            done = subprocess.run(
                [sys.executable, "-c", CHILD, *map(str, child_args)],
                capture_output=True,
                text=True,
                env=env,
                check=True,
            )
            r = json.loads(done.stdout)
            extra = max(r["peak_growth"] - r["out_bytes"], 0) / max(r["out_rows"], 1)
            gbs = r["out_bytes"] / r["seconds"] / 1e9
            ratio = r["seconds"] / r["memcpy_seconds"]
            print(
                f"{op:<10}{rows:>9}{r['seconds'] * 1e3:>9.1f}{r['memcpy_seconds'] * 1e3:>10.1f}"
                f"{ratio:>9.2f}{r['floor_seconds'] * 1e3:>9.1f}"
                f"{r['seconds'] / r['floor_seconds']:>8.2f}{gbs:>7.1f}"
                f"{r['out_bytes'] / 1e6:>8.1f}{extra:>31.0f}"
            )
            results[op].append((rows, ratio, extra))
    if args.chart:
        chart(results, args.chart)


def chart(results: dict[str, list[tuple[int, float, float]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for op, points in results.items():
        rows = [p[0] for p in points]
        left.plot(rows, [p[1] for p in points], marker="o", label=op)
        right.plot(rows, [p[2] for p in points], marker="o", label=op)
    left.axhline(1.0, color="k", linewidth=0.8)
    right.axhline(64, color="red", linestyle="--", linewidth=1, label="64 B/row target")
    axes: list[Any] = [left, right]
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xlabel("rows")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    left.set_ylabel("x memcpy of the same output (median, warm)")
    left.set_title("frame ops: time against a memcpy")
    right.set_ylabel("peak RSS beyond the output, bytes per row")
    right.set_title("frame ops: memory")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"chart: {path}")


if __name__ == "__main__":
    main()
