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
