"""A batch through Ray's object store, side by side in one run: a py_wire frame (ray.put, then
ray.get and decode in a task) against the same batch as a dict of tensors and lists of tensors
pickled by Ray (what a BatchedDataDict is), both consumed by a task that touches one field.

    .venv/bin/python benchmarks/ray_transport.py --rows 44 --reps 5
"""

from __future__ import annotations

import argparse
import os
import warnings

import ray
import torch
from timing import median_ms  # benchmarks/ is sys.path[0] when run as a script

import py_wire
from py_wire.synth.registry import generate


@ray.remote
def consume_frame(frame: py_wire.Frame) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        out = py_wire.decode(frame)
    return float(out["reward"].sum())


@ray.remote
def consume_dict(batch: dict) -> float:
    return float(batch["reward"].sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=44)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=2 << 30, log_to_driver=False)
    batch = generate("qwen2_5_vl", args.rows)
    schema = py_wire.load_schema("qwen2_5_vl")
    frame = py_wire.encode(batch, schema)
    print(
        f"frame {len(frame) / 1e6:.1f} MB, {args.rows} rows; {os.cpu_count()} cpus, "
        f"load average {os.getloadavg()[0]:.1f}"
    )

    def frame_path() -> float:
        return ray.get(consume_frame.remote(ray.put(py_wire.encode(batch, schema))))

    def dict_path() -> float:
        return ray.get(consume_dict.remote(ray.put(dict(batch))))

    rows = {
        "py_wire: encode + ray.put + task (get + decode)": frame_path,
        "dict of tensors / lists: ray.put (pickle) + task (get)": dict_path,
    }
    for name, fn in rows.items():
        print(f"{name:<58} {median_ms(fn, args.reps):8.1f} ms")
    ray.shutdown()


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
