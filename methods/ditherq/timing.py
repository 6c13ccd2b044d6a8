"""Per-vector rotation cost, dense d x d rotation vs one RHT (forward and inverse), at a
given batch size, measured side by side in one process."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from methods.ditherq.hadamard import RandomizedHadamard


def interleaved_medians(fns: dict, repeats: int) -> dict[str, float]:
    """Median seconds of each function, the functions timed in turn within every repeat, so
    that a slower or busier stretch of the machine falls on all of them alike rather than on
    whichever was timed last. Each timed call follows an untimed call of the same function,
    so it finds its own data in the cache, as in a loop over batches."""
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            fn()
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: float(np.median(values)) for name, values in times.items()}


@dataclass(frozen=True)
class RotationTimes:
    """Median seconds per vector."""

    dense: float
    forward: float
    inverse: float


def rotation_seconds_per_vector(dim: int, repeats: int, rng: np.random.Generator,
                                batch: int = 1) -> RotationTimes:
    """Seconds per vector to rotate ``batch`` vectors at once. Dense: the (batch x d) @
    (d x d) product (a matrix-vector product at batch 1, a GEMM above) with a Gaussian matrix
    (the same flops as an orthogonal one; drawing a Haar matrix by QR is O(d^3) and excluded).
    RHT: :class:`RandomizedHadamard`'s forward and inverse, exactly as the quantizer calls them
    (the blocked Kronecker form)."""
    x = rng.standard_normal((batch, dim)) if batch > 1 else rng.standard_normal(dim)
    dense = rng.standard_normal((dim, dim))
    rht = RandomizedHadamard(dim, rng)
    y = rht.forward(x)
    medians = interleaved_medians({"dense": lambda: x @ dense, "forward": lambda: rht.forward(x),
                                   "inverse": lambda: rht.inverse(y)}, repeats)
    return RotationTimes(**{name: seconds / batch for name, seconds in medians.items()})
