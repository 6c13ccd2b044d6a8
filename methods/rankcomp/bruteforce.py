"""Exhaustive search over all multisets of k output rankings (small m, k): ground truth for
the algorithms and the search for profiles that admit no pairwise-proportional output."""

from __future__ import annotations

import itertools

import numpy as np

from methods.rankcomp.checkers import pair_counts, positions


def all_rankings(m: int) -> np.ndarray:
    return np.array(list(itertools.permutations(range(m))))


def all_multisets(m: int, k: int) -> np.ndarray:
    """Indices into ``all_rankings(m)`` of every multiset of size k, shape (count, k)."""
    return np.array(list(itertools.combinations_with_replacement(range(len(all_rankings(m))),
                                                                 k)))


def pairwise_proportional_outputs(profile: np.ndarray, k: int) -> np.ndarray:
    """Every multiset (as ranking indices) whose pair counts meet the pairwise bounds."""
    n, m = profile.shape
    perms = all_rankings(m)
    pos = positions(perms)
    iu = np.triu_indices(m, 1)
    above = (pos[:, iu[0]] < pos[:, iu[1]]).astype(int)  # (m!, pairs)
    multisets = all_multisets(m, k)
    counts = above[multisets].sum(axis=1)  # (count, pairs): outputs with a > b
    N = pair_counts(profile)[iu]
    lo, hi = (k * N) // n, -(-(k * N) // n)
    ok = np.all((counts >= lo) & (counts <= hi), axis=1)
    return multisets[ok]


def find_pairwise_impossibility(rng: np.random.Generator, max_n: int = 12,
                                sizes=((3, 2), (3, 3), (4, 2), (4, 3)),
                                tries: int = 200) -> dict | None:
    """The smallest (m, k, then n) impartial-culture profile with no pairwise-proportional
    output, found by exhaustive search over outputs; None if none was found."""
    for m, k in sizes:
        perms = all_rankings(m)
        for n in range(2, max_n + 1):
            for _ in range(tries):
                profile = perms[rng.integers(0, len(perms), n)]
                if len(pairwise_proportional_outputs(profile, k)) == 0:
                    return {"m": m, "k": k, "n": n, "profile": profile}
    return None
