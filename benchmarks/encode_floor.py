"""Encode against the physical floor (issue 19): one streaming memcpy of the payload.

    .venv/bin/python benchmarks/encode_floor.py --runs 3    # --sizes-mb 8 64 217 512 1024 2560

Side by side in one child process per size and run (reps interleaved, so a neighbour's load
hits every method alike), on the vlm-like Qwen2.5-VL batch of ``encode_curve.py`` (rows drawn
until the payload reaches the size; most bytes are large ``pixel_values`` segments):

- ``floor``: one ``memcpy`` (libc's, through ``ctypes.memmove``) of the whole payload from one
  contiguous buffer into another: the physical floor;
- ``per tensor``: one libc ``memcpy`` per payload tensor into that destination (what copying the
  tensors one by one costs; each is below libc's streaming threshold);
- ``encode``: ``py_wire.encode(batch, schema, threads=1)``, each frame dropped before the next
  (repeated encodes reuse the pooled mapping).

The baselines' buffers are anonymous mappings advised ``MADV_NOHUGEPAGE`` (numpy would advise
huge pages for large arrays; py_wire's frames get none) and written once before timing, so no
method pays page faults. glibc's ``memcpy`` streams (non-temporal stores) only above its
``x86_non_temporal_threshold``, which differs between machines (99 MiB on one Intel Xeon here,
288 MiB on an AMD EPYC). So that the floor is a *streaming* memcpy wherever py_wire streams,
each child runs with ``GLIBC_TUNABLES=glibc.cpu.x86_non_temporal_threshold`` set to py_wire's own
streaming threshold (half the last-level cache, or ``PY_WIRE_STREAMING``): py_wire's copies are
unchanged by that (frames below it hold no copy that large; frames above it are written with
py_wire's own streaming stores), and both thresholds are printed. ``--glibc-default`` keeps
glibc's own threshold instead.

Prints each size's medians and the ratio of encode to both baselines; with ``--runs`` above 1,
the spread (lowest-highest) of each ratio over the runs. Writes ``encode_floor.json`` under
``--out``.
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
FALLBACK_THRESHOLD = 16 * MIB  # py_wire's when the CPU reports no cache sizes


def py_wire_threshold() -> int:
    """The frame size from which py_wire streams, by its rule (frame/stream.rs): the
    ``PY_WIRE_STREAMING`` byte count if set to one, else half cpu0's largest level-3 cache."""
    setting = os.environ.get("PY_WIRE_STREAMING", "").strip().lower()
    if setting.isdigit():
        return int(setting)
    best: tuple[int, int] | None = None
    root = Path("/sys/devices/system/cpu/cpu0/cache")
    for index in root.glob("index*") if root.exists() else ():
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
            size = (index / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        if kind == "Instruction" or not size.endswith("K"):
            continue
        size_bytes = int(size[:-1]) * 1024
        if best is None or (level, size_bytes) > best:
            best = (level, size_bytes)
    return best[1] // 2 if best else FALLBACK_THRESHOLD


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

    calls = {"floor": floor, "per tensor": per_tensor, "encode": encode}
    for fn in calls.values():  # warm-up: code, the frame pool, the caches
        fn()
    # The baselines wrote what the encode carries: the payload, in the batch's order.
    frame = py_wire.encode(batch, schema, threads=1)
    assert bytes(memoryview(source)[: min(payload, 4096)]) == bytes(
        memoryview(dest)[: min(payload, 4096)]
    )
    assert len(frame) >= payload, (len(frame), payload)
    decoded = py_wire.decode(frame)
    assert decoded["input_lengths"].shape[0] == len(batch["input_ids"])
    del decoded, frame

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
        "encode_over_floor": medians["encode"] / medians["floor"],
        "encode_over_per_tensor": medians["encode"] / medians["per tensor"],
        "load_average_after": os.getloadavg(),
    }


# -- parent ------------------------------------------------------------------------------------


def human(n: float) -> str:
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

    threshold = py_wire_threshold()
    env = dict(os.environ, PY_WIRE_THREADS="1", OMP_NUM_THREADS="1")
    if not args.glibc_default:
        tunable = f"glibc.cpu.x86_non_temporal_threshold={threshold:#x}"
        env["GLIBC_TUNABLES"] = ":".join(filter(None, [env.get("GLIBC_TUNABLES"), tunable]))
    print("encode at one thread against one streaming memcpy of its payload (vlm batch)")
    print(machine.describe())
    print(f"py_wire streams frames from {human(threshold)} (half the LLC, or PY_WIRE_STREAMING)")
    print(
        "children's glibc threshold: "
        + ("glibc's own" if args.glibc_default else f"{human(threshold)} (GLIBC_TUNABLES)")
        + f"; {args.reps} interleaved reps per child, {args.runs} run(s) per size"
    )
    points: list[dict[str, Any]] = []
    header = (
        f"{'payload':>10} {'tensors':>8} {'largest':>9} {'floor ms':>9} {'per tensor':>11} "
        f"{'encode':>9} {'÷ floor':>8} {'÷ per tensor':>13}"
    )
    print(header)
    for size_mb in args.sizes_mb:
        target = int(size_mb * (MIB if size_mb != 217 else MB))
        avail = machine.meminfo_gib("MemAvailable") or 0.0
        need = (4.2 * target + 0.5 * 2**30) / 2**30  # batch, two baseline buffers, a frame
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
            m = p["median_ms"]
            print(
                f"{human(p['payload_bytes']):>10} {p['tensors']:>8} "
                f"{human(p['largest_tensor_bytes']):>9} {m['floor']:>9.1f} "
                f"{m['per tensor']:>11.1f} {m['encode']:>9.1f} {p['encode_over_floor']:>8.2f} "
                f"{p['encode_over_per_tensor']:>13.2f}",
                flush=True,
            )
        points.append({"target_bytes": target, "runs": runs})
    print(f"\nload average after: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("encode ÷ floor, lowest-highest over runs:")
    for point in points:
        runs = point["runs"]
        print(
            f"  {human(runs[0]['payload_bytes']):>10}: ÷ floor "
            f"{spread([r['encode_over_floor'] for r in runs])}, ÷ per tensor "
            f"{spread([r['encode_over_per_tensor'] for r in runs])}"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    record = {"machine": machine.facts(), "py_wire_threshold": threshold, "points": points}
    record["glibc_tunables"] = env.get("GLIBC_TUNABLES")
    (args.out / "encode_floor.json").write_text(json.dumps(record, indent=1))
    print(f"wrote {args.out / 'encode_floor.json'}")


if __name__ == "__main__":
    main()
