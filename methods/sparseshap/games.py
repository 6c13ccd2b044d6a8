"""Value functions (games): the counting interface, exact Shapley values by enumeration, and
synthetic sparse games whose Shapley values are known in closed form."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from math import factorial

import numpy as np


class CountingValueFunction:
    """v on a batch of 0/1 coalitions (rows of an (b, n) array), counting every evaluation."""

    def __init__(self, fn: Callable[[np.ndarray], np.ndarray], n: int) -> None:
        self.fn, self.n, self.evaluations = fn, n, 0

    def __call__(self, coalitions: np.ndarray) -> np.ndarray:
        coalitions = np.atleast_2d(np.asarray(coalitions, dtype=np.int8))
        if coalitions.shape[1] != self.n:
            raise ValueError(f"coalitions must have {self.n} columns, got {coalitions.shape[1]}")
        self.evaluations += len(coalitions)
        return np.asarray(self.fn(coalitions), dtype=float)


def all_coalitions(n: int) -> np.ndarray:
    """All 2^n coalitions as a (2^n, n) 0/1 array; row index = bitmask."""
    idx = np.arange(2**n, dtype=np.int64)
    return ((idx[:, None] >> np.arange(n)[None, :]) & 1).astype(np.int8)


def exact_shapley(value: Callable[[np.ndarray], np.ndarray], n: int) -> np.ndarray:
    """Shapley values by enumeration (n <= 20):
    phi_i = sum_{S not containing i} |S|! (n - |S| - 1)! / n! (v(S + i) - v(S))."""
    if n > 20:
        raise ValueError(f"exact enumeration needs n <= 20, got {n}")
    z = all_coalitions(n)
    v = np.asarray(value(z), dtype=float)
    sizes = z.sum(axis=1)
    weight = np.array([factorial(s) * factorial(n - s - 1) / factorial(n) if s < n else 0.0
                       for s in range(n + 1)])
    phi = np.empty(n)
    for i in range(n):
        without = np.nonzero(z[:, i] == 0)[0]
        phi[i] = np.sum(weight[sizes[without]] * (v[without | (1 << i)] - v[without]))
    return phi


@dataclass
class SparseGame:
    """v(z) = sum over terms (S, c) of c * prod_{i in S} z_i, all S inside a hidden support.

    Each term is c times the unanimity game of S, whose Shapley value gives c / |S| to every
    member of S, so phi is known exactly for any n.
    """

    n: int
    terms: list[tuple[tuple[int, ...], float]]

    def __call__(self, z: np.ndarray) -> np.ndarray:
        z = np.atleast_2d(z)
        out = np.zeros(len(z))
        for members, coef in self.terms:
            out += coef * np.all(z[:, list(members)] == 1, axis=1)
        return out

    def shapley(self) -> np.ndarray:
        phi = np.zeros(self.n)
        for members, coef in self.terms:
            phi[list(members)] += coef / len(members)
        return phi

    @property
    def support(self) -> np.ndarray:
        return np.unique([i for members, _ in self.terms for i in members])


def random_sparse_game(n: int, s: int, rng: np.random.Generator, n_pairs: int = 3,
                       n_higher: int = 3, max_order: int = 4,
                       interaction_scale: float = 0.5) -> SparseGame:
    """A game on a hidden support of s players: linear terms N(0,1) for each, ``n_pairs``
    pairwise and ``n_higher`` terms of order 3..``max_order`` (scale ``interaction_scale``).
    Higher-order terms matter: a linear-plus-pairwise game is solved exactly by paired
    sampling as soon as the regression is full rank, so it cannot separate estimators.

    The support and the coefficients come from two child streams of ``rng``, so generators
    seeded alike give the same coefficients and term structure for every n.
    """
    support_rng, rng = rng.spawn(2)
    support = support_rng.choice(n, size=s, replace=False)
    terms = [((int(i),), float(rng.standard_normal())) for i in support]
    for _ in range(n_pairs if s >= 2 else 0):
        pair = tuple(int(i) for i in rng.choice(support, 2, replace=False))
        terms.append((pair, interaction_scale * float(rng.standard_normal())))
    for _ in range(n_higher if s >= 3 else 0):
        order = int(rng.integers(3, min(max_order, s) + 1))
        members = tuple(int(i) for i in rng.choice(support, order, replace=False))
        terms.append((members, interaction_scale * float(rng.standard_normal())))
    return SparseGame(n, terms)


def explanation_game(model_predict: Callable[[np.ndarray], np.ndarray], explicand: np.ndarray,
                     baseline: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """Interventional explanation game with one baseline row: v(z) = f(x_z), where x_z takes
    the explicand's features where z = 1 and the baseline's elsewhere."""

    def value(z: np.ndarray) -> np.ndarray:
        return model_predict(np.where(z == 1, explicand[None, :], baseline[None, :]))

    return value
