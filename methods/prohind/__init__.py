"""Prospective Hindsight (abstract 12): the gap between the agent's prospective prediction
of success (before feedback) and the retrospective evaluation (after) weights the
advantages of a base method (GRPO, OPD) with a stop-gradient surprise."""

from methods.prohind.calibration import (
    brier,
    expected_calibration_error,
    miscalibration_modes,
    success_auroc,
    zero_variance_group_fraction,
)
from methods.prohind.episodes import run_episodes
from methods.prohind.surprise import (
    WEIGHTINGS,
    episode_confidence,
    ph_advantages,
    prospective_confidence,
    surprise,
)

__all__ = [
    "WEIGHTINGS", "brier", "episode_confidence", "expected_calibration_error",
    "miscalibration_modes", "ph_advantages", "prospective_confidence", "run_episodes",
    "success_auroc", "surprise",
    "zero_variance_group_fraction",
]
