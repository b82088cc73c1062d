"""A frame from host memory to the GPU, side by side in one run: the copy engine's ceiling
(a pinned buffer), a frame encoded straight into pinned memory (``encode(out=pinned)``) then
moved in one transfer, the same frame from pageable memory, a decode of a frame already on
the GPU (as an NCCL receive leaves it) against moving it back to the host first,
``py_wire.trainer.to`` of the decoded batch (one transfer per field, pageable or pinned first), and
the per-row moves a dict of
per-row tensors makes (NeMo-RL's ``BatchedDataDict.to``). Needs CUDA; prints a note and exits 0
without it. Medians in ms and GB/s of frame (or payload) bytes.

    .venv/bin/python benchmarks/h2d.py --mb 1024 --reps 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from encode_curve import MIB, _tensors, _vlm_rows  # benchmarks/ is sys.path[0]

import py_wire


def _cuda_ms(fn: Callable[[], Any], reps: int) -> float:
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=1024, help="payload in MiB (vlm batch)")
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("h2d.py: no CUDA device here; skipped")
        return
    os.environ.setdefault("PY_WIRE_THREADS", "1")
    torch.set_num_threads(max(1, len(os.sched_getaffinity(0))))
    batch, _ = _vlm_rows(args.mb * MIB, seed=0)
    torch.set_num_threads(1)
    schema = py_wire.load_schema("qwen2_5_vl")
    n = py_wire.encoded_nbytes(batch, schema)
    payload = sum(t.nbytes for t in _tensors(batch))
    frame = py_wire.encode(batch, schema, threads=1)
    pinned = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    pageable = torch.frombuffer(memoryview(frame), dtype=torch.uint8)
    device_buf = torch.empty(n, dtype=torch.uint8, device="cuda")
    decoded = py_wire.decode(frame)
    on_device = torch.frombuffer(memoryview(frame), dtype=torch.uint8).cuda()
    rows = [t for t in batch["pixel_values"] if t is not None]
    name = torch.cuda.get_device_name()
    print(
        f"{name}; frame {n / 1e9:.3f} GB ({len(batch['input_ids'])} rows, payload "
        f"{payload / 1e9:.3f} GB, {len(rows)} pixel rows); {os.cpu_count()} cpus, "
        f"load average {os.getloadavg()[0]:.2f}; medians of {args.reps}"
    )
    cases: dict[str, tuple[Callable[[], Any], int]] = {
        "pinned buffer -> GPU buffer (copy engine ceiling)": (
            lambda: device_buf.copy_(pinned, non_blocking=True),
            n,
        ),
        "encode(out=pinned), one thread": (
            lambda: py_wire.encode(batch, schema, threads=1, out=pinned.numpy()),
            payload,
        ),
        "frame in pageable memory -> GPU buffer": (lambda: device_buf.copy_(pageable), n),
        "py_wire.trainer.to(decode(frame), cuda), pageable": (
            lambda: py_wire.trainer.to(decoded, "cuda"),
            n,
        ),
        "py_wire.trainer.to(decode(frame), cuda, pin_memory=True)": (
            lambda: py_wire.trainer.to(decoded, "cuda", pin_memory=True),
            n,
        ),
        "decode(frame already on the GPU): views there": (
            lambda: py_wire.decode(on_device),
            n,
        ),
        "frame on the GPU -> host, decode, py_wire.trainer.to(cuda)": (
            lambda: py_wire.trainer.to(py_wire.decode(on_device.cpu()), "cuda"),
            n,
        ),
        "per-row pixel tensors .to(cuda) (BatchedDataDict.to)": (
            lambda: [t.to("cuda") for t in rows],
            sum(t.nbytes for t in rows),
        ),
    }
    for label, (fn, nbytes) in cases.items():
        ms = _cuda_ms(fn, args.reps)
        print(f"  {label:<56} {ms:9.1f} ms {nbytes / ms / 1e6:7.1f} GB/s")


if __name__ == "__main__":
    main()
