"""The fixed cost of small frames, embedded against compact headers (issue 19): header bytes,
encode, wrap + decode and take_rows (all rows in order, and shuffled: a permutation as a numpy
index array) of a 1-row and a 1k-row text_grpo frame (16 tokens a row), each beside a memcpy
of the same data section into a preallocated buffer. Medians over many
reps, one thread, twice: the cases interleaved rep by rep (so load drifts hit every case alike,
and each call finds caches as the other cases left them), then each case alone in a warm loop.

    .venv/bin/python benchmarks/compact_frames.py            # --reps 2000 --rows 1 1000

Run it with a py_wire that predates compact frames and it measures the embedded form only
(the "before" figures).
"""

from __future__ import annotations

import argparse
import inspect
import os
import statistics
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import machine
import numpy as np
import torch

import py_wire

TOKENS = 16


def batch(rows: int, tokens: int = TOKENS) -> dict[str, Any]:
    """``rows`` rows of ``tokens`` tokens, per-token fields as lists of row tensors (what a
    producer of per-row frames hands in; a jagged nested tensor input costs about 0.7 ms more
    per encode here, in torch, whatever the header form)."""
    values = torch.arange(rows * tokens, dtype=torch.int64)
    ids = list(values.split(tokens))
    floats = list(values.float().split(tokens))
    return {
        "input_ids": ids,
        "advantages": floats,
        "generation_logprobs": floats,
        "input_lengths": torch.full((rows,), tokens, dtype=torch.int64),
        "loss_multiplier": torch.ones(rows),
        "reward": torch.ones(rows),
    }


def header_bytes(frame: py_wire.Frame) -> int:
    (n,) = struct.unpack("<Q", bytes(memoryview(frame)[:8]))
    return 8 + int(n)


def medians_us(fns: dict[str, Callable[[], Any]], reps: int, interleaved: bool) -> dict[str, float]:
    """Median µs of each function: ``interleaved``, one call of each per rep (every call finds
    caches as the other cases left them, and load drifts hit every case alike); else each
    case alone, ``reps`` calls in a row (warm caches: the floor)."""
    for fn in fns.values():  # warm code, pools and caches
        for _ in range(20):
            fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    clock = time.perf_counter_ns
    if interleaved:
        for _ in range(reps):
            for name, fn in fns.items():
                t = clock()
                fn()
                times[name].append(clock() - t)
    else:
        for name, fn in fns.items():
            for _ in range(reps):
                t = clock()
                fn()
                times[name].append(clock() - t)
    return {k: statistics.median(v) / 1e3 for k, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 1000])
    parser.add_argument("--reps", type=int, default=2000, help="interleaved reps (median)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    os.environ.setdefault("PY_WIRE_THREADS", "1")
    has_compact = "compact" in inspect.signature(py_wire.encode).parameters
    forms = ["embedded", "compact"] if has_compact else ["embedded"]
    print(machine.describe())
    print(f"py_wire {py_wire.__version__} from {Path(py_wire.__file__).parent}")
    print(f"{args.reps} reps, medians; {TOKENS} tokens/row; one thread")
    if not has_compact:
        print("(this py_wire has no compact frames: embedded form only)")
    cols = ("header B", "encode", "wrap", "decode", "take_rows", "shuffled", "memcpy")
    print(f"{'rows':>5} {'form':<9}" + "".join(f"{c:>11}" for c in cols) + "   (µs)")
    schema = py_wire.load_schema("text_grpo")
    for rows in args.rows:
        b = batch(rows)
        frames = {
            form: py_wire.encode(
                b, schema, threads=1, **({"compact": True} if form == "compact" else {})
            )
            for form in forms
        }
        raw = {form: bytearray(memoryview(f)) for form, f in frames.items()}
        # The same data section (payload and index tables) for every form.
        data = {form: len(f) - header_bytes(f) for form, f in frames.items()}
        assert len(set(data.values())) == 1, data
        src = torch.frombuffer(raw[forms[0]], dtype=torch.uint8)[header_bytes(frames[forms[0]]) :]
        dst = torch.empty_like(src)
        fns: dict[str, Callable[[], Any]] = {"memcpy": lambda s=src, d=dst: d.copy_(s)}
        for form in forms:
            f, r = frames[form], raw[form]
            kw = {"compact": True} if form == "compact" else {}
            fns[f"{form}/encode"] = lambda kw=kw, b=b: py_wire.encode(b, schema, threads=1, **kw)
            fns[f"{form}/wrap"] = lambda r=r: py_wire.Frame.from_buffer(r)
            fns[f"{form}/decode"] = lambda r=r: py_wire.decode(r)
            fns[f"{form}/take_rows"] = lambda f=f, n=rows: py_wire.take_rows(f, range(n))
            # A replay buffer's sample: every row once, in random order, as an index array.
            order = np.random.default_rng(0).permutation(rows)
            fns[f"{form}/shuffled"] = lambda f=f, o=order: py_wire.take_rows(f, o)
        for interleaved in (True, False):
            us = medians_us(fns, args.reps, interleaved)
            for form in forms:
                cells = [f"{header_bytes(frames[form]):>11}"]
                cells += [f"{us[f'{form}/{op}']:>11.1f}" for op in cols[1:6]]
                cells.append(f"{us['memcpy']:>11.1f}")
                how = "interleaved" if interleaved else "warm"
                print(f"{rows:>5} {form:<9}" + "".join(cells) + f"   {how}")
        print(f"{'':>5} data section {data[forms[0]]} B (both forms); decode = wrap + views")


if __name__ == "__main__":
    main()
