"""Per-vector rotation cost, dense d x d rotation vs one RHT, at a given batch size."""

from __future__ import annotations

import time

import numpy as np

from methods.ditherq.hadamard import RandomizedHadamard


def median_seconds(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def rotation_seconds_per_vector(dim: int, repeats: int, rng: np.random.Generator,
                                batch: int = 1) -> tuple[float, float]:
    """Median seconds per vector to rotate ``batch`` vectors at once: (dense, rht), measured
    side by side. Dense: the (batch x d) @ (d x d) product (a matrix-vector product at batch
    1, a GEMM above) with a Gaussian matrix (the same flops as an orthogonal one; drawing a
    Haar matrix by QR is O(d^3) and excluded). RHT: butterflies at batch 1, the Kronecker
    GEMM form for batches (``fwht``)."""
    x = rng.standard_normal((batch, dim)) if batch > 1 else rng.standard_normal(dim)
    dense = rng.standard_normal((dim, dim))
    rht = RandomizedHadamard(dim, rng)
    t_dense = median_seconds(lambda: x @ dense, repeats)
    t_rht = median_seconds(lambda: rht.forward(x), repeats)
    return t_dense / batch, t_rht / batch
