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
from methods.prohind.episodes import (
    EpisodeFormat,
    TextConfidencePrompt,
    run_episodes,
    text_format,
    tiny_format,
)
from methods.prohind.surprise import (
    PREDICTORS,
    WEIGHTINGS,
    episode_confidence,
    expected_confidence,
    ph_advantages,
    probe_confidence,
    stated_confidence,
    surprise,
)

__all__ = [
    "PREDICTORS", "WEIGHTINGS", "EpisodeFormat", "TextConfidencePrompt", "brier",
    "episode_confidence", "expected_calibration_error", "expected_confidence",
    "miscalibration_modes", "ph_advantages", "probe_confidence", "run_episodes",
    "stated_confidence", "success_auroc", "surprise", "text_format", "tiny_format",
    "zero_variance_group_fraction",
]
