"""Best-of-N selection among a condition's samples (the paper's use of the self-score).

A pool is one condition's N samples with their physics errors and per-sample scores (lower
is better). ``best_of_n_error`` picks, among the first ``m`` samples of each pool, the one a
score ranks best and averages the picked samples' physics error over pools.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def best_of_n_error(errors: Sequence[np.ndarray], scores: Sequence[np.ndarray], m: int
                    ) -> float:
    """Mean physics error of the argmin-score sample among the first ``m`` of each pool."""
    return float(np.mean([err[int(np.argmin(score[:m]))]
                          for err, score in zip(errors, scores, strict=True)]))


def best_of_n_curves(errors: Sequence[np.ndarray], scorers: dict[str, Sequence[np.ndarray]],
                     ns: Sequence[int]) -> dict[str, list[float]]:
    """For each scorer and each N in ``ns``: the best-of-N physics error over the mean
    error of single samples; ``random`` is the mean of the first N (no selection)."""
    single = float(np.mean([e.mean() for e in errors]))
    curves = {name: [best_of_n_error(errors, scores, m) / single for m in ns]
              for name, scores in scorers.items()}
    curves["random"] = [float(np.mean([e[:m].mean() for e in errors])) / single for m in ns]
    return curves
