"""Encode and frame ops against the physical floor (issues 19, 41): one streaming memcpy of
the payload.

    .venv/bin/python benchmarks/encode_floor.py --runs 3    # --sizes-mb 8 64 217 512 1024 2560

Side by side in one child process per size and run (reps interleaved, so a neighbour's load
hits every method alike), on the vlm-like Qwen2.5-VL batch of ``encode_curve.py`` (rows drawn
until the payload reaches the size; most bytes are large ``pixel_values`` segments):

- ``floor``: one ``memcpy`` (libc's, through ``ctypes.memmove``) of the whole payload from one
  contiguous buffer into another: the physical floor;
- ``per tensor``: one libc ``memcpy`` per payload tensor into that destination (what copying the
  tensors one by one costs; each is below libc's streaming threshold);
- ``encode``: ``py_wire.encode(batch, schema, threads=1)``, each frame dropped before the next
  (repeated encodes reuse the pooled mapping);
- the frame ops, one thread, each writing about the payload: ``take_rows`` (every row of the
  encoded frame, shuffled), ``concat`` (its two halves back into one frame) and ``chunk`` (into
  8 frames).

The baselines' buffers are anonymous mappings advised ``MADV_NOHUGEPAGE`` (numpy would advise
huge pages for large arrays; py_wire's frames get none) and written once before timing, so no
method pays page faults. glibc's ``memcpy`` streams (non-temporal stores) only above its
``x86_non_temporal_threshold``, which differs between machines (99 MiB on one Intel Xeon here,
288 MiB on an AMD EPYC). So that the floor is a *streaming* memcpy wherever py_wire streams,
each child runs with ``GLIBC_TUNABLES=glibc.cpu.x86_non_temporal_threshold`` set to py_wire's own
streaming threshold (``py_wire._native.streaming_threshold()``: the smaller of half the
last-level cache and glibc's own threshold, or ``PY_WIRE_STREAMING``): py_wire's copies are
unchanged by that (frames below it hold no copy that large; frames above it are written with
py_wire's own streaming stores). The CPU, the last-level cache it reports, glibc's own threshold
and py_wire's are printed above the figures. ``--glibc-default`` keeps glibc's own threshold.

Prints each size's medians and the ratio of encode and of each op to the floor; with ``--runs``
above 1, the spread (lowest-highest) of each ratio over the runs, and of the ratio of each
method's fastest rep to the floor's (on a shared machine, what a neighbour's load skews least).
Writes ``encode_floor.json`` under ``--out``.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import machine

MB = 10**6
MIB = 2**20
OPS = ("take_rows", "concat", "chunk")


def py_wire_threshold() -> int:
    """The frame size above which py_wire streams in this process (``memory/stream.rs``)."""
    return streaming_report()[0]


def streaming_report() -> tuple[int, int | None, int | None]:
    """py_wire's streaming threshold, the last-level cache cpu0 reports and glibc's
    ``x86_non_temporal_threshold``, as py_wire reads them (``None``: not readable here)."""
    from py_wire import _native

    return _native.streaming_threshold()


# -- child: one size ---------------------------------------------------------------------------


def _mapping(n: int) -> tuple[mmap.mmap, int]:
    """An anonymous mapping of ``n`` bytes without huge pages, every page written once, and
    its address."""
    m = mmap.mmap(-1, max(n, 1))
    if hasattr(mmap, "MADV_NOHUGEPAGE"):
        m.madvise(mmap.MADV_NOHUGEPAGE)
    ctypes.memset(_address(m), 1, max(n, 1))
    return m, _address(m)


def _address(m: mmap.mmap) -> int:
    return ctypes.addressof(ctypes.c_char.from_buffer(m))


def run_size(target: int, reps: int, seed: int) -> dict[str, Any]:
    os.environ.setdefault("PY_WIRE_THREADS", "1")
    import torch
    from encode_curve import _tensors, _vlm_rows

    import py_wire

    torch.set_num_threads(max(1, len(os.sched_getaffinity(0))))  # generation only
    batch, _ = _vlm_rows(target, seed)
    torch.set_num_threads(1)
    schema = py_wire.load_schema("qwen2_5_vl")
    tensors = [t.contiguous() for t in _tensors(batch)]
    sizes = [t.nbytes for t in tensors]
    payload = sum(sizes)

    source, src = _mapping(payload)
    dest, dst = _mapping(payload)
    pieces = []  # (destination, source, bytes) of each tensor's copy
    at = 0
    for t, n in zip(tensors, sizes, strict=True):
        ctypes.memmove(src + at, t.data_ptr(), n)  # the floor's source holds the same bytes
        pieces.append((dst + at, t.data_ptr(), n))
        at += n
    memmove = ctypes.memmove

    def floor() -> None:
        memmove(dst, src, payload)

    def per_tensor() -> None:
        for d, s, n in pieces:
            memmove(d, s, n)

    def encode() -> None:
        py_wire.encode(batch, schema, threads=1)

    os.environ["PY_WIRE_THREADS"] = "1"  # the frame ops' copy threads
    frame = py_wire.encode(batch, schema, threads=1)
    rows = frame.num_rows
    shuffled = torch.randperm(rows, generator=torch.Generator().manual_seed(seed)).tolist()
    halves = py_wire.chunk(frame, 2)

    def take_rows() -> None:
        py_wire.take_rows(frame, shuffled)

    def concat() -> None:
        py_wire.concat(halves)

    def chunk() -> None:
        py_wire.chunk(frame, 8)

    calls = {"floor": floor, "per tensor": per_tensor, "encode": encode}
    calls |= {"take_rows": take_rows, "concat": concat, "chunk": chunk}
    for fn in calls.values():  # warm-up: code, the frame pool, the caches
        fn()
    # The baselines wrote what the encode carries: the payload, in the batch's order.
    assert bytes(memoryview(source)[: min(payload, 4096)]) == bytes(
        memoryview(dest)[: min(payload, 4096)]
    )
    assert len(frame) >= payload, (len(frame), payload)
    decoded = py_wire.decode(frame)
    assert decoded["input_lengths"].shape[0] == len(batch["input_ids"])
    del decoded
    assert sum(len(f) for f in py_wire.chunk(frame, 8)) >= payload

    times: dict[str, list[float]] = {name: [] for name in calls}
    clock = time.perf_counter
    for _ in range(reps):
        for name, fn in calls.items():
            t = clock()
            fn()
            times[name].append((clock() - t) * 1e3)
    medians = {name: statistics.median(v) for name, v in times.items()}
    return {
        "target_bytes": target,
        "payload_bytes": payload,
        "tensors": len(tensors),
        "largest_tensor_bytes": max(sizes),
        "rows": len(batch["input_ids"]),
        "times_ms": times,
        "median_ms": medians,
        "frame_bytes": len(frame),
        "encode_over_floor": medians["encode"] / medians["floor"],
        "encode_over_per_tensor": medians["encode"] / medians["per tensor"],
        "ops_over_floor": {op: medians[op] / medians["floor"] for op in OPS},
        # each method's fastest rep against the floor's: what a neighbour's load leaves least
        "best_over_floor": {
            name: min(times[name]) / min(times["floor"]) for name in ("encode", *OPS)
        },
        "load_average_after": os.getloadavg(),
    }


# -- parent ------------------------------------------------------------------------------------


def human(n: float) -> str:
    if n >= 2**62:
        return "never"
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / MIB:.0f} MiB"


def spread(values: list[float]) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:.2f}" if len(values) == 1 else f"{lo:.2f}-{hi:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mb", type=float, nargs="+", default=[8, 64, 217, 512, 1024, 2560])
    parser.add_argument("--reps", type=int, default=5, help="timed reps per size (median)")
    parser.add_argument("--runs", type=int, default=1, help="children per size (spread)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--glibc-default", action="store_true", help="keep glibc's threshold")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "out" / "floor")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker is not None:
        print(json.dumps(run_size(args.worker, args.reps, args.seed)))
        return

    threshold, cache, glibc = streaming_report()
    env = dict(os.environ, PY_WIRE_THREADS="1", OMP_NUM_THREADS="1")
    if not args.glibc_default:
        tunable = f"glibc.cpu.x86_non_temporal_threshold={threshold:#x}"
        env["GLIBC_TUNABLES"] = ":".join(filter(None, [env.get("GLIBC_TUNABLES"), tunable]))
    print("encode and frame ops at one thread against one streaming memcpy of the payload (vlm)")
    print(machine.describe())
    print(
        f"last-level cache cpu0 reports: {human(cache) if cache else 'none'}; glibc's "
        f"x86_non_temporal_threshold here: {human(glibc) if glibc else 'unknown'}; py_wire "
        f"streams frames above {human(threshold)} (the smaller of half that cache and glibc's, "
        "or PY_WIRE_STREAMING)"
    )
    print(
        "children's glibc threshold: "
        + ("glibc's own" if args.glibc_default else f"{human(threshold)} (GLIBC_TUNABLES)")
        + f"; {args.reps} interleaved reps per child, {args.runs} run(s) per size"
    )
    points: list[dict[str, Any]] = []
    header = (
        f"{'payload':>10} {'tensors':>8} {'largest':>9} {'floor ms':>9} {'per tensor':>11} "
        f"{'encode':>8} "
        + " ".join(f"{op:>9}" for op in OPS)
        + "  | ÷ floor: encode "
        + " ".join(f"{op:>9}" for op in OPS)
    )
    print(header)
    for size_mb in args.sizes_mb:
        target = int(size_mb * (MIB if size_mb != 217 else MB))
        avail = machine.meminfo_gib("MemAvailable") or 0.0
        # the batch, two baseline buffers, the frame, its halves, the ops' outputs
        need = (7.5 * target + 0.5 * 2**30) / 2**30
        if need > avail:
            print(f"{human(target):>10}  skipped: needs ~{need:.1f} GiB, {avail:.1f} available")
            continue
        runs = []
        for _ in range(args.runs):
            cmd = [sys.executable, __file__, "--worker", str(target), "--reps", str(args.reps)]
            cmd += ["--seed", str(args.seed)]
            child = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if child.returncode != 0:
                print(child.stderr[-3000:], file=sys.stderr)
                raise SystemExit(f"the {human(target)} child failed ({child.returncode})")
            p = json.loads(child.stdout.strip().splitlines()[-1])
            runs.append(p)
            m, ops = p["median_ms"], p["ops_over_floor"]
            print(
                f"{human(p['payload_bytes']):>10} {p['tensors']:>8} "
                f"{human(p['largest_tensor_bytes']):>9} {m['floor']:>9.1f} "
                f"{m['per tensor']:>11.1f} {m['encode']:>8.1f} "
                + " ".join(f"{m[op]:>9.1f}" for op in OPS)
                + f"  | {p['encode_over_floor']:>14.2f} "
                + " ".join(f"{ops[op]:>9.2f}" for op in OPS),
                flush=True,
            )
        points.append({"target_bytes": target, "runs": runs})
    print(f"\nload average after: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("÷ floor, lowest-highest over runs:")
    for point in points:
        runs = point["runs"]
        ops = ", ".join(f"{op} {spread([r['ops_over_floor'][op] for r in runs])}" for op in OPS)
        print(
            f"  {human(runs[0]['payload_bytes']):>10}: encode "
            f"{spread([r['encode_over_floor'] for r in runs])} (÷ per tensor "
            f"{spread([r['encode_over_per_tensor'] for r in runs])}), {ops}"
        )
        best = ", ".join(
            f"{name} {spread([r['best_over_floor'][name] for r in runs])}"
            for name in ("encode", *OPS)
        )
        print(f"  {'':>10}  fastest reps: {best}")
    args.out.mkdir(parents=True, exist_ok=True)
    record = {"machine": machine.facts(), "py_wire_threshold": threshold, "points": points}
    record |= {"last_level_cache": cache, "glibc_threshold": glibc}
    record["glibc_tunables"] = env.get("GLIBC_TUNABLES")
    (args.out / "encode_floor.json").write_text(json.dumps(record, indent=1))
    print(f"wrote {args.out / 'encode_floor.json'}")


if __name__ == "__main__":
    main()
