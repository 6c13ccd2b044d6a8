"""Timing for the benchmarks: the best of a few repeats (the least disturbed run)."""

from __future__ import annotations

import time


def best_of(repeats: int, fn) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)
