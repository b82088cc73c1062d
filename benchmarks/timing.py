"""The one timing loop of the side-by-side scripts: a warm-up call, then the median of ``reps``."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any


def median_ms(fn: Callable[[], Any], reps: int) -> float:
    """Median wall time of ``fn`` in milliseconds, after one untimed warm-up call."""
    fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def medians_ms_interleaved(fns: dict[str, Callable[[], Any]], reps: int) -> dict[str, float]:
    """Median wall time of each of ``fns`` in milliseconds, one untimed warm-up call each, then
    ``reps`` rounds that call each once in turn, so they all see the same machine load."""
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return {name: statistics.median(v) * 1e3 for name, v in times.items()}
