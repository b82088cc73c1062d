"""Frame buffer pool: encode and frame ops at payloads above the pool budget, and frame ops of
alternating sizes, against memcpy into a preallocated and into a fresh buffer, in one run.

    PY_WIRE_FRAME_POOL_BYTES=268435456 .venv/bin/python benchmarks/pool.py --mb 512

(a 256 MiB budget stands in for the default 2 GiB so the check fits small machines: the
payload is twice the budget.)
"""

from __future__ import annotations

import argparse
import os

import torch
from timing import median_ms  # benchmarks/ is sys.path[0] when run as a script

import py_wire


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=512, help="payload in MiB")
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    os.environ.setdefault("PY_WIRE_THREADS", "1")
    schema = py_wire.load_schema("text_grpo")
    per_row = args.mb * 2**20 // args.rows // 16  # four float32 per-token fields and ids
    batch = {
        "input_ids": [torch.arange(per_row, dtype=torch.int64) for _ in range(args.rows)],
        "advantages": [torch.ones(per_row) for _ in range(args.rows)],
        "generation_logprobs": [torch.ones(per_row) for _ in range(args.rows)],
        "input_lengths": torch.full((args.rows,), per_row, dtype=torch.int64),
        "loss_multiplier": torch.ones(args.rows),
        "reward": torch.ones(args.rows),
    }
    frame = py_wire.encode(batch, schema, threads=1)
    n = len(frame)
    src = torch.ones(n, dtype=torch.uint8)
    dst = torch.empty(n, dtype=torch.uint8)
    budget = os.environ.get("PY_WIRE_FRAME_POOL_BYTES", "default (2 GiB)")
    print(f"frame {n / 2**20:.0f} MiB, pool budget {budget}, {os.cpu_count()} cpus")
    print(f"load average {os.getloadavg()[0]:.2f}")
    rows = {
        "memcpy -> preallocated": lambda: dst.copy_(src),
        "memcpy -> fresh buffer": lambda: torch.empty(n, dtype=torch.uint8).copy_(src),
        "py_wire.encode": lambda: py_wire.encode(batch, schema, threads=1),
        "take_rows(all rows)": lambda: py_wire.take_rows(frame, range(args.rows)),
        "take_rows(all) then chunk(8), alternating": lambda: (
            py_wire.take_rows(frame, range(args.rows)),
            py_wire.chunk(frame, 8),
        ),
    }
    base = None
    for name, fn in rows.items():
        ms = median_ms(fn, args.reps)
        base = base or ms
        print(f"{name:<42} {ms:9.1f} ms  {ms / base:5.2f}x memcpy")


if __name__ == "__main__":
    main()
