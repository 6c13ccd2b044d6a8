"""Log-log rate fits with confidence intervals: over seeds (t-interval) or by bootstrap."""

from __future__ import annotations

import numpy as np
from scipy import stats


def fit_loglog_slope(x, y) -> float:
    """OLS slope of log(y) on log(x) over the finite, positive points (nan if < 2)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    ok = np.isfinite(y) & (y > 0) & np.isfinite(x) & (x > 0)
    if ok.sum() < 2:
        return float("nan")
    return float(np.polyfit(np.log(x[ok]), np.log(y[ok]), 1)[0])


def fit_semilog_slope(x, y) -> float:
    """OLS slope of log(y) on x (a rate per unit of x: exponential growth)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    ok = np.isfinite(y) & (y > 0)
    if ok.sum() < 2:
        return float("nan")
    return float(np.polyfit(x[ok], np.log(y[ok]), 1)[0])


def slope_with_interval(x, ys, level: float = 0.95) -> tuple[float, float, float]:
    """Rows of ``ys`` are seeds: per-seed log-log slopes -> mean and a t-interval."""
    slopes = np.array([fit_loglog_slope(x, y) for y in np.atleast_2d(ys)])
    mean = float(slopes.mean())
    if len(slopes) < 2:
        return mean, mean, mean
    half = stats.t.ppf((1 + level) / 2, len(slopes) - 1) * slopes.std(ddof=1) / np.sqrt(
        len(slopes))
    return mean, mean - half, mean + half


def bootstrap_slope_interval(x, samples: list[np.ndarray], statistic, rng: np.random.Generator,
                             n_boot: int = 1000, level: float = 0.95,
                             slope=fit_loglog_slope) -> tuple[float, float, float]:
    """Slope of ``statistic(samples[i])`` against ``x[i]``, and a percentile bootstrap
    interval from resampling each point's samples with replacement."""
    point = slope(x, [statistic(s) for s in samples])
    boot = np.array([slope(x, [statistic(rng.choice(s, len(s))) for s in samples])
                     for _ in range(n_boot)])
    boot = boot[np.isfinite(boot)]
    if not boot.size:
        return point, float("nan"), float("nan")
    low, high = np.quantile(boot, [(1 - level) / 2, (1 + level) / 2])
    return point, float(low), float(high)


def min_budget_slope(coverages, frontiers, target: float, rng: np.random.Generator,
                     n_boot: int) -> tuple[float, float, float]:
    """Log-log slope of the minimum budget against the coverage C over the coverages
    reached, and a 95% bootstrap interval (trials resampled at every grid point).
    ``frontiers[i].min_budget(target, rng=None)`` is the budget at ``coverages[i]``."""
    point = fit_loglog_slope(coverages, [f.min_budget(target) for f in frontiers])
    boot = np.array([fit_loglog_slope(coverages, [f.min_budget(target, rng) for f in frontiers])
                     for _ in range(n_boot)])
    boot = boot[np.isfinite(boot)]
    low, high = np.quantile(boot, [0.025, 0.975]) if boot.size else (np.nan, np.nan)
    return point, float(low), float(high)
