"""Trajectory Proper Score (abstract 17): strictly proper scoring of per-step success
probabilities, its censored (stopped-prefix) version, and the metrics it is contrasted with.

Trajectories are padded arrays: ``p`` (n, T) forecasts, ``mask`` (n, T) True on observed
steps, ``y`` (n,) outcomes in {0, 1}.
"""

from methods.tps.contrast import (
    aurc,
    pooled_auprc,
    pooled_auroc,
    scalarized_brier,
    trajectory_ece,
)
from methods.tps.scores import (
    BASE_SCORES,
    WEIGHT_SCHEDULES,
    censored_reduced_score,
    expected_score,
    step_weights,
    tps,
)

__all__ = [
    "BASE_SCORES", "WEIGHT_SCHEDULES", "aurc", "censored_reduced_score", "expected_score",
    "pooled_auprc", "pooled_auroc", "scalarized_brier", "step_weights", "tps",
    "trajectory_ece",
]
