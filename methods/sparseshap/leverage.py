"""Leverage scores of the Shapley regression, dense and sparse.

The projected design A = sqrt(W) Z P (P = I - 11^T / n, Shapley kernel weights W over all
coalitions except the empty and full ones) has Gram matrix kappa P with kappa = (n - 1) / n,
so the leverage of coalition z is 1 / C(n, |z|) and every size carries total leverage 1
(Leverage SHAP samples sizes uniformly).

Sparse leverage (RECON: the paper's exact score is not public; this is the definition
tau_z = sup_{|x|_0 <= k} (a_z^T x)^2 / |A x|^2 = max_{|T| = k} leverage of row z in A_T):
A_T^T A_T = kappa (I_k - 11^T / n) with inverse (I_k + 11^T / (n - k)) / kappa
(Sherman-Morrison). For |z| = s and q = |z cap T|, v = (z_j - s/n)_{j in T} gives

    lev_T(z) = w(s) / kappa * [ q (1 - s/n)^2 + (k - q) (s/n)^2 + (q - k s/n)^2 / (n - k) ],

convex in q, so the maximum is at q = min(k, s) or q = max(0, k - (n - s)).
"""

from __future__ import annotations

import itertools

import numpy as np
from scipy.special import comb


def shapley_kernel(n: int, sizes: np.ndarray) -> np.ndarray:
    """w(s) = (n - 1) / (C(n, s) s (n - s)) for 0 < s < n."""
    sizes = np.asarray(sizes, dtype=float)
    return (n - 1) / (comb(n, sizes) * sizes * (n - sizes))


def sparse_leverage_by_size(n: int, k: int) -> np.ndarray:
    """tau(s) for s = 1..n-1 (closed form above); index 0 is size 1."""
    if not 1 <= k < n:
        raise ValueError(f"sparsity k must be in 1..n-1, got {k}")
    kappa = (n - 1) / n
    out = []
    for s in range(1, n):
        best = 0.0
        for q in {min(k, s), max(0, k - (n - s))}:
            g = q * (1 - s / n) ** 2 + (k - q) * (s / n) ** 2 + (q - k * s / n) ** 2 / (n - k)
            best = max(best, g)
        out.append(float(shapley_kernel(n, np.array([s]))[0]) / kappa * best)
    return np.array(out)


def sparse_leverage_bruteforce(n: int, k: int) -> np.ndarray:
    """Ground truth for small n: build A over all coalitions and take, for each coalition,
    the max over all column subsets T (|T| = k) of its leverage in A_T. Returns tau per size."""
    from methods.sparseshap.games import all_coalitions

    z = all_coalitions(n)[1:-1].astype(float)
    sizes = z.sum(axis=1).astype(int)
    A = np.sqrt(shapley_kernel(n, sizes))[:, None] * (z - sizes[:, None] / n)
    tau = np.zeros(len(z))
    for T in itertools.combinations(range(n), k):
        a_t = A[:, T]
        gram_inv = np.linalg.inv(a_t.T @ a_t)
        tau = np.maximum(tau, np.einsum("ij,jk,ik->i", a_t, gram_inv, a_t))
    by_size = np.array([tau[sizes == s].max() for s in range(1, n)])
    spread = np.array([np.ptp(tau[sizes == s]) for s in range(1, n)])
    if np.any(spread > 1e-9 * by_size):
        raise AssertionError("sparse leverage should depend on the coalition size only")
    return by_size
