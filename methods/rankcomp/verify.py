"""Re-verification of a reported pairwise impossibility from the profile the run saved
(``tables/pairwise_impossibility.csv``): an integer program, independent of the run's
exhaustive search over multisets, asks for k output rankings whose pair counts meet every
pairwise-proportionality bound; the instance counts only when there are none."""

from __future__ import annotations

import csv
import itertools
from collections.abc import Mapping
from pathlib import Path

import numpy as np


def no_pairwise_output(profile: np.ndarray, k: int) -> bool:
    """Whether no multiset of k rankings meets floor(k N_ab / n) <= count_ab <= ceil(...)
    for every ordered pair (a, b) (scipy's MILP over the count of each ranking)."""
    from scipy.optimize import Bounds, LinearConstraint, milp

    n, m = profile.shape
    rankings = list(itertools.permutations(range(m)))
    pairs = [(a, b) for a in range(m) for b in range(m) if a != b]

    def above(ranking, a, b) -> bool:
        return ranking.index(a) < ranking.index(b)

    voters = [tuple(int(c) for c in row) for row in profile]
    counts = np.array([sum(above(v, a, b) for v in voters) for a, b in pairs])
    rows = np.array([[above(r, a, b) for r in rankings] for a, b in pairs], float)
    matrix = np.vstack([np.ones(len(rankings)), rows])
    low = np.concatenate([[k], (k * counts) // n])
    high = np.concatenate([[k], -(-(k * counts) // n)])
    result = milp(np.zeros(len(rankings)), constraints=LinearConstraint(matrix, low, high),
                  integrality=np.ones(len(rankings)), bounds=Bounds(0, k))
    return result.status == 2  # infeasible


def pairwise_impossibility(run: Mapping) -> bool:
    """The run's saved profile admits no pairwise-proportional output of its k rankings."""
    path = Path(run["folder"]) / "tables" / "pairwise_impossibility.csv"
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    profile = np.array([[int(c) for c in r["ranking"].split(" > ")] for r in rows])
    return no_pairwise_output(profile, int(rows[0]["k"]))
