"""Threads encoding, decoding and running frame ops on shared frames, for a bounded time.

Every result must equal a reference computed single-threaded, nothing but a correct result may
come back (valid inputs: not even a WireError), no two live frames may share memory (py_wire
recycles dropped frames' buffers through a pool: it must never hand out a live frame's memory),
and decoded views must keep their frame alive and keep reading the right data after the frame
is dropped and further encodes reuse pooled memory.

``PY_WIRE_CONCURRENCY_SECONDS`` sets the run time (default 3 s).
"""

from __future__ import annotations

import gc
import itertools
import os
import random
import threading
import time
import traceback
from typing import Any

import numpy as np
import pytest
import torch

import py_wire
from py_wire.synth.registry import GENERATORS
from tests.hostile.seeds import SMALL

SECONDS = float(os.environ.get("PY_WIRE_CONCURRENCY_SECONDS", "3"))
THREADS = int(os.environ.get("PY_WIRE_CONCURRENCY_THREADS", "4"))
SCHEMAS = ["text_grpo", "smolvlm", "nemotron_omni", "qwen2_5_vl_video"]


def span(frame: Any) -> tuple[int, int]:
    arr = np.frombuffer(frame, np.uint8)
    return arr.ctypes.data, len(frame)


def rows_of(frame: Any) -> dict[str, list[Any]]:
    """Decoded rows, copied out (list layout; packed rows as lists of segments or None)."""
    out = {}
    for name, v in py_wire.decode(frame, layout="list").items():
        if isinstance(v, torch.Tensor):
            out[name] = [r.clone() for r in v.unbind(0)] if v.dim() else [v.clone()]
        else:
            out[name] = [
                None if r is None else (r.clone() if isinstance(r, torch.Tensor) else [s.clone() for s in r])  # noqa: E501
                for r in v
            ]  # fmt: skip
    return out


def same(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, list) or isinstance(b, list):
        return (
            isinstance(a, list) and isinstance(b, list) and len(a) == len(b)
            and all(same(x, y) for x, y in zip(a, b, strict=True))
        )  # fmt: skip
    return a.shape == b.shape and a.dtype == b.dtype and bool(
        torch.equal(a.reshape(-1).contiguous().view(torch.uint8), b.reshape(-1).contiguous().view(torch.uint8))  # noqa: E501
    )  # fmt: skip


def same_rows(a: dict[str, list[Any]], b: dict[str, list[Any]]) -> bool:
    return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)


class Case:
    """One schema's batch, its frame, and single-threaded references for every operation."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.schema = py_wire.load_schema(name)
        self.batch = GENERATORS[name](4, seed=3, group_size=2, **SMALL[name])
        self.frame = py_wire.encode(self.batch, self.schema)
        self.bytes = bytes(self.frame)
        n = self.frame.num_rows
        self.picks = [n - 1, 0, 2, 0]
        self.ref = {
            "encode": self.bytes,
            "select": bytes(py_wire.take_rows(self.frame, self.picks)),
            "split": [bytes(p) for p in py_wire.chunk(self.frame, 2)],
            "concat": bytes(py_wire.concat([self.frame, self.frame])),
            "rows": rows_of(self.frame),
        }


@pytest.fixture(scope="module")
def cases() -> list[Case]:
    return [Case(n) for n in SCHEMAS]


class Live:
    """Frames kept alive across threads; checks that no two share memory."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.frames: dict[int, tuple[Any, str]] = {}

    def add(self, frame: Any, what: str) -> None:
        with self.lock:
            self.frames[id(frame)] = (frame, what)

    def drop_some(self, rng: random.Random, keep: int) -> None:
        with self.lock:
            while len(self.frames) > keep:
                del self.frames[rng.choice(list(self.frames))]

    def overlaps(self) -> list[str]:
        with self.lock:
            spans = sorted((*span(f), what) for f, what in self.frames.values() if len(f))
        bad = []
        for (a, na, wa), (b, nb, wb) in itertools.pairwise(spans):
            if b < a + na:
                bad.append(f"{wa} [{a:#x}, +{na}) overlaps {wb} [{b:#x}, +{nb})")
        return bad


def worker(
    cases: list[Case], live: Live, seed: int, stop: float, errors: list[str], counts: list[int]
) -> None:
    rng = random.Random(seed)
    views: list[tuple[torch.Tensor, torch.Tensor]] = []
    done = 0
    while time.monotonic() < stop and len(errors) < 20:
        case = rng.choice(cases)
        op = rng.choice(["encode", "decode", "select", "split", "concat", "view"])
        try:
            if op == "encode":
                f = py_wire.encode(case.batch, case.schema)
                if bytes(f) != case.ref["encode"]:
                    errors.append(f"{case.name}: threaded encode differs from the reference")
                live.add(f, f"encode({case.name})")
            elif op == "decode":
                if not same_rows(rows_of(case.frame), case.ref["rows"]):
                    errors.append(f"{case.name}: threaded decode differs from the reference")
            elif op == "select":
                f = py_wire.take_rows(case.frame, case.picks)
                if bytes(f) != case.ref["select"]:
                    errors.append(f"{case.name}: threaded select differs from the reference")
                live.add(f, f"select({case.name})")
            elif op == "split":
                parts = py_wire.chunk(case.frame, 2)
                if [bytes(p) for p in parts] != case.ref["split"]:
                    errors.append(f"{case.name}: threaded split differs from the reference")
                for p in parts:
                    live.add(p, f"split({case.name})")
            elif op == "concat":
                f = py_wire.concat([case.frame, case.frame])
                if bytes(f) != case.ref["concat"]:
                    errors.append(f"{case.name}: threaded concat differs from the reference")
                live.add(f, f"concat({case.name})")
            else:
                # a view of a fresh frame that is then dropped: must stay valid
                f = py_wire.encode(case.batch, case.schema)
                seq = case.schema.sequence_field
                values = py_wire.decode(f)[seq].values()
                views.append((values, values.clone()))
                del f
            if rng.random() < 0.3:
                live.drop_some(rng, keep=24)
            bad = live.overlaps()
            if bad:
                errors.append("live frames share memory: " + "; ".join(bad[:3]))
            for v, want in views:
                if not torch.equal(v, want):
                    errors.append(
                        f"a decoded view changed after its frame was dropped ({case.name})"
                    )
                    break
            if len(views) > 8:
                views.pop(0)
            done += 1
        except BaseException as e:
            errors.append(f"{case.name} {op}: {type(e).__module__}.{type(e).__qualname__}: {e}\n"
                          + "".join(traceback.format_exc(limit=-3)))  # fmt: skip
    counts.append(done)


def test_threads_encode_decode_and_ops_on_shared_frames(cases):
    live = Live()
    errors: list[str] = []
    counts: list[int] = []
    stop = time.monotonic() + SECONDS
    threads = [
        threading.Thread(target=worker, args=(cases, live, i, stop, errors, counts))
        for i in range(THREADS)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=SECONDS + 120)
    assert not any(t.is_alive() for t in threads), "a worker thread hung"
    assert not errors, f"{len(errors)} errors in {sum(counts)} operations:\n" + "\n".join(
        errors[:20]
    )
    assert sum(counts) > THREADS, counts


def test_decoded_views_keep_their_frame_alive_across_pool_reuse(cases):
    for case in cases:
        frame = py_wire.encode(case.batch, case.schema)
        addr, n = span(frame)
        out = py_wire.decode(frame)
        seq = out[case.schema.sequence_field]
        want = seq.values().clone()
        scalars = {
            k: v.clone() for k, v in out.items() if isinstance(v, torch.Tensor) and not v.is_nested
        }
        del frame
        gc.collect()
        # More frames of the same size: the pool may hand out dropped frames' memory, never
        # this one's while its views live.
        others = [py_wire.encode(case.batch, case.schema) for _ in range(4)]
        others += [py_wire.take_rows(o, slice(None)) for o in others]
        for o in others:
            a, m = span(o)
            assert a + m <= addr or addr + n <= a, (
                f"{case.name}: a new frame reuses a live view's memory"
            )
        assert torch.equal(seq.values(), want), case.name
        for k, v in scalars.items():
            assert torch.equal(out[k], v), (case.name, k)
        del out, seq, others
        gc.collect()


def test_threads_decode_one_frame_while_others_encode(cases):
    """Decoded views of a shared frame, read while other threads encode and drop frames."""
    case = cases[0]
    out = py_wire.decode(case.frame)
    seq = case.schema.sequence_field
    want = out[seq].values().clone()
    stop = time.monotonic() + min(SECONDS, 2.0)
    errors: list[str] = []

    def churn() -> None:
        while time.monotonic() < stop:
            try:
                for c in cases:
                    py_wire.encode(c.batch, c.schema)
            except BaseException as e:
                errors.append(f"{type(e).__qualname__}: {e}")
                return

    ts = [threading.Thread(target=churn) for _ in range(2)]
    for t in ts:
        t.start()
    while time.monotonic() < stop:
        if not torch.equal(out[seq].values(), want):
            errors.append("a shared frame's decoded view changed while others encoded")
            break
    for t in ts:
        t.join()
    assert not errors, errors
