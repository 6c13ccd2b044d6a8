"""Per-vector rotation cost: dense d x d matrix-vector product vs one RHT."""

from __future__ import annotations

import time

import numpy as np

from methods.ditherq.hadamard import RandomizedHadamard


def _median_seconds(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def rotation_seconds_per_vector(dim: int, repeats: int, rng: np.random.Generator
                                ) -> tuple[float, float]:
    """Median seconds to rotate one vector: (dense, rht), measured side by side.

    The dense cost is the d x d matrix-vector product with a Gaussian matrix (the same flops
    as with an orthogonal one; drawing a Haar matrix by QR is O(d^3) and excluded).
    """
    x = rng.standard_normal(dim)
    dense = rng.standard_normal((dim, dim))
    rht = RandomizedHadamard(dim, rng)
    t_dense = _median_seconds(lambda: dense @ x, repeats)
    t_rht = _median_seconds(lambda: rht.forward(x), repeats)
    return t_dense, t_rht
