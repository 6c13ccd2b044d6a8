"""Calibration of prospective predictions p against outcomes y in {0, 1}."""

from __future__ import annotations

import numpy as np
from sklearn.metrics import roc_auc_score


def expected_calibration_error(p: np.ndarray, y: np.ndarray, bins: int = 10) -> float:
    """sum over equal-width bins of (bin size / n) |mean y - mean p| (p = 1 in the last)."""
    p, y = np.asarray(p, dtype=float), np.asarray(y, dtype=float)
    index = np.minimum((p * bins).astype(int), bins - 1)
    total = 0.0
    for b in range(bins):
        inside = index == b
        if inside.any():
            total += inside.mean() * abs(y[inside].mean() - p[inside].mean())
    return float(total)


def brier(p: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean((np.asarray(p, dtype=float) - np.asarray(y, dtype=float)) ** 2))


def success_auroc(p: np.ndarray, y: np.ndarray) -> float:
    """AUROC of p for success (nan when all outcomes agree)."""
    y = np.asarray(y)
    return float(roc_auc_score(y, p)) if 0 < y.mean() < 1 else float("nan")


def miscalibration_modes(p: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(overconfident-failure rate P(p >= 0.5, y = 0), underconfident-success rate
    P(p < 0.5, y = 1)); their sum is the error rate of thresholding p at 0.5."""
    p, y = np.asarray(p, dtype=float), np.asarray(y)
    return float(np.mean((p >= 0.5) & (y == 0))), float(np.mean((p < 0.5) & (y == 1)))


def zero_variance_group_fraction(rewards: np.ndarray, group_size: int) -> float:
    """Fraction of groups whose rewards all tie (GRPO advantage 0)."""
    groups = np.asarray(rewards, dtype=float).reshape(-1, group_size)
    return float(np.mean(groups.std(axis=1) == 0))
