"""The three proportionality axioms, written independently of the algorithms, in exact
integer arithmetic. ``outputs`` are k rankings; n voters; k outputs stand for n/k voters each.

- Positional: for every candidate c and position j, the number of outputs with c at j lies in
  {floor(k M_cj / n), ceil(k M_cj / n)}, M_cj = #voters ranking c at position j.
- Pairwise: for every ordered pair (a, b), the number of outputs with a > b lies in
  {floor(k N_ab / n), ceil(k N_ab / n)}, N_ab = #voters ranking a above b.
- PSC (proportionality for solid coalitions), the definition implemented here: a set C of
  j candidates is *solidly supported* by the voters whose top-j set is exactly C; if those
  are at least l n / k voters (Hare quota; Droop: more than l n / (k + 1) voters), at least
  l outputs must *represent* C. Readings of "represent": ``top`` (default): the output's
  first candidate is in C; ``prefix``: the output ranks C in its top j positions.
"""

from __future__ import annotations

import numpy as np


def positions(rankings: np.ndarray) -> np.ndarray:
    """pos[i, c] = position (0 = best) of candidate c in ranking i."""
    rankings = np.asarray(rankings)
    pos = np.empty_like(rankings)
    rows = np.arange(rankings.shape[0])[:, None]
    pos[rows, rankings] = np.arange(rankings.shape[1])[None, :]
    return pos


def position_counts(rankings: np.ndarray) -> np.ndarray:
    """M[c, j] = #rankings with candidate c at position j."""
    rankings = np.asarray(rankings)
    m = rankings.shape[1]
    counts = np.zeros((m, m), dtype=np.int64)
    for j in range(m):
        counts[:, j] = np.bincount(rankings[:, j], minlength=m)
    return counts


def pair_counts(rankings: np.ndarray) -> np.ndarray:
    """N[a, b] = #rankings with a above b."""
    pos = positions(rankings)
    return np.sum(pos[:, :, None] < pos[:, None, :], axis=0)


def _within_rounding(output_counts: np.ndarray, voter_counts: np.ndarray, n: int, k: int
                     ) -> np.ndarray:
    scaled = k * voter_counts
    return (output_counts >= scaled // n) & (output_counts <= -(-scaled // n))


def positional_ok(profile: np.ndarray, outputs: np.ndarray) -> bool:
    n, k = len(profile), len(outputs)
    return bool(np.all(_within_rounding(position_counts(outputs), position_counts(profile),
                                        n, k)))


def pairwise_ok(profile: np.ndarray, outputs: np.ndarray) -> bool:
    n, k = len(profile), len(outputs)
    ok = _within_rounding(pair_counts(outputs), pair_counts(profile), n, k)
    np.fill_diagonal(ok, True)
    return bool(np.all(ok))


def required_representatives(group_size: int, n: int, k: int, quota: str) -> int:
    """Largest l with group_size >= l n / k (Hare) or group_size > l n / (k + 1) (Droop)."""
    if quota == "hare":
        return group_size * k // n
    if quota == "droop":
        return -(-group_size * (k + 1) // n) - 1
    raise ValueError(f"unknown quota '{quota}'; known: hare, droop")


def represents(output: np.ndarray, cands: frozenset, reading: str) -> bool:
    if reading == "top":
        return int(output[0]) in cands
    if reading == "prefix":
        return frozenset(int(c) for c in output[: len(cands)]) == cands
    raise ValueError(f"unknown reading '{reading}'; known: top, prefix")


def psc_violations(profile: np.ndarray, outputs: np.ndarray, quota: str = "hare",
                   reading: str = "top") -> list[tuple[frozenset, int, int]]:
    """Every (C, required, represented) with represented < required."""
    n, m = profile.shape
    k = len(outputs)
    bad = []
    for j in range(1, m + 1):
        groups: dict[frozenset, int] = {}
        for row in profile:
            key = frozenset(int(c) for c in row[:j])
            groups[key] = groups.get(key, 0) + 1
        for cands, size in groups.items():
            need = required_representatives(size, n, k, quota)
            if need > 0:
                have = sum(represents(o, cands, reading) for o in outputs)
                if have < need:
                    bad.append((cands, need, have))
    return bad


def psc_ok(profile: np.ndarray, outputs: np.ndarray, quota: str = "hare",
           reading: str = "top") -> bool:
    return not psc_violations(profile, outputs, quota, reading)
