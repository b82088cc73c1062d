"""Timing, peak-memory and bit-exact verification shared by every peer.

Peak memory is the growth of the resident set during one call: the kernel's high-water mark
(VmHWM) is reset through /proc/self/clear_refs just before the call, and the figure is
VmHWM after it minus VmRSS before it. It counts pages the call newly touched (its outputs and
temporaries), not memory it reused from the allocator's free lists; bench.py pins glibc's mmap
threshold and puts Arrow on the system allocator so that freed blocks really leave the
process between calls.
"""

from __future__ import annotations

import gc
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch
from profiles import Profile

Rows = dict[str, list[torch.Tensor | None] | torch.Tensor]


class Skip(Exception):
    """A peer that cannot run on this profile; the message says why."""


@dataclass(frozen=True)
class Codec:
    encode: Callable[[], Any]  # the producer's batch -> a wire object
    decode: Callable[[Any], Any]  # the wire object -> the consumer's form
    rows: Callable[[Any], Rows]  # the consumer's form -> per-row tensors (untimed, for checking)


@dataclass(frozen=True)
class Peer:
    name: str
    make: Callable[[Profile], Codec]  # untimed: builds the input form and any buffers
    timed: tuple[str, ...] = ("encode", "decode")


@dataclass
class Result:
    profile: str
    method: str
    direction: str  # encode | decode | round trip
    median_s: float | None = None
    reps: int = 0  # 0: the only sample is the warm-up run itself
    peak_bytes: int | None = None
    status: str = "ok"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _status_kib(key: str) -> int:
    with open("/proc/self/status") as f:
        match = re.search(rf"^{key}:\s+(\d+) kB", f.read(), re.MULTILINE)
    assert match is not None, key
    return int(match.group(1)) * 1024


def _reset_peak() -> int:
    gc.collect()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return _status_kib("VmRSS")


@dataclass
class Sample:
    seconds: float
    peak_bytes: int
    value: Any


def sample(fn: Callable[[], Any]) -> Sample:
    """One call of fn, timed, with its peak resident-set growth."""
    base = _reset_peak()
    start = time.perf_counter()
    value = fn()
    seconds = time.perf_counter() - start
    return Sample(seconds, max(0, _status_kib("VmHWM") - base), value)


def repeat(fn: Callable[[], Any], warmup: Sample, reps: int, budget_s: float) -> Result:
    """Median of up to `reps` further calls, as many as fit in budget_s after the warm-up.

    When even one more call would not fit, the warm-up sample is reported (reps=0).
    """
    count = min(reps, int(budget_s / max(warmup.seconds, 1e-9)))
    if count == 0:
        return Result("", "", "", warmup.seconds, 0, warmup.peak_bytes)
    times, peaks = [], []
    for _ in range(count):
        s = sample(fn)
        times.append(s.seconds)
        peaks.append(s.peak_bytes)
        del s  # free this call's output before the next call runs
    return Result("", "", "", statistics.median(times), count, max(peaks))


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return torch.equal(_bytes(a), _bytes(b))


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().reshape(-1).view(torch.uint8)


def _check_rows(name: str, want: list[torch.Tensor | None], got: Any) -> str | None:
    got = list(got)
    if len(got) != len(want):
        return f"{name}: {len(got)} rows, expected {len(want)}"
    for i, (w, g) in enumerate(zip(want, got, strict=True)):
        if (w is None) != (g is None):
            return f"{name}[{i}]: {'None' if g is None else 'tensor'} instead of the input's row"
        if w is not None and (w.dtype != g.dtype or w.shape != g.shape):
            return f"{name}[{i}]: {g.dtype}{tuple(g.shape)}, expected {w.dtype}{tuple(w.shape)}"
    present = [i for i, w in enumerate(want) if w is not None]
    # Same dtypes and shapes row by row, so one concatenation per side compares every byte.
    if present and not torch.equal(
        _bytes(torch.cat([want[i] for i in present])), _bytes(torch.cat([got[i] for i in present]))
    ):
        return f"{name}: payload bytes differ"
    return None


def mismatch(profile: Profile, rows: Rows) -> str | None:
    """None when rows reproduce the profile's batch bit for bit, else the first difference."""
    if set(rows) != set(profile.batch):
        return f"fields {sorted(rows)}, expected {sorted(profile.batch)}"
    for name, want in profile.batch.items():
        got = rows[name]
        if isinstance(want, torch.Tensor):
            if not isinstance(got, torch.Tensor) or not same_bits(want, got):
                return f"{name}: scalar column differs"
        elif (problem := _check_rows(name, want, got)) is not None:
            return problem
    return None


def unbind(nested: torch.Tensor, present: torch.Tensor | None = None) -> list[torch.Tensor | None]:
    """Per-row views of a jagged nested tensor; rows whose `present` flag is False become None."""
    rows: list[torch.Tensor | None] = list(nested.unbind())
    if present is not None:
        rows = [r if p else None for r, p in zip(rows, present.tolist(), strict=True)]
    return rows


def run_peer(profile: Profile, peer: Peer, reps: int, budget_s: float) -> list[Result]:
    """Verify one round trip bit for bit (it doubles as the warm-up), then time each direction."""
    codec = peer.make(profile)
    gc.freeze()  # the batch and the peer's buffers: keep gc.collect() between calls cheap
    try:
        return _verify_and_time(profile, peer, codec, reps, budget_s)
    finally:
        gc.unfreeze()


def _verify_and_time(
    profile: Profile, peer: Peer, codec: Codec, reps: int, budget_s: float
) -> list[Result]:
    enc = sample(codec.encode)
    wire = enc.value
    enc.value = None
    dec = sample(lambda: codec.decode(wire))
    problem = mismatch(profile, codec.rows(dec.value))
    dec.value = None
    if problem is not None:
        return [Result(profile.name, peer.name, "round trip", status=f"MISMATCH: {problem}")]
    results = []
    if "encode" in peer.timed:
        results.append(_named(repeat(codec.encode, enc, reps, budget_s), profile, peer, "encode"))
    if "decode" in peer.timed:
        timed = repeat(lambda: codec.decode(wire), dec, reps, budget_s)
        results.append(_named(timed, profile, peer, "decode"))
    if len(results) == 2:
        results.append(_round_trip(*results))
    return results


def _named(result: Result, profile: Profile, peer: Peer, direction: str) -> Result:
    result.profile, result.method, result.direction = profile.name, peer.name, direction
    return result


def _round_trip(enc: Result, dec: Result) -> Result:
    assert enc.median_s is not None and dec.median_s is not None
    return Result(
        enc.profile,
        enc.method,
        "round trip",
        enc.median_s + dec.median_s,
        min(enc.reps, dec.reps),
        status="ok (sum of medians)",
    )
