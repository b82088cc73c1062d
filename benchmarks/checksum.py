"""What payload checksums cost (issue 15 finding 10), side by side in one run: on a frame of
about 300 MB, ``Frame.verify()`` and ``encode(..., checksum=True)`` against one streaming
memcpy of the same bytes, and against ``encode`` without checksums.

    python benchmarks/checksum.py [--rows 24] [--reps 5]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import machine
import numpy as np
from timing import medians_ms_interleaved

import py_wire
from py_wire.synth.registry import generate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=130, help="Qwen2.5-VL rows (130: ~285 MB)")
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    os.environ.setdefault("PY_WIRE_THREADS", "1")
    print(machine.describe(), "\n")
    batch = generate("qwen2_5_vl", args.rows, seed=0)
    plain = py_wire.encode(batch, "qwen2_5_vl")
    checked = py_wire.encode(batch, "qwen2_5_vl", checksum=True)
    n = len(checked)
    src = np.frombuffer(memoryview(checked), dtype=np.uint8)
    dst = np.empty(n, dtype=np.uint8)
    libc = ctypes.CDLL("libc.so.6")
    libc.madvise(ctypes.c_void_p(dst.ctypes.data & ~4095), ctypes.c_size_t(n), 14)  # NOHUGEPAGE
    dst[:] = 1  # fault the destination in once: memcpy is timed warm
    libc.memcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]

    def memcpy() -> None:
        libc.memcpy(dst.ctypes.data, src.ctypes.data, n)

    times = medians_ms_interleaved(
        {
            "memcpy of the frame": memcpy,
            "Frame.verify()": checked.verify,
            "encode": lambda: py_wire.encode(batch, "qwen2_5_vl"),
            "encode(checksum=True)": lambda: py_wire.encode(batch, "qwen2_5_vl", checksum=True),
        },
        args.reps,
    )
    floor = times["memcpy of the frame"]
    print(
        f"frame: {n / 1e6:.1f} MB ({len(plain) / 1e6:.1f} MB without checksums), "
        f"{args.rows} rows, PY_WIRE_THREADS={os.environ['PY_WIRE_THREADS']}"
    )
    print(f"{'':28}{'median ms':>10}{'x memcpy':>10}{'GB/s':>8}")
    for name, ms in times.items():
        print(f"{name:28}{ms:10.1f}{ms / floor:10.2f}{n / ms / 1e6:8.1f}")
    extra = times["encode(checksum=True)"] - times["encode"]
    print(
        f"checksum's share of encode(checksum=True): {extra:.1f} ms "
        f"({extra / floor:.2f}x a memcpy of the frame)"
    )


if __name__ == "__main__":
    main()
