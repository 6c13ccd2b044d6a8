"""Compression algorithms (k output rankings) and the baselines they are compared with."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, linear_sum_assignment, milp
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import maximum_flow

from methods.rankcomp.checkers import pair_counts, position_counts, positions


def kendall_tau(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Kendall-tau distances between rankings a (p, m) and b (q, m): (p, q) pair disagreements."""
    pa, pb = positions(np.atleast_2d(a)), positions(np.atleast_2d(b))
    m = pa.shape[1]
    iu = np.triu_indices(m, 1)
    sa = np.sign(pa[:, iu[0]] - pa[:, iu[1]])
    sb = np.sign(pb[:, iu[0]] - pb[:, iu[1]])
    return ((len(iu[0]) - sa @ sb.T) // 2).astype(int)


# -- positional -----------------------------------------------------------------------------

def positional_compress(profile: np.ndarray, k: int, rng=None) -> np.ndarray:
    """Positional proportionality in polynomial time.

    1. T = k M / n has row and column sums k. Round it to an integer R with R_cj in
       {floor T_cj, ceil T_cj} and the same sums: a feasible integral flow (source ->
       candidate, residual demand; candidate -> position, capacity 1 where T_cj is
       fractional; position -> sink, residual demand), found by max flow.
    2. R is the biadjacency matrix of a k-regular bipartite multigraph, so it splits into k
       perfect matchings (Hall/Koenig); each is found as a zero-cost assignment on the support
       of R. Matching i, candidate -> position, is output ranking i.
    """
    n, m = profile.shape
    counts = k * position_counts(profile)
    floor = counts // n
    fractional = (counts % n) != 0
    row_need = k - floor.sum(axis=1)
    col_need = k - floor.sum(axis=0)
    source, sink = 0, 2 * m + 1
    rows, cols, caps = [], [], []
    for c in range(m):
        rows.append(source), cols.append(1 + c), caps.append(int(row_need[c]))
        for j in range(m):
            if fractional[c, j]:
                rows.append(1 + c), cols.append(1 + m + j), caps.append(1)
    for j in range(m):
        rows.append(1 + m + j), cols.append(sink), caps.append(int(col_need[j]))
    graph = csr_matrix((np.array(caps, dtype=np.int32), (rows, cols)),
                       shape=(2 * m + 2, 2 * m + 2))
    flow = maximum_flow(graph, source, sink).flow.toarray()
    if flow[source].sum() != row_need.sum():
        raise RuntimeError("no proportional rounding found (cannot happen for a valid profile)")
    R = floor + (flow[1:1 + m, 1 + m:1 + 2 * m] > 0).astype(int)
    outputs = []
    for _ in range(k):
        cand, pos = linear_sum_assignment((R == 0).astype(int))
        if np.any(R[cand, pos] == 0):
            raise RuntimeError("no perfect matching on the support of R")
        ranking = np.empty(m, dtype=int)
        ranking[pos] = cand
        outputs.append(ranking)
        R[cand, pos] -= 1
    return np.array(outputs)


# -- PSC: Expanding Approvals adapted to k output rankings --------------------------------

def psc_expanding_approvals(profile: np.ndarray, k: int, quota: str = "hare", rng=None
                            ) -> np.ndarray:
    """PSC via an Expanding-Approvals rule (Aziz and Lee) where the k "seats" are output
    rankings and a candidate may head several of them (RECON: the paper's adaptation to k
    output rankings is not public).

    Exact integer arithmetic: a seat costs n / k voters (Hare) or n / (k + 1) voters
    (Droop); scaled by k (k + 1), every voter starts with weight k (k + 1) and a seat costs
    exactly n. For depth j = 1..m, while some candidate is ranked within the top j by voters
    of total remaining weight >= n, open a seat for the best supported one (ties: lowest id)
    and charge n to its supporters (in voter order). Seat output = the candidate first, then
    the others by Borda score among the voters charged, weighted by their charge.

    Guarantee (``top`` reading): a solid coalition entitled to l outputs (>= l n / k voters,
    or > l n / (k + 1) for Droop) holds weight >= l n and can only spend it on C up to depth
    |C|, so l seats are headed by C-candidates by then. The stronger ``prefix`` reading (C
    fills the first |C| positions of l outputs) is not guaranteed: the Borda completion of a
    seat need not put the rest of C next.
    """
    n, m = profile.shape
    scale, q = (k, n) if quota == "hare" else (k + 1, n)
    weight = np.full(n, scale, dtype=np.int64)
    pos = positions(profile)
    seats: list[np.ndarray] = []
    for depth in range(1, m + 1):
        while len(seats) < k:
            approves = pos < depth  # (n, m)
            support = (approves * weight[:, None]).sum(axis=0)
            best = int(np.argmax(support))
            if support[best] < q:
                break
            charge = np.zeros(n, dtype=np.int64)
            remaining = q
            for v in np.nonzero(approves[:, best] & (weight > 0))[0]:
                take = min(remaining, weight[v])
                charge[v], weight[v] = take, weight[v] - take
                remaining -= take
                if remaining == 0:
                    break
            borda = (charge[:, None] * (m - 1 - pos)).sum(axis=0).astype(float)
            borda[best] = np.inf
            seats.append(np.argsort(-borda, kind="stable"))
    while len(seats) < k:  # Droop leaves at most a few unassigned seats: fill by Borda
        seats.append(borda_copies(profile, 1)[0])
    return np.array(seats)


# -- pairwise, on restricted domains ------------------------------------------------------

def _preflib_instance(profile: np.ndarray):
    """The profile as a preflibtools OrdinalInstance (strict orders, one per voter)."""
    from preflibtools.instances import OrdinalInstance

    inst = OrdinalInstance()
    inst.append_order_list([tuple((int(c),) for c in row) for row in profile])
    return inst


def single_crossing_order(profile: np.ndarray) -> np.ndarray:
    """Voter order in which the profile is single-crossing: preflibtools recognises it and
    orders the distinct rankings; the order is mapped back to voters and verified here (every
    pair's supporters must form a prefix or a suffix), since the library can return an order
    that misses rankings. Raises ValueError if the profile is not single-crossing."""
    from preflibtools.properties.subdomains.ordinal.singlecrossing import is_single_crossing

    ok, ordered = is_single_crossing(_preflib_instance(profile))
    if not ok:
        raise ValueError("profile is not single-crossing")
    rank_of = {tuple(int(x[0]) if isinstance(x, tuple) else int(x) for x in o): i
               for i, o in enumerate(ordered)}
    keys = [rank_of.get(tuple(int(c) for c in row)) for row in profile]
    if any(key is None for key in keys):
        raise ValueError("profile is not single-crossing")
    order = np.argsort(np.array(keys), kind="stable")
    pos = positions(profile[order])
    m = profile.shape[1]
    for a in range(m):
        for b in range(a + 1, m):
            prefers = pos[:, a] < pos[:, b]
            if np.count_nonzero(np.diff(prefers.astype(int))) > 1:
                raise ValueError("profile is not single-crossing")
    return order


def pairwise_single_crossing(profile: np.ndarray, k: int, rng=None) -> np.ndarray:
    """Quantile voters in the single-crossing order: voters at 1-based positions
    ceil((i - 1/2) n / k), i = 1..k. For each pair the voters preferring a > b form a prefix
    or suffix of length t of that order, which holds round(t k / n) of the chosen voters."""
    n = len(profile)
    order = single_crossing_order(profile)
    picks = [int(np.ceil((i - 0.5) * n / k)) - 1 for i in range(1, k + 1)]
    return profile[order[picks]]


def single_peaked_axis(profile: np.ndarray) -> list[int]:
    from preflibtools.properties.subdomains.ordinal.singlepeaked.singlepeakedness import (
        is_single_peaked,
    )

    ok, axis = is_single_peaked(_preflib_instance(profile))
    if not ok:
        raise ValueError("profile is not single-peaked")
    return [int(a) for a in axis]


def single_peaked_rankings(axis: list[int]) -> np.ndarray:
    """All 2^(m-1) rankings single-peaked on ``axis``: start at a peak and grow an interval
    of the axis to the left or to the right, one candidate at a time."""
    m = len(axis)
    out = set()
    for peak in range(m):
        for moves in itertools.product((0, 1), repeat=m - 1):
            lo = hi = peak
            ranking = [axis[peak]]
            for go_right in moves:
                if (go_right and hi < m - 1) or lo == 0:
                    hi += 1
                    ranking.append(axis[hi])
                else:
                    lo -= 1
                    ranking.append(axis[lo])
            out.add(tuple(ranking))
    return np.array(sorted(out))


def pairwise_single_peaked(profile: np.ndarray, k: int, rng=None) -> np.ndarray:
    """Pairwise proportionality on a single-peaked profile (RECON: the paper's construction
    is not public). Integer program over the rankings single-peaked on the recognised axis:
    choose k of them (with repetition) whose pair counts are within the rounding bounds,
    minimizing the total Kendall-tau distance to the profile; scipy's HiGHS MILP."""
    n, m = profile.shape
    candidates = single_peaked_rankings(single_peaked_axis(profile))
    N = pair_counts(profile)
    iu = np.triu_indices(m, 1)
    pos = positions(candidates)
    above = (pos[:, iu[0]] < pos[:, iu[1]]).T.astype(float)  # (pairs, rankings)
    lo, hi = (k * N[iu]) // n, -(-(k * N[iu]) // n)
    cost = kendall_tau(candidates, profile).sum(axis=1).astype(float)
    constraints = [LinearConstraint(above, lo, hi),
                   LinearConstraint(np.ones((1, len(candidates))), k, k)]
    res = milp(cost, constraints=constraints, integrality=np.ones(len(candidates)),
               bounds=Bounds(0, k))
    if res.x is None:
        raise RuntimeError("no pairwise-proportional single-peaked compression found")
    counts = np.round(res.x).astype(int)
    return np.repeat(candidates, counts, axis=0)


# -- baselines ----------------------------------------------------------------------------

def borda_copies(profile: np.ndarray, k: int, rng=None) -> np.ndarray:
    """k copies of the Borda ranking (ties by candidate id)."""
    m = profile.shape[1]
    score = (m - 1 - positions(profile)).sum(axis=0)
    return np.tile(np.argsort(-score, kind="stable"), (k, 1))


def kemeny_copies(profile: np.ndarray, k: int, rng=None, max_m: int = 8) -> np.ndarray:
    """k copies of an exact Kemeny ranking (enumeration over m! rankings, m <= 8)."""
    m = profile.shape[1]
    if m > max_m:
        raise ValueError(f"exact Kemeny enumerates m! rankings; m={m} > {max_m}")
    N = pair_counts(profile)
    perms = np.array(list(itertools.permutations(range(m))))
    pos = positions(perms)
    agree = (pos[:, :, None] < pos[:, None, :]) * N[None]
    return np.tile(perms[np.argmax(agree.sum(axis=(1, 2)))], (k, 1))


def random_voters(profile: np.ndarray, k: int, rng=None) -> np.ndarray:
    """k voters drawn uniformly without replacement."""
    rng = rng or np.random.default_rng(0)
    return profile[rng.choice(len(profile), size=k, replace=len(profile) < k)]


def kmedoids_kendall(profile: np.ndarray, k: int, rng=None, iters: int = 30) -> np.ndarray:
    """k-medoids (Voronoi iteration, k-means++ start) on the Kendall-tau distance between
    voters; the medoids' rankings are the output."""
    rng = rng or np.random.default_rng(0)
    uniq, weight = np.unique(profile, axis=0, return_counts=True)
    dist = kendall_tau(uniq, uniq).astype(float)
    medoids = [int(rng.choice(len(uniq), p=weight / weight.sum()))]
    while len(medoids) < min(k, len(uniq)):
        d2 = dist[:, medoids].min(axis=1) ** 2 * weight
        medoids.append(int(rng.choice(len(uniq), p=d2 / d2.sum())) if d2.sum() > 0
                       else int(rng.integers(len(uniq))))
    for _ in range(iters):
        assign = np.argmin(dist[:, medoids], axis=1)
        new = []
        for c in range(len(medoids)):
            members = np.nonzero(assign == c)[0]
            costs = (dist[np.ix_(members, members)] * weight[members][:, None]).sum(axis=0)
            new.append(int(members[np.argmin(costs)]))
        if new == medoids:
            break
        medoids = new
    picks = (medoids * (k // len(medoids) + 1))[:k]
    return uniq[picks]


ALGORITHMS: dict[str, Callable] = {
    "positional": positional_compress,
    "psc_ear": psc_expanding_approvals,
    "pairwise_single_crossing": pairwise_single_crossing,
    "pairwise_single_peaked": pairwise_single_peaked,
}
BASELINES: dict[str, Callable] = {
    "kmedoids": kmedoids_kendall, "borda": borda_copies, "kemeny": kemeny_copies,
    "random_voters": random_voters,
}


def compress(name: str, profile: np.ndarray, k: int, rng=None) -> np.ndarray:
    table = {**ALGORITHMS, **BASELINES}
    if name not in table:
        raise ValueError(f"unknown compression '{name}'; known: {sorted(table)}")
    return table[name](profile, k, rng=rng)
