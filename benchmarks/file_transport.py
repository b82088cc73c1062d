"""A batch through a file, side by side in one run: py_wire.save / load + decode against
torch.save / torch.load of the same batch as a dict of tensors and lists of tensors (the pickled
dict path). ``py_wire.load`` maps the file copy-on-write (writable), so ``decode``'s default
views it; a read-only ``mmap`` and ``bytes`` are read-only, so the default (``writable="auto"``)
copies them once into a private buffer, and ``writable="view"`` views them: both are timed.

    .venv/bin/python benchmarks/file_transport.py --rows 44 --reps 5
"""

from __future__ import annotations

import argparse
import mmap
import os
import tempfile
from pathlib import Path

import torch
from timing import medians_ms_interleaved  # benchmarks/ is sys.path[0] as a script

import py_wire
from py_wire.synth.registry import generate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=44)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    batch = generate("qwen2_5_vl", args.rows)
    schema = py_wire.load_schema("qwen2_5_vl")
    frame = py_wire.encode(batch, schema)
    with tempfile.TemporaryDirectory() as tmp:
        wire, pickled = Path(tmp) / "batch.safetensors", Path(tmp) / "batch.pt"
        print(
            f"frame {len(frame) / 1e6:.1f} MB, {args.rows} rows; {os.cpu_count()} cpus, "
            f"load average {os.getloadavg()[0]:.1f}"
        )
        py_wire.save(frame, wire)
        with open(wire, "rb") as f:
            read_only = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        raw = wire.read_bytes()
        rows = {
            "py_wire: encode + save": lambda: py_wire.save(py_wire.encode(batch, schema), wire),
            "py_wire: load + decode": lambda: py_wire.decode(py_wire.load(wire)),
            "read-only mmap: decode (default auto)": lambda: py_wire.decode(read_only),
            "read-only mmap: decode(writable=view)": lambda: py_wire.decode(
                read_only, writable="view"
            ),
            "bytes: decode (default auto)": lambda: py_wire.decode(raw),
            "bytes: decode(writable=view)": lambda: py_wire.decode(raw, writable="view"),
            "torch.save(dict)": lambda: torch.save(dict(batch), pickled),
            "torch.load(dict)": lambda: torch.load(pickled, weights_only=False),
        }
        for name, ms in medians_ms_interleaved(rows, args.reps).items():
            print(f"{name:<40} {ms:8.1f} ms")
        read_only.close()


if __name__ == "__main__":
    main()
