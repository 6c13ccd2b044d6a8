"""Independent jobs of one run in worker processes.

Tiny models use one torch thread best (more threads only wait on each other), so a protocol
whose jobs are independent (seeds x arms) fills the machine's other cores with processes.
Workers are spawned (a fork would copy torch's thread pools), inherit the run's thread
settings through the environment, and must get picklable jobs; each job seeds itself, so
the results equal a sequential run's. Inside a launcher's worker process (a joblib sweep,
``make reproduce``) the jobs run in turn: the launcher already fills the cores, and a worker
of its pool cannot spawn a pool of its own."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any


def map_jobs(fn: Callable[..., Any], jobs: Sequence[tuple], workers: int,
             progress: Callable[[Iterable, int], Iterable] | None = None) -> list[Any]:
    """``[fn(*job) for job in jobs]``, in ``workers`` processes when ``workers`` > 1;
    ``progress(iterable, total)`` wraps the completions (e.g. a progress bar)."""
    def track(items):
        return progress(items, len(jobs)) if progress is not None else items

    in_launcher_worker = multiprocessing.current_process().name != "MainProcess"
    if workers <= 1 or len(jobs) <= 1 or in_launcher_worker:
        return [fn(*job) for job in track(jobs)]
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(min(workers, len(jobs)), mp_context=context) as pool:
        futures = {pool.submit(fn, *job): k for k, job in enumerate(jobs)}
        results: list[Any] = [None] * len(jobs)
        for future in track(as_completed(futures)):
            results[futures[future]] = future.result()
    return results
