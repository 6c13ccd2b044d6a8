"""The metrics TPS is contrasted with, on steps pooled over trajectories (each step's forecast
is scored against its trajectory's outcome)."""

from __future__ import annotations

import numpy as np
from sklearn.metrics import average_precision_score, roc_auc_score


def _pooled(p: np.ndarray, y: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return p[mask], np.broadcast_to(y[:, None], p.shape)[mask]


def pooled_auroc(p, y, mask) -> float:
    """AUROC of step forecasts vs outcomes (scikit-learn). Rank-only: invariant to any
    strictly increasing recalibration."""
    return float(roc_auc_score(*_pooled(p, y, mask)[::-1]))


def pooled_auprc(p, y, mask) -> float:
    """Average precision of step forecasts (scikit-learn)."""
    return float(average_precision_score(*_pooled(p, y, mask)[::-1]))


def aurc(p, y, mask) -> float:
    """Area under the risk-coverage curve: steps sorted by confidence max(p, 1 - p); risk is
    the error rate of the thresholded prediction 1{p > 1/2} among the covered steps."""
    ps, ys = _pooled(p, y, mask)
    order = np.argsort(-np.maximum(ps, 1 - ps), kind="stable")
    errors = ((ps[order] > 0.5) != (ys[order] == 1)).astype(float)
    return float(np.mean(np.cumsum(errors) / np.arange(1, len(errors) + 1)))


def trajectory_ece(p, y, mask, n_bins: int = 10) -> float:
    """Trajectory ECE: steps pooled, 10 equal-width bins on [0, 1],
    sum_b (n_b / N) |mean p_b - mean y_b|. Blind to resolution: a constant base-rate
    forecast has ECE ~ 0."""
    ps, ys = _pooled(p, y, mask)
    bins = np.minimum((ps * n_bins).astype(int), n_bins - 1)
    total = 0.0
    for b in np.unique(bins):
        sel = bins == b
        total += sel.sum() * abs(ps[sel].mean() - ys[sel].mean())
    return float(total / len(ps))


def scalarized_brier(p, y, mask) -> float:
    """Scalarized trajectory Brier: (mean_t p_t - Y)^2, averaged over trajectories. It elicits
    only the collapsed scalar mean_t p_t, not the trace."""
    mean_p = np.sum(np.where(mask, p, 0), axis=1) / mask.sum(axis=1)
    return float(np.mean((mean_p - y) ** 2))
