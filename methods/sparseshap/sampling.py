"""Coalition samplers: with replacement from a size distribution (Kernel SHAP), and without
replacement, paired with complements, with per-size budgets proportional to a size weight
capped by the number of coalitions of that size (Leverage SHAP, Sparse Leverage SHAP)."""

from __future__ import annotations

import functools

import numpy as np
from scipy.special import comb


def _random_subsets(n: int, size: int, count: int, rng: np.random.Generator,
                    must_contain: int | None = None) -> np.ndarray:
    """``count`` distinct subsets of the given size, uniformly, as 0/1 rows."""
    pool_n = n - (must_contain is not None)
    pool_size = size - (must_contain is not None)
    total = comb(pool_n, pool_size, exact=True)
    if count > total:
        raise ValueError(f"asked for {count} distinct subsets out of {total}")
    others = np.array([i for i in range(n) if i != must_contain])
    seen: set[bytes] = set()
    rows = []
    if total <= max(4 * count, 20_000):  # small space: choose indices among all subsets
        from itertools import combinations

        combos = list(combinations(range(pool_n), pool_size))
        for idx in rng.choice(len(combos), size=count, replace=False):
            row = np.zeros(n, dtype=np.int8)
            row[others[list(combos[idx])]] = 1
            rows.append(row)
    else:  # large space: rejection of duplicates (rare)
        while len(rows) < count:
            row = np.zeros(n, dtype=np.int8)
            row[others[rng.choice(pool_n, size=pool_size, replace=False)]] = 1
            key = row.tobytes()
            if key not in seen:
                seen.add(key)
                rows.append(row)
    if must_contain is not None:
        for row in rows:
            row[must_contain] = 1
    return np.array(rows, dtype=np.int8).reshape(count, n)


@functools.lru_cache(maxsize=65536)
def distinct_pairs(n: int, s: int) -> int:
    """Complement pairs with the smaller side of size s (at s = n/2 each pair counts once)."""
    return comb(n, s, exact=True) // (2 if 2 * s == n else 1)


def expected_pairs_per_size(n: int, budget: int, size_weight: np.ndarray) -> dict[int, float]:
    """Expected number of complement pairs for each size s <= n/2.

    Pairs cost two evaluations; the empty and full coalitions take two more. The expectation
    is c * (weight(s) + weight(n - s)) capped at the number of distinct pairs, with c set by
    water filling so that the expectations sum to the number of pairs the budget buys.
    Computed once per (n, budget, weights): every draw at that budget reuses it.
    """
    return dict(_expected_pairs(n, budget, tuple(float(w) for w in size_weight)))


@functools.lru_cache(maxsize=4096)
def _expected_pairs(n: int, budget: int, size_weight: tuple[float, ...]) -> dict[int, float]:
    pairs = max(0, (budget - 2) // 2)
    half = range(1, n // 2 + 1)
    cap = {s: distinct_pairs(n, s) for s in half}
    want = {s: float(size_weight[s - 1] + (size_weight[n - s - 1] if 2 * s != n else 0.0))
            for s in half}
    pairs = min(pairs, sum(cap.values()))
    if pairs == 0:
        return {s: 0.0 for s in half}
    lo, hi = 0.0, float(pairs) / min(w for w in want.values() if w > 0) + 1.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if sum(min(cap[s], mid * want[s]) for s in half) < pairs:
            lo = mid
        else:
            hi = mid
    real = {s: min(cap[s], hi * want[s]) for s in half}
    uncapped = [s for s in half if real[s] < cap[s]]  # absorb the bisection's last bit
    excess = sum(real.values()) - pairs
    if uncapped and excess:
        total = sum(real[s] for s in uncapped)
        for s in uncapped:
            real[s] -= excess * real[s] / total
    return real


def pairs_per_size(expected: dict[int, float], rng: np.random.Generator) -> dict[int, int]:
    """Integer pair counts with E[count(s)] = expected[s] and the exact total: systematic
    sampling (one uniform offset on the cumulative expectations), so each count is the floor
    or the ceiling of its expectation. The official Leverage SHAP code rounds
    deterministically instead, which at budgets below ~n pairs gives all pairs to the smallest
    sizes (ties in the fractional parts) and leaves the importance weights wrong; with
    randomized counts the weights 1 / p(z), p(z) = expected / C(n, s), stay unbiased."""
    sizes = list(expected)
    cum = np.round(np.concatenate([[0.0], np.cumsum([expected[s] for s in sizes])]), 9)
    marks = np.floor(cum + rng.uniform())
    return {s: int(c) for s, c in zip(sizes, np.diff(marks), strict=True)}


def paired_without_replacement(n: int, budget: int, size_weight: np.ndarray,
                               rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Coalitions (rows) and their inclusion probabilities. Every sampled z comes with its
    complement in the next row (rows 2i and 2i + 1 are a pair); at size n/2 (n even) sets
    containing player n-1 are drawn so that a set and its complement are never drawn twice.
    The empty and full coalitions are not included."""
    expected = expected_pairs_per_size(n, budget, size_weight)
    rows, probs = [], []
    for s, count in pairs_per_size(expected, rng).items():
        if count == 0:
            continue
        subsets = _random_subsets(n, s, count, rng, must_contain=n - 1 if 2 * s == n else None)
        rows.append(np.stack([subsets, 1 - subsets], axis=1).reshape(2 * count, n))
        probs.append(np.full(2 * count, expected[s] / distinct_pairs(n, s)))
    if not rows:
        return np.zeros((0, n), dtype=np.int8), np.zeros(0)
    return np.concatenate(rows), np.concatenate(probs)


def kernel_with_replacement(n: int, budget: int, rng: np.random.Generator) -> np.ndarray:
    """Kernel SHAP: budget - 2 coalitions i.i.d., size ~ (n - 1) / (s (n - s)), then uniform."""
    sizes = np.arange(1, n)
    p = 1.0 / (sizes * (n - sizes))
    draws = rng.choice(sizes, size=max(0, budget - 2), p=p / p.sum())
    rows = np.zeros((len(draws), n), dtype=np.int8)
    for row, s in zip(rows, draws, strict=True):
        row[rng.choice(n, size=s, replace=False)] = 1
    return rows
