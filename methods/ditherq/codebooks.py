"""Scalar codebooks for the N(0,1) law of a normalized rotated coordinate.

After a random rotation, sqrt(d) * (rotated unit vector) has coordinates close to N(0, 1)
(exactly (t+1)/2 ~ Beta((d-1)/2, (d-1)/2) for t = one coordinate of a Haar-rotated unit
vector; the Gaussian is its d -> infinity limit, used here for every d).
"""

from __future__ import annotations

from functools import cache

import numpy as np
from scipy.optimize import minimize_scalar
from scipy.stats import norm

SQRT3 = float(np.sqrt(3.0))


def panter_dite_bound(bits: int | np.ndarray) -> float | np.ndarray:
    """pi*sqrt(3)/2 * 4^-b: the high-rate MSE of optimal companding for N(0,1)."""
    return np.pi * SQRT3 / 2 * 4.0 ** (-np.asarray(bits, dtype=float))


def gaussian_cell_mse(boundaries: np.ndarray, levels: np.ndarray) -> float:
    """E[(U - Q(U))^2] for U ~ N(0,1), cells (boundaries[i], boundaries[i+1]) -> levels[i].

    Closed form per cell: int_a^b (u - m)^2 phi(u) du
      = (Phi(b) - Phi(a)) (1 + m^2) + a phi(a) - b phi(b) - 2 m (phi(a) - phi(b)).
    ``boundaries`` has len(levels) + 1 entries and may start/end at -inf/+inf.
    """
    a, b = boundaries[:-1], boundaries[1:]
    mass = norm.cdf(b) - norm.cdf(a)
    a_phi = np.where(np.isfinite(a), a, 0.0) * norm.pdf(a)  # u phi(u) -> 0 at +-inf
    b_phi = np.where(np.isfinite(b), b, 0.0) * norm.pdf(b)
    first = norm.pdf(a) - norm.pdf(b)
    return float(np.sum(mass * (1 + levels**2) + a_phi - b_phi - 2 * levels * first))


@cache
def lloyd_max_gaussian(bits: int, tol: float = 1e-12, max_iter: int = 200_000
                       ) -> tuple[np.ndarray, np.ndarray]:
    """Lloyd-Max codebook for N(0,1) with 2^bits levels: (boundaries, centroids).

    Lloyd's fixed point: boundaries are midpoints of adjacent centroids; each centroid is the
    conditional mean of its cell, (phi(a) - phi(b)) / (Phi(b) - Phi(a)). Iterated to ``tol``
    (convergence is slow for many levels, so no fixed iteration count). The returned
    ``boundaries`` include -inf and +inf.
    """
    levels = 2**bits
    centroids = norm.ppf((np.arange(levels) + 0.5) / levels)
    for _ in range(max_iter):
        inner = (centroids[:-1] + centroids[1:]) / 2
        bounds = np.concatenate([[-np.inf], inner, [np.inf]])
        mass = norm.cdf(bounds[1:]) - norm.cdf(bounds[:-1])
        new = (norm.pdf(bounds[:-1]) - norm.pdf(bounds[1:])) / mass
        if np.max(np.abs(new - centroids)) < tol:
            centroids = new
            break
        centroids = new
    bounds = np.concatenate([[-np.inf], (centroids[:-1] + centroids[1:]) / 2, [np.inf]])
    bounds.setflags(write=False)
    centroids.setflags(write=False)
    return bounds, centroids


def uniform_levels(bits: int, clip: float) -> tuple[np.ndarray, np.ndarray]:
    """Midrise uniform quantizer on [-clip, clip] with 2^bits levels; outer cells unbounded."""
    levels = 2**bits
    step = 2 * clip / levels
    centers = -clip + (np.arange(levels) + 0.5) * step
    inner = -clip + np.arange(1, levels) * step
    return np.concatenate([[-np.inf], inner, [np.inf]]), centers


@cache
def uniform_clip_gaussian(bits: int) -> float:
    """The clipping range c minimizing the N(0,1) MSE of the 2^bits-level uniform quantizer."""
    res = minimize_scalar(lambda c: gaussian_cell_mse(*uniform_levels(bits, c)),
                          bounds=(0.1, 10.0), method="bounded", options={"xatol": 1e-10})
    return float(res.x)


def gaussian_compander(u: np.ndarray) -> np.ndarray:
    """G(u) = Phi(u / sqrt 3): the optimal high-rate compander for N(0,1) (phi^(1/3) ~ N(0,3))."""
    return norm.cdf(u / SQRT3)


def gaussian_expander(z: np.ndarray) -> np.ndarray:
    """G^-1(z) = sqrt 3 * Phi^-1(z)."""
    return SQRT3 * norm.ppf(z)
