"""How many seeds a claim needs, from its own rule simulated at measured per-seed values.

One estimator serves the preregistration's seed counts (``make preregister``) and the
report's "a new study declaring N seeds would decide it with 80% probability": every metric
the claim reads (its condition's and its measured margin's) is drawn, for n seeds, from a
normal distribution with the mean vector and the covariance the measured seeds show; each
draw is judged by the claim's own rule (:func:`experiments.claims.verdicts.judge`: a
conjunction with all its parts and their correlation, an equivalence with both sides and
its margin varying with the seed as it did); the power at n is the share of draws the rule
decides, holds or contradicted (at the measured values, in the direction they point: a
claim the pilot points against needs seeds to be shown contradicted as much as one it
supports needs them to be shown to hold; under a null effect neither comes, at any count).
The count is the smallest n with at least :data:`POWER`, found by doubling and then
bisecting over n (each n on its own named stream, so the answer is the same on every
machine), and the power simulated there is recorded beside it.

Counted rules (``exact``, ``exists``) are not sized: their verdict is a count of seeds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from common.streams import Streams
from experiments.claims.decide import claim_metrics, rule_of, usable_number
from experiments.claims.verdicts import CONTRADICTED, HOLDS, judge

POWER = 0.80
REPLICATES = 400  # Monte Carlo standard error of a power near 0.8: 0.02
MAX_SEEDS = 100  # the report says "more than 100" beyond it


@dataclass(frozen=True)
class Sizing:
    """A claim's seed count for :data:`POWER`: ``seeds`` (None where no count up to the
    limit gives it, or the claim cannot be sized), the power simulated at ``seeds`` (at the
    limit where none gives it) and why, in words."""

    seeds: int | None
    power: float | None
    why: str


def _draws(values: np.ndarray, seeds: int, stream: str) -> np.ndarray:
    """(REPLICATES, seeds, metrics) normal draws with the measured seeds' mean vector and
    covariance."""
    mean = values.mean(axis=0)
    cov = np.atleast_2d(np.cov(values, rowvar=False, ddof=1))
    eigenvalues, vectors = np.linalg.eigh(cov)
    factor = vectors * np.sqrt(np.clip(eigenvalues, 0.0, None))
    rng = Streams(0, fixed=True).numpy(stream)
    z = rng.standard_normal((REPLICATES, seeds, len(mean)))
    return mean + z @ factor.T


def _simulated_power(claim: Mapping, names: Sequence[str], values: np.ndarray,
                     seeds: int) -> float:
    """P(decided: holds or contradicted) of the claim's rule at ``seeds`` seeds drawn like
    ``values`` (seeds x metrics, in the order of ``names``)."""
    stream = f"power/{claim.get('id', claim['holds_if'])}/{seeds}"
    decided = 0
    for draw in _draws(values, seeds, stream):
        runs = [dict(zip(names, map(float, row), strict=True)) for row in draw]
        decided += judge(claim, runs).verdict in (HOLDS, CONTRADICTED)
    return decided / REPLICATES


def _measured(claim: Mapping, runs: Sequence[Mapping[str, float]]
              ) -> tuple[list[str], np.ndarray] | None:
    """The metrics the claim reads and their values (seeds x metrics); None with fewer
    than two seeds or a value that is not a finite number."""
    names = sorted(claim_metrics(claim))
    if len(runs) < 2 or not all(usable_number(r.get(n)) for r in runs for n in names):
        return None
    return names, np.array([[float(r[n]) for n in names] for r in runs])


def power_at(claim: Mapping, runs: Sequence[Mapping[str, float]], seeds: int) -> float | None:
    """The simulated power of the claim's rule at ``seeds`` seeds like ``runs`` (None where
    they cannot be simulated)."""
    measured = _measured(claim, runs)
    return None if measured is None else _simulated_power(claim, *measured, seeds)


def seeds_for_power(claim: Mapping, runs: Sequence[Mapping[str, float]],
                    limit: int = MAX_SEEDS, target: float = POWER) -> Sizing:
    """The smallest seed count in [2, ``limit``] at which the claim's rule decides (holds
    or contradicted) with probability ``target``, simulated at the per-seed metrics of
    ``runs``."""
    rule = rule_of(claim)
    if claim.get("holds_if") is None or rule in ("exact", "exists"):
        return Sizing(None, None, f"{rule}: a count of seeds, not sized by power")
    measured = _measured(claim, runs)
    if measured is None:
        return Sizing(None, None, "fewer than two seeds with every metric it reads")
    names, values = measured
    if np.ptp(values, axis=0).max() == 0 and not claim.get("deterministic") and \
            claim.get("test") != "sign":  # a sign test decides on constant values too
        return Sizing(None, 0.0, "the same values at every seed: more seeds cannot decide it")
    power: dict[int, float] = {}

    def at(seeds: int) -> float:
        if seeds not in power:
            power[seeds] = _simulated_power(claim, names, values, seeds)
        return power[seeds]

    if at(limit) < target:
        return Sizing(None, power[limit], f"no count up to {limit} seeds gives "
                      f"{target:.0%} power (simulated: {power[limit]:.0%} at {limit})")
    low, high = 1, 2
    while at(high) < target:
        low, high = high, min(2 * high, limit)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if at(middle) >= target else (middle, high)
    return Sizing(high, power[high], f"{power[high]:.0%} power at {high} seeds (simulated)")
