"""Sufficient explanations of y = sign f(x) over a box around x.

A set S of fixed features is *sufficient* when y f(z) > 0 for every z with z_S = x_S and
the free features z_i in B_i = [x_i - eps, x_i + eps] (clipped to the data's domain). Every
algorithm returns the fixed set and how much it solved; ``worst_case`` (one MILP over the
whole model) is the independent check of any returned set.

- ``nam_explanation``: additive models without interactions. Freeing feature i costs
  delta_i = y h_i(x_i) - min_{B_i} y h_i (exact 1-D minimum); a free set is sufficient iff
  its deltas sum below the margin, so freeing the smallest deltas is cardinally minimal,
  found by binary search over the sorted prefix sums.
- ``exact_explanation`` (sparse interactions): the interaction graph's connected
  components do not share terms, so the worst case of a free set is the sum over
  components. Per component every freeing pattern's exact loss is solved (1-D exact or
  MILP); a knapsack over components (how many features each frees, at the least loss)
  gives a cardinally minimal explanation. Cost exponential only in the component size.
- ``interaction_aware_explanation`` (RECON of the paper's stronger notion): each feature
  is charged its unary loss plus the full both-free loss of every pair it is in; a free set
  whose charges sum below the margin is sufficient (a sound over-count), and the smallest
  charges are freed as for NAMs; minimal with respect to this notion, any interaction order.
- ``verix_explanation``: the generic baseline; frees features one by one in a sensitivity
  order, each step one MILP over the whole network (subset-minimal, n solver calls).
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass

import numpy as np

from common.errors import UserError
from methods.sufexplain.networks import AdditiveModel, ReluNet, exact_min_1d, exact_min_planar
from methods.sufexplain.verify import milp_minimum


@dataclass
class Explanation:
    fixed: list[int]  # the explanation: features kept at their input values
    solver_calls: int  # exact minimisations (1-D or MILP) and sufficiency queries
    seconds: float

    @property
    def size(self) -> int:
        return len(self.fixed)


def perturbation_box(x: np.ndarray, eps: float, domain_lo: np.ndarray, domain_hi: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray]:
    """B_i = [x_i - eps, x_i + eps] clipped to the domain (eps = inf: the whole domain); a
    point outside the domain (a test point beyond the training range) stays in its box."""
    return (np.maximum(x - eps, np.minimum(domain_lo, x)),
            np.minimum(x + eps, np.maximum(domain_hi, x)))


def _scaled(net: ReluNet, sign: float) -> ReluNet:
    return ReluNet(net.weights[:-1] + [sign * net.weights[-1]],
                   net.biases[:-1] + [sign * net.biases[-1]], net.inputs)


def _tolerance(margin: float) -> float:
    return 1e-6 * max(1.0, abs(margin))


def free_box(x: np.ndarray, lo: np.ndarray, hi: np.ndarray, free
             ) -> tuple[np.ndarray, np.ndarray]:
    """The box of the ``free`` features, every other feature fixed at x (lo = hi = x)."""
    index = list(free)
    box_lo, box_hi = x.astype(float), x.astype(float)
    box_lo[index], box_hi[index] = lo[index], hi[index]
    return box_lo, box_hi


def worst_case(model: AdditiveModel, x: np.ndarray, free: set[int], lo: np.ndarray,
               hi: np.ndarray) -> float:
    """Certified lower bound of min y f(z) over the free features' boxes (one MILP)."""
    y = float(np.sign(model(x)[0]))
    value, _ = milp_minimum(model.terms, y, *free_box(x, lo, hi, free))
    return value + y * model.bias


def is_sufficient(model: AdditiveModel, x: np.ndarray, fixed: list[int], lo: np.ndarray,
                  hi: np.ndarray) -> bool:
    free = set(range(len(x))) - set(fixed)
    return worst_case(model, x, free, lo, hi) > 0


def _margin(model: AdditiveModel, x: np.ndarray) -> tuple[float, float]:
    value = float(model(x)[0])
    if value == 0:
        raise UserError("the model's output is exactly 0 at this point: no prediction")
    return float(np.sign(value)), abs(value)


def _free_smallest(charges: np.ndarray, margin: float) -> tuple[list[int], int]:
    """The largest prefix of the sorted charges whose sum stays below the margin (binary
    search: log2(n) sufficiency queries); returns the freed features and the queries."""
    order = np.argsort(charges, kind="stable")
    prefix = np.concatenate([[0.0], np.cumsum(charges[order])])
    bound = margin - _tolerance(margin)
    lo, hi, queries = 0, len(charges), 0
    while lo < hi:  # invariant: prefix[lo] < bound
        mid = (lo + hi + 1) // 2
        queries += 1
        if prefix[mid] < bound:
            lo = mid
        else:
            hi = mid - 1
    return sorted(order[:lo].tolist()), queries


def unary_losses(model: AdditiveModel, x: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                 y: float) -> np.ndarray:
    """delta_i = y h_i(x_i) - min_{B_i} y h_i for every feature (0 without a unary term)."""
    losses = np.zeros(len(x))
    for term in model.terms:
        if len(term.inputs) == 1:
            (i,) = term.inputs
            net = _scaled(term, y)
            losses[i] += float(net(x[None])[0]) - exact_min_1d([net], lo[i], hi[i])
    return losses


def nam_explanation(model: AdditiveModel, x: np.ndarray, lo: np.ndarray, hi: np.ndarray
                    ) -> Explanation:
    start = time.perf_counter()
    if any(len(t.inputs) != 1 for t in model.terms):
        raise UserError("the NAM algorithm needs a model without interaction terms")
    y, margin = _margin(model, x)
    free, queries = _free_smallest(unary_losses(model, x, lo, hi, y), margin)
    fixed = sorted(set(range(len(x))) - set(free))
    return Explanation(fixed, len(x) + queries, time.perf_counter() - start)


def components(n: int, edges: list[tuple[int, int]]) -> list[list[int]]:
    """Connected components of the interaction graph on features 0..n-1."""
    parent = list(range(n))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, j in edges:
        parent[root(i)] = root(j)
    groups: dict[int, list[int]] = {}
    for i in range(n):
        groups.setdefault(root(i), []).append(i)
    return sorted(groups.values())


def pattern_loss(model: AdditiveModel, x: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                 y: float, terms: list[ReluNet], pattern: tuple[int, ...]) -> float:
    """Exact loss of freeing ``pattern`` (inside one component whose terms are ``terms``):
    y T(x) - min over the pattern's boxes of y T, the rest fixed at x."""
    scaled = [_scaled(t, y) for t in terms]
    base = sum(float(t(x[None])[0]) for t in scaled)
    if len(pattern) == 1:
        (i,) = pattern
        values = {j: float(x[j]) for t in terms for j in t.inputs}
        nets = [t.fix(i, values) for t in scaled if i in t.inputs]
        return base - (exact_min_1d(nets, lo[i], hi[i]) + sum(
            float(t(x[None])[0]) for t in scaled if i not in t.inputs))
    planar = exact_min_planar(scaled, list(pattern), x, lo, hi)
    if planar is not None:
        return base - planar
    value, _ = milp_minimum(terms, y, *free_box(x, lo, hi, pattern))
    return base - value


def exact_explanation(model: AdditiveModel, x: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                      max_component: int) -> Explanation:
    start = time.perf_counter()
    y, margin = _margin(model, x)
    calls = 0
    options = []  # per component: (size -> (least loss, pattern))
    for component in components(len(x), model.edges):
        if len(component) > max_component:
            raise UserError(f"an interaction component has {len(component)} features, more "
                            f"than max_component={max_component}: the exact algorithm is "
                            "exponential in it; use the interaction-aware algorithm")
        terms = model.terms_touching(set(component))
        best = {0: (0.0, ())}
        for size in range(1, len(component) + 1):
            for pattern in itertools.combinations(component, size):
                loss = pattern_loss(model, x, lo, hi, y, terms, pattern)
                calls += 1
                if size not in best or loss < best[size][0]:
                    best[size] = (loss, pattern)
        options.append(best)
    # knapsack: least total loss for each number of freed features
    table: dict[int, tuple[float, list[tuple[int, ...]]]] = {0: (0.0, [])}
    for best in options:
        merged: dict[int, tuple[float, list[tuple[int, ...]]]] = {}
        for freed, (loss, patterns) in table.items():
            for size, (extra, pattern) in best.items():
                total = (loss + extra, patterns + [pattern])
                if freed + size not in merged or total[0] < merged[freed + size][0]:
                    merged[freed + size] = total
        table = merged
    bound = margin - _tolerance(margin)
    freed = max(k for k, (loss, _) in table.items() if loss < bound)
    free = {i for pattern in table[freed][1] for i in pattern}
    fixed = sorted(set(range(len(x))) - free)
    return Explanation(fixed, calls, time.perf_counter() - start)


def interaction_aware_explanation(model: AdditiveModel, x: np.ndarray, lo: np.ndarray,
                                  hi: np.ndarray) -> Explanation:
    start = time.perf_counter()
    y, margin = _margin(model, x)
    charges = unary_losses(model, x, lo, hi, y)
    calls = len(x)
    for term in model.terms:
        if len(term.inputs) < 2:
            continue
        idx = list(term.inputs)
        value = exact_min_planar([_scaled(term, y)], idx, x, lo, hi)
        if value is None:
            value, _ = milp_minimum([term], y, *free_box(x, lo, hi, idx))
        calls += 1
        loss = y * float(term(x[None])[0]) - value
        for i in idx:
            charges[i] += loss
    free, queries = _free_smallest(charges, margin)
    fixed = sorted(set(range(len(x))) - set(free))
    return Explanation(fixed, calls + queries, time.perf_counter() - start)


def verix_explanation(model: AdditiveModel, x: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                      order: list[int]) -> Explanation:
    start = time.perf_counter()
    _margin(model, x)
    free: set[int] = set()
    for i in order:
        if worst_case(model, x, free | {i}, lo, hi) > 0:
            free.add(i)
    fixed = sorted(set(range(len(x))) - free)
    return Explanation(fixed, len(order), time.perf_counter() - start)


def sensitivity_order(model: AdditiveModel, x: np.ndarray, lo: np.ndarray, hi: np.ndarray
                      ) -> list[int]:
    """Features by ascending |f(x with feature i at either end of B_i) - f(x)|: the least
    influential first (VeriX traverses by a sensitivity map)."""
    change = np.zeros(len(x))
    base = float(model(x)[0])
    for i in range(len(x)):
        for end in (lo[i], hi[i]):
            z = x.copy()
            z[i] = end
            change[i] = max(change[i], abs(float(model(z)[0]) - base))
    return np.argsort(change, kind="stable").tolist()
