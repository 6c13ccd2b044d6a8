"""The minimum sampling budget for the optimal response to survive a beam search, measured
on a grid of (beam width B, per-beam samples N) by simulation, with a bootstrap over trials.

Budget = sampled tokens of one search (every draw counted, all steps), averaged over the
trials of the cheapest grid point whose survival rate of y* reaches ``target``. A coverage
at which no grid point reaches the target is reported as not reached (nan), never as the
grid's cap.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from methods.cfbeam.policy import TablePolicy
from methods.cfbeam.search import AdaptiveSampling, beam_search, best_of_n


@dataclass(frozen=True)
class Arm:
    """One search rule: the filter, the ranking and the sampling (fixed or adaptive). For an
    adaptive arm the grid's sample count is the per-node cap ``max_samples``."""

    name: str
    filt: str = "none"
    tau: float = 0.0
    rank: str = "global_ll"
    adaptive: AdaptiveSampling | None = None

    def search(self, policy, width: int, samples: int, steps: int, ystar, rng):
        adaptive = (None if self.adaptive is None else
                    AdaptiveSampling(samples, self.adaptive.stop_mass, self.adaptive.alpha,
                                     self.adaptive.round_size))
        return beam_search(policy, width, None if adaptive else samples, steps,
                           lambda y: float(y == ystar), rng, filt=self.filt, tau=self.tau,
                           rank=self.rank, adaptive=adaptive)


@dataclass
class GridPoint:
    width: int
    samples: int
    survived: np.ndarray  # one bool per trial run (fewer when stopped early)
    tokens: np.ndarray  # sampled tokens per trial
    complete: bool  # all trials were run (a point stopped early cannot reach the target)

    @property
    def budget(self) -> float:
        return float(self.tokens.mean())


@dataclass
class Frontier:
    points: list[GridPoint] = field(default_factory=list)

    def min_budget(self, target: float, rng: np.random.Generator | None = None) -> float:
        """Mean tokens of the cheapest point whose survival rate reaches ``target`` (nan if
        none); with ``rng``, on one bootstrap resample of every point's trials."""
        best = np.inf
        for point in self.points:
            if not point.complete:
                continue
            take = (np.arange(len(point.survived)) if rng is None
                    else rng.integers(0, len(point.survived), len(point.survived)))
            if point.survived[take].mean() >= target:
                best = min(best, float(point.tokens[take].mean()))
        return best if np.isfinite(best) else float("nan")


def run_point(policy: TablePolicy, ystar, arm: Arm, width: int, samples: int, steps: int,
              trials: int, target: float, rng: np.random.Generator) -> GridPoint:
    """Search ``trials`` times; stop as soon as the target survival rate is out of reach."""
    allowed_failures = int(np.floor((1 - target) * trials + 1e-9))
    survived, tokens = [], []
    for _ in range(trials):
        result = arm.search(policy, width, samples, steps, ystar, rng)
        survived.append(any(b.tokens == ystar for b in result.finals))
        tokens.append(result.budget.sampled_tokens)
        if len(survived) - sum(survived) > allowed_failures:
            return GridPoint(width, samples, np.array(survived), np.array(tokens), False)
    return GridPoint(width, samples, np.array(survived), np.array(tokens), True)


def survival_frontier(policy: TablePolicy, ystar, arm: Arm, widths: list[int],
                      sample_grid: list[int], steps: int, trials: int, target: float,
                      rng: np.random.Generator) -> Frontier:
    """For every width, the smallest per-beam sample count reaching ``target`` (binary
    search on ``sample_grid``: survival grows with samples at a fixed width; the count that
    suffices for a width also suffices for a wider beam, so each search starts from the
    previous answer)."""
    frontier = Frontier()
    high = len(sample_grid) - 1
    for width in widths:
        low, found = 0, None
        while low <= high:
            mid = (low + high) // 2
            point = run_point(policy, ystar, arm, width, sample_grid[mid], steps, trials,
                              target, rng)
            frontier.points.append(point)
            if point.complete and point.survived.mean() >= target:
                found, high = mid, mid - 1
            else:
                low = mid + 1
        high = found if found is not None else len(sample_grid) - 1
    return frontier


def bon_success_budget(policy: TablePolicy, ystar, steps: int, sample_grid: list[int],
                       trials: int, target: float, rng: np.random.Generator) -> float:
    """Simulated Best-of-N: sampled tokens of the smallest N on the grid whose success rate
    (y* among the N samples) reaches ``target``; nan if none does."""
    for n in sample_grid:
        wins, tokens = 0, 0
        for _ in range(trials):
            result = best_of_n(policy, n, steps, lambda y: float(y == ystar), rng)
            wins += result.best == ystar
            tokens += result.budget.sampled_tokens
        if wins / trials >= target:
            return tokens / trials
    return float("nan")
