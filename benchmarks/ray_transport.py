"""A batch through Ray's object store, side by side in one run: a py_wire frame (ray.put, then
ray.get and decode in a task) against the same batch as a dict of tensors and lists of tensors
pickled by Ray (what a BatchedDataDict is), both consumed by a task that touches one field.

A store object is read-only and shared, so ``decode``'s default (``writable="auto"``) copies it
once into a private buffer before decoding (safe to write in place); ``writable="view"`` decodes
views of the store's bytes (zero-copy; the caller promises not to write). Both are timed, end to
end and, inside the task, the decode alone.

    .venv/bin/python benchmarks/ray_transport.py --rows 44 --reps 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import ray
import torch
from timing import medians_ms_interleaved  # benchmarks/ is sys.path[0] as a script

import py_wire
from py_wire.synth.registry import generate


@ray.remote
def consume_frame(frame: py_wire.Frame, writable: str) -> tuple[float, float]:
    """(a checksum of one field, seconds spent in decode)."""
    t = time.perf_counter()
    out = py_wire.decode(frame, writable=writable)  # type: ignore[arg-type]
    seconds = time.perf_counter() - t
    return float(out["reward"].sum()), seconds


@ray.remote
def consume_dict(batch: dict) -> float:
    return float(batch["reward"].sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=44)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        object_store_memory=2 << 30,
        log_to_driver=False,
    )
    batch = generate("qwen2_5_vl", args.rows)
    schema = py_wire.load_schema("qwen2_5_vl")
    frame = py_wire.encode(batch, schema)
    print(
        f"frame {len(frame) / 1e6:.1f} MB, {args.rows} rows; {os.cpu_count()} cpus, "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    decode_seconds: dict[str, list[float]] = {"auto": [], "view": []}

    def frame_path(writable: str) -> float:
        ref = ray.put(py_wire.encode(batch, schema))
        total, seconds = ray.get(consume_frame.remote(ref, writable))
        decode_seconds[writable].append(seconds)
        return total

    def dict_path() -> float:
        return ray.get(consume_dict.remote(ray.put(dict(batch))))

    rows = {
        "py_wire: encode + ray.put + task (get + decode, default auto)": lambda: frame_path("auto"),
        "py_wire: encode + ray.put + task (get + decode, view)": lambda: frame_path("view"),
        "dict of tensors / lists: ray.put (pickle) + task (get)": dict_path,
    }
    for name, ms in medians_ms_interleaved(rows, args.reps).items():
        print(f"{name:<64} {ms:8.1f} ms")
    for writable, seconds in decode_seconds.items():
        timed = seconds[1:]  # the first call was the warm-up
        print(
            f"  in the task, decode(writable={writable!r}) alone: "
            f"{statistics.median(timed) * 1e3:8.2f} ms"
        )
    ray.shutdown()


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
