"""Tiny rows side by side, at one thread: py_wire's encode from lists against a bare
``torch.cat`` of the same tensors (per field, into preallocated outputs, no checks at all) and
against safetensors' flat values + lengths path (issue 10, "tiny rows" and "per-encode
metadata churn").

    .venv/bin/python benchmarks/tiny_rows.py [--tensors 262144] [--reps 9]

The batch is ``profiles.make_profile("tiny")`` (schema ``text_grpo``: rows of 1-16 tokens,
``input_ids``, ``advantages``, ``generation_logprobs``, ``token_mask`` per row, plus three dense
scalars), scaled so that the per-token fields hold ``--tensors`` row tensors. Contenders run
round-robin in one process, so load from neighbours hits them alike; each figure is the
median of ``--reps`` calls after a warm-up. Every call starts cold: the batch's tensor objects
(~100 MB of them at 262k) do not fit in the cache, as in a producer that built them earlier.

Allocations per call: ``tracemalloc`` peak (Python objects only), the growth of the resident
set's high-water mark (VmHWM reset through /proc/self/clear_refs), and minor page faults.
Bytes are checked: each field's values in py_wire's frame, the ``torch.cat`` outputs and the
safetensors flat tensors must be identical.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import re
import resource
import statistics
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import safetensors.torch
import torch
from profiles import Profile, flat_values, make_profile

import py_wire


def machine() -> str:
    model = platform.processor() or "unknown CPU"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    cores = len(os.sched_getaffinity(0))
    return f"{model}, {cores} cores, load average {load}, torch {torch.__version__}"


def _status(key: str) -> int:
    with open("/proc/self/status") as f:
        match = re.search(rf"^{key}:\s+(\d+) kB", f.read(), re.MULTILINE)
    return int(match.group(1)) * 1024 if match else 0


def _reset_hwm() -> int:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    return _status("VmRSS")


def allocations(fn: Contender, batch: dict[str, Any]) -> tuple[int, int, int]:
    """(tracemalloc peak, VmHWM growth, minor faults) of one call; its result is dropped."""
    gc.collect()
    tracemalloc.start()
    base = _reset_hwm()
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    out = fn(batch)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    hwm = max(0, _status("VmHWM") - base)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del out
    return peak, hwm, faults


def fresh_copy(batch: dict[str, Any]) -> dict[str, Any]:
    """The same values in new tensors, as the next step's batch would arrive (no cached state
    on the tensors, such as storage objects a previous encode created)."""
    return {
        name: value.clone()
        if isinstance(value, torch.Tensor)
        else [t if t is None else t.clone() for t in value]
        for name, value in batch.items()
    }


Contender = Callable[[dict[str, Any]], Any]


def contenders(profile: Profile) -> dict[str, Contender]:
    schema = py_wire.load_schema(profile.schema)
    outs = {
        name: torch.empty_like(flat_values(value, profile.fields[name]))
        if isinstance(value, list)
        else torch.empty_like(value)
        for name, value in profile.batch.items()
    }
    frame_bytes = len(py_wire.encode(profile.batch, schema, threads=1))
    buffer = bytearray(frame_bytes)

    def bare_cat(batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        for name, value in batch.items():
            torch.cat(value if isinstance(value, list) else [value], out=outs[name])
        return outs

    def safetensors_flat(batch: dict[str, Any]) -> bytes:
        tensors: dict[str, torch.Tensor] = {}
        for name, value in batch.items():
            if isinstance(value, torch.Tensor):
                tensors[name] = value
            else:
                tensors[name] = flat_values(value, profile.fields[name])
                tensors[f"{name}.lengths"] = torch.tensor(
                    [-1 if t is None else t.shape[0] for t in value], dtype=torch.int64
                )
        return safetensors.torch.save(tensors)

    return {
        "torch.cat (bare)": bare_cat,
        "py_wire encode": lambda batch: py_wire.encode(batch, schema, threads=1),
        "py_wire encode(out=)": lambda batch: py_wire.encode(batch, schema, threads=1, out=buffer),
        "safetensors flat+lengths": safetensors_flat,
    }


def check_bytes(profile: Profile, runs: dict[str, Contender]) -> None:
    """Each field's values are the same bytes in every contender's output."""
    schema = py_wire.load_schema(profile.schema)
    batch = profile.batch
    cat = {k: v.clone() for k, v in runs["torch.cat (bare)"](batch).items()}
    frame = runs["py_wire encode"](batch)
    decoded = py_wire.decode(frame, schema)
    flat = safetensors.torch.load(runs["safetensors flat+lengths"](batch))
    for name, want in cat.items():
        got = decoded[name]
        got = got.values() if got.is_nested else got
        for who, t in (("py_wire", got), ("safetensors", flat[name])):
            as_bytes = t.view(torch.uint8), want.view(torch.uint8)
            if t.dtype != want.dtype or not torch.equal(*as_bytes):
                raise SystemExit(f"{who}: field {name!r} differs from torch.cat")
    into = bytes(runs["py_wire encode(out=)"](batch))
    if into != bytes(frame):
        raise SystemExit("py_wire encode(out=) differs from encode")
    print("bytes: every field's values identical in py_wire, torch.cat and safetensors")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tensors", type=int, default=262144, help="per-token row tensors")
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument(
        "--same-batch",
        action="store_true",
        help="encode the same batch every time (default: a fresh copy per round, untimed)",
    )
    args = parser.parse_args()
    os.environ["PY_WIRE_THREADS"] = "1"
    torch.set_num_threads(1)
    profile = make_profile("tiny", args.tensors / 262144)
    rows = profile.num_rows
    tensors = sum(len(v) for v in profile.batch.values() if isinstance(v, list))
    payload = profile.payload_bytes()
    print(machine())
    print(
        f"batch: {rows} rows, {tensors} row tensors + 3 dense scalars, "
        f"payload {payload / 1e6:.1f} MB; PY_WIRE_THREADS=1, torch threads 1; "
        + ("the same batch every call" if args.same_batch else "a fresh copy per round")
    )
    runs = contenders(profile)
    check_bytes(profile, runs)
    names = list(runs)
    wall: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    for fn in runs.values():  # warm-up
        fn(profile.batch)
    for rep in range(args.reps):
        batch = profile.batch if args.same_batch else fresh_copy(profile.batch)
        order = names[rep % len(names) :] + names[: rep % len(names)]
        for name in order:
            gc.collect()
            start, start_cpu = time.perf_counter(), time.thread_time()
            out = runs[name](batch)
            cpu[name].append(time.thread_time() - start_cpu)
            wall[name].append(time.perf_counter() - start)
            del out
        del batch
    base = statistics.median(wall["torch.cat (bare)"])
    flat = statistics.median(wall["safetensors flat+lengths"])
    base_cpu = statistics.median(cpu["torch.cat (bare)"])
    head = f"{'':<26}{'median ms':>10}{'ns/tensor':>10}{'x cat':>7}{'x safet.':>9}{'cpu x cat':>10}"
    print(head + f"{'py alloc':>10}{'RSS grow':>10}{'faults':>8}")
    for name in names:
        median = statistics.median(wall[name])
        peak, hwm, faults = allocations(runs[name], fresh_copy(profile.batch))
        print(
            f"{name:<26}{median * 1e3:>10.1f}{median * 1e9 / tensors:>10.0f}"
            f"{median / base:>7.2f}{median / flat:>9.2f}"
            f"{statistics.median(cpu[name]) / base_cpu:>10.2f}"
            f"{peak / 1e6:>8.2f}MB{hwm / 1e6:>8.1f}MB{faults:>8}"
        )
    print(f"spread (min-max wall ms) over {args.reps} rounds, contenders in rotating order:")
    for name in names:
        ts = wall[name]
        print(f"  {name:<26}{min(ts) * 1e3:.1f}-{max(ts) * 1e3:.1f}")


if __name__ == "__main__":
    main()
