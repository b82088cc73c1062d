"""A Qwen2.5-VL GRPO batch through the real TransferQueue (SimpleStorage on a local Ray), side by
side in one run: TQ's native nested TensorDict, a py_wire frame through Ray's object store,
frames stored in TQ naively (the whole frame as one row; one frame per row), and
``py_wire.interop.transfer_queue`` (one frame per GRPO group, a text and a media column); then,
TQ started again on its RayStore backend, the adapter there (each group's frame one object in
Ray's object store) and TQ native on RayStore where it runs (its tensors need NIXL).

The batch is ``py_wire.synth`` ``qwen2_5_vl`` with 28 rows in groups of 4 sharing their prompt's
images (290.8 MB as the rows hold it, 73.3 MB with each group's images once). Per path: the
producer's put (from the batch as the rollout holds it to stored), the consumer's get (to
tensors it can use: TQ's TensorDict, or py_wire's decoded views), end to end (put then get,
timed as one call), and the payload bytes stored. Medians of ``--reps`` interleaved rounds; keys
are cleared after every round outside the timings.

    .venv/bin/python benchmarks/data_plane.py --reps 5
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import machine
import ray
import torch
import transfer_queue as tq
from omegaconf import OmegaConf
from tensordict import TensorDict

import py_wire
from py_wire.interop import transfer_queue as ptq
from py_wire.synth.registry import generate

SCHEMA = "qwen2_5_vl"
GROUP = 4


def native_fields(batch: dict[str, Any]) -> TensorDict:
    """The batch as TQ takes it natively: per-token and media rows as jagged nested tensors
    (rows without media become empty tensors), scalars dense."""
    n = len(batch["input_ids"])
    out: dict[str, Any] = {}
    for name, value in batch.items():
        if isinstance(value, torch.Tensor):
            out[name] = value
            continue
        width = next(v for v in value if v is not None).shape[1:]
        dtype = next(v for v in value if v is not None).dtype
        rows = [v if v is not None else torch.empty((0, *width), dtype=dtype) for v in value]
        out[name] = torch.nested.as_nested_tensor(rows, layout=torch.jagged)
    return TensorDict(out, batch_size=[n])


def nbytes(td: Any) -> int:
    total = 0
    for name in td.keys():  # noqa: SIM118 (iterating a TensorDict walks its rows)
        v = td[name]
        v = v.values() if v.is_nested else v
        total += v.numel() * v.element_size()
    return total


def frame_tensor(frame: py_wire.Frame) -> torch.Tensor:
    return torch.frombuffer(frame, dtype=torch.uint8)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=28)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    print(machine.describe(), "\n")
    start(args, "SimpleStorage")
    batch = generate(SCHEMA, args.rows)
    schema = py_wire.load_schema(SCHEMA)
    logical = nbytes(native_fields(batch))
    frame = py_wire.encode(batch, schema)
    groups = args.rows // GROUP
    print(
        f"batch: {args.rows} rows, groups of {GROUP}; {logical / 1e6:.1f} MB as rows hold it, "
        f"frame {len(frame) / 1e6:.1f} MB; TQ {tq.__version__}, {os.cpu_count()} cpus, "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    row_keys = [f"r{i}" for i in range(args.rows)]
    group_keys = [f"g{i}" for i in range(groups)]
    times: dict[str, dict[str, list[float]]] = {}
    stored: dict[str, int] = {}

    def timed(
        path: str, put: Callable[[], Any], get: Callable[[], Any], clear: Callable[[], Any]
    ) -> None:
        t0 = time.perf_counter()
        put()
        t1 = time.perf_counter()
        get()
        t2 = time.perf_counter()
        clear()
        t3 = time.perf_counter()
        put()
        get()
        t4 = time.perf_counter()
        clear()
        row = times.setdefault(path, {"put": [], "get": [], "e2e": []})
        row["put"].append(t1 - t0)
        row["get"].append(t2 - t1)
        row["e2e"].append(t4 - t3)

    # -- TQ native: nested TensorDict through SimpleStorage
    def native_put() -> None:
        td = native_fields(batch)
        stored["native"] = nbytes(td)
        tq.kv_batch_put(keys=row_keys, partition_id="native", fields=td)

    def native_get() -> Any:
        return tq.kv_batch_get(keys=row_keys, partition_id="native")

    # -- py_wire encode + ray.put; consumer ray.get + decode views
    ref: list[Any] = []

    def ray_put() -> None:
        f = py_wire.encode(batch, schema)
        stored["ray"] = len(f)
        ref[:] = [ray.put(f)]

    def ray_get() -> Any:
        return py_wire.decode(ray.get(ref[0]), writable="view")

    # -- the whole frame as one TQ row
    def one_row_put() -> None:
        f = py_wire.encode(batch, schema)
        stored["one_row"] = len(f)
        td = TensorDict({"frame": frame_tensor(f)[None]}, batch_size=[1])
        tq.kv_batch_put(keys=["whole"], partition_id="one_row", fields=td)

    def one_row_get() -> Any:
        got = tq.kv_batch_get(keys=["whole"], partition_id="one_row")["frame"]
        return py_wire.decode((got.values() if got.is_nested else got[0]).contiguous())

    # -- one frame per row (each row encoded alone: a group's images once per row)
    def per_row_put() -> None:
        frames = [
            frame_tensor(py_wire.encode({k: v[i : i + 1] for k, v in batch.items()}, schema))
            for i in range(args.rows)
        ]
        stored["per_row"] = sum(f.numel() for f in frames)
        col = torch.nested.as_nested_tensor(frames, layout=torch.jagged)
        tq.kv_batch_put(
            keys=row_keys,
            partition_id="per_row",
            fields=TensorDict({"frame": col}, batch_size=[args.rows]),
        )

    def per_row_get() -> Any:
        col = tq.kv_batch_get(keys=row_keys, partition_id="per_row")["frame"]
        return [py_wire.decode(f) for f in col.unbind()]

    # -- py_wire.interop.transfer_queue: one frame per group, text and media columns
    def adapter_put() -> None:
        ptq.put(batch, schema, group_keys, "adapter", group_size=GROUP)

    def adapter_get() -> Any:
        return ptq.get(group_keys, "adapter")

    def adapter_stage_get() -> Any:
        return ptq.get(group_keys, "adapter", stage="generation")

    def clear(partition: str, keys: list[str]) -> Callable[[], None]:
        return lambda: tq.kv_clear(keys=keys, partition_id=partition)

    columns = ptq.encode_groups(
        batch, schema, GROUP
    )  # the SimpleStorage form; RayStore's frames are the same bytes
    stored["adapter"] = sum(int(c.values().numel()) for c in columns.values())
    stored["adapter_stage"] = int(columns[ptq.TEXT].values().numel())
    paths: dict[str, tuple[Callable[[], Any], Callable[[], Any], Callable[[], Any]]] = {
        "TQ native (nested TensorDict, SimpleStorage)": (
            native_put,
            native_get,
            clear("native", row_keys),
        ),
        "py_wire encode + ray.put; ray.get + decode views": (ray_put, ray_get, lambda: ref.clear()),
        "the whole frame stored as one TQ row": (
            one_row_put,
            one_row_get,
            clear("one_row", ["whole"]),
        ),
        "one frame per row in TQ": (per_row_put, per_row_get, clear("per_row", row_keys)),
        "py_wire.interop.transfer_queue (frame per group)": (
            adapter_put,
            adapter_get,
            clear("adapter", group_keys),
        ),
    }
    stage_ms: list[float] = []

    def measure(
        phase: dict[str, tuple[Callable[[], Any], Callable[[], Any], Callable[[], Any]]],
    ) -> None:
        """A warm-up of every path, then ``--reps`` rounds of each path and of the adapter's
        text-only stage fetch (into ``stage_ms``, emptied first)."""
        for put, get, clr in phase.values():
            put()
            get()
            clr()
        stage_ms.clear()
        for _ in range(args.reps):
            for path, (put, get, clr) in phase.items():
                timed(path, put, get, clr)
            adapter_put()
            t = time.perf_counter()
            adapter_stage_get()
            stage_ms.append(time.perf_counter() - t)
            clear("adapter", group_keys)()

    measure(paths)

    keys_of = {
        "TQ native (nested TensorDict, SimpleStorage)": "native",
        "py_wire encode + ray.put; ray.get + decode views": "ray",
        "the whole frame stored as one TQ row": "one_row",
        "one frame per row in TQ": "per_row",
        "py_wire.interop.transfer_queue (frame per group)": "adapter",
    }
    native_e2e = statistics.median(times["TQ native (nested TensorDict, SimpleStorage)"]["e2e"])
    print(
        "\n| path | put ms | get ms | end to end ms | x native | stored MB |\n"
        "|---|---:|---:|---:|---:|---:|"
    )
    print_rows(times, stored, keys_of, native_e2e, stage_ms)
    drifted = dict(batch, reward=batch["reward"].to(torch.bfloat16))
    try:
        ptq.put(drifted, schema, group_keys, "adapter", group_size=GROUP)
        print("dtype drift (reward float32 -> bfloat16): ACCEPTED")
    except py_wire.BatchError as e:
        print(f"dtype drift (reward float32 -> bfloat16) refused at the producer: {str(e)[:100]}")
    tq.close()
    ray.shutdown()

    # -- the same TQ on its RayStore backend: one TQ controller per Ray cluster, so a second
    # phase (Ray and TQ started again); ratios against the SimpleStorage native median above.
    start(args, "RayStore")
    times.clear()
    ref.clear()
    native_error = ""
    try:
        native_put()
        native_get()
    except Exception as e:  # TQ's RayStore puts tensors with NIXL, absent on CPU machines
        native_error = f"{type(e).__name__}: {str(e)[:80]}"
    phase2 = {
        "py_wire encode + ray.put; ray.get + decode views": (ray_put, ray_get, lambda: ref.clear()),
        "py_wire.interop.transfer_queue on RayStore (a Frame object per group)": (
            adapter_put,
            adapter_get,
            clear("adapter", group_keys),
        ),
    }
    if not native_error:
        clear("native", row_keys)()
        phase2["TQ native (nested TensorDict, RayStore)"] = (
            native_put,
            native_get,
            clear("native", row_keys),
        )
    measure(phase2)
    keys_of["py_wire.interop.transfer_queue on RayStore (a Frame object per group)"] = "adapter"
    keys_of["TQ native (nested TensorDict, RayStore)"] = "native"
    print(
        f"\nRayStore (load average {os.getloadavg()[0]:.1f}); x native is against the "
        "SimpleStorage native end to end above\n"
        "| path | put ms | get ms | end to end ms | x native | stored MB |\n"
        "|---|---:|---:|---:|---:|---:|"
    )
    print_rows(times, stored, keys_of, native_e2e, stage_ms)
    if native_error:
        print(f"TQ native on RayStore: refused here ({native_error})")
    tq.close()
    ray.shutdown()


def print_rows(
    times: dict[str, dict[str, list[float]]],
    stored: dict[str, int],
    keys_of: dict[str, str],
    native_e2e: float,
    stage_ms: list[float],
) -> None:
    """One table's rows: medians per path, the ratio to TQ native end to end, stored bytes,
    then the adapter's text-only stage fetch."""
    for path, row in times.items():
        put, get, e2e = (statistics.median(row[k]) for k in ("put", "get", "e2e"))
        print(
            f"| {path} | {put * 1e3:,.0f} | {get * 1e3:,.1f} | {e2e * 1e3:,.0f} | "
            f"{native_e2e / e2e:.1f} | {stored[keys_of[path]] / 1e6:.1f} |"
        )
    print(
        f"| adapter, stage 'generation' fetch (text column only) | | "
        f"{statistics.median(stage_ms) * 1e3:,.1f} | | | "
        f"{stored['adapter_stage'] / 1e6:.2f} moved |"
    )


def start(args: argparse.Namespace, backend: str) -> None:
    """Ray (TQ's controller and each of its 2 storage units take one CPU) and TQ on ``backend``."""
    ray.init(
        address="local",
        num_cpus=4,
        include_dashboard=False,
        object_store_memory=2 << 30,
        log_to_driver=False,
    )
    # TQ logs an error that RayStore has no bootstrap: it needs none (its client makes its actor).
    logging.getLogger("transfer_queue").setLevel(logging.CRITICAL)
    tq.init(OmegaConf.create({"backend": {"storage_backend": backend}}))
    logging.getLogger("transfer_queue").setLevel(logging.ERROR)
    # The object store's first page faults, paid once here rather than by the first path timed.
    refs = [ray.put(torch.zeros(100 << 20, dtype=torch.uint8)) for _ in range(12)]
    del refs


if __name__ == "__main__":
    main()
