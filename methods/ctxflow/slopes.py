"""Log-log rate fits with confidence intervals over seeds."""

from __future__ import annotations

import numpy as np
from scipy import stats


def fit_loglog_slope(n: np.ndarray, err: np.ndarray) -> float:
    """OLS slope of log(err) on log(n)."""
    return float(np.polyfit(np.log(n), np.log(err), 1)[0])


def slope_with_interval(n: np.ndarray, errs: np.ndarray, level: float = 0.95
                        ) -> tuple[float, float, float]:
    """Per-seed slopes (rows of ``errs`` are seeds) -> mean and a t-interval over seeds."""
    slopes = np.array([fit_loglog_slope(n, e) for e in errs])
    mean = float(slopes.mean())
    if len(slopes) < 2:
        return mean, mean, mean
    half = stats.t.ppf((1 + level) / 2, len(slopes) - 1) * slopes.std(ddof=1) / np.sqrt(
        len(slopes))
    return mean, mean - half, mean + half
