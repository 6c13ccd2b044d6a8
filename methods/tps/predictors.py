"""Predictor families built from the exact success-probability trace q_t, and recalibration
maps fit on held-out trajectories."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy.optimize import minimize_scalar
from scipy.special import expit, logit
from sklearn.isotonic import IsotonicRegression
from sklearn.linear_model import LogisticRegression

CLIP = 1e-6


def _logit(p: np.ndarray) -> np.ndarray:
    return logit(np.clip(p, CLIP, 1 - CLIP))


def predictor_families(q: np.ndarray, mask: np.ndarray, base_rate: float, tau: float,
                       noise: float, rng: np.random.Generator, wiggle: float = 0.1
                       ) -> dict[str, np.ndarray]:
    """Forecast traces (n, T) for each family.

    - ``oracle``: q_t itself; ``tempered``: sigmoid(tau logit q_t) (over/under-confident);
    - ``noisy``: sigmoid(logit q_t + noise * eps_t); ``lagged``: q_{t-1} (one step late);
    - ``constant``: the base rate at every step (calibrated, no resolution);
    - ``final_only``: the base rate, except q at the last observed step;
    - ``mean_matched``: p_0 = q_0 + wiggle, p_1 = q_1 - wiggle, p_t = q_t after. Predictable,
      and its trajectory mean equals the oracle's, so the scalarized Brier score cannot tell them
      apart, while TPS charges it wiggle^2 per perturbed step in expectation.
    """
    lengths = mask.sum(axis=1)
    t = np.arange(q.shape[1])
    last = t[None, :] == (lengths - 1)[:, None]
    lagged = np.concatenate([q[:, :1], q[:, :-1]], axis=1)
    if np.any(lengths < 2):
        raise ValueError("mean_matched needs trajectories of at least two steps")
    shift = np.zeros_like(q)
    shift[:, 0], shift[:, 1] = wiggle, -wiggle
    constant = np.full_like(q, base_rate)
    families = {
        "oracle": q,
        "tempered": expit(tau * _logit(q)),
        "noisy": expit(_logit(q) + noise * rng.standard_normal(q.shape)),
        "lagged": lagged,
        "constant": constant,
        "final_only": np.where(last, q, constant),
        "mean_matched": q + shift,
    }
    return {k: np.where(mask, v, 0.5) for k, v in families.items()}


def fit_recalibration(kind: str, p: np.ndarray, y: np.ndarray
                      ) -> Callable[[np.ndarray], np.ndarray]:
    """Fit a recalibration map on pooled held-out steps (forecast p, outcome y).

    ``temperature``: sigmoid(logit p / T), T by log loss; ``platt``: sigmoid(a logit p + b)
    (logistic regression); ``isotonic``: monotone step function (scikit-learn). The first
    two are strictly increasing (when T > 0, a > 0) and so leave rank metrics unchanged.
    """
    z = _logit(p)
    if kind == "temperature":
        def nll(log_t):
            pt = np.clip(expit(z / np.exp(log_t)), 1e-12, 1 - 1e-12)
            return -np.mean(y * np.log(pt) + (1 - y) * np.log1p(-pt))

        temp = float(np.exp(minimize_scalar(nll, bounds=(-5, 5), method="bounded").x))
        return lambda x: expit(_logit(x) / temp)
    if kind == "platt":
        model = LogisticRegression(C=1e6).fit(z[:, None], y)
        a, b = float(model.coef_[0, 0]), float(model.intercept_[0])
        return lambda x: expit(a * _logit(x) + b)
    if kind == "isotonic":
        iso = IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip").fit(p, y)
        return lambda x: iso.predict(x.ravel()).reshape(x.shape)
    raise ValueError(f"unknown recalibration '{kind}'; known: temperature, platt, isotonic")


def paired_bootstrap_ci(diff: np.ndarray, n_boot: int, rng: np.random.Generator,
                        level: float = 0.95) -> tuple[float, float]:
    """Percentile interval of the mean of per-trajectory paired differences."""
    idx = rng.integers(0, len(diff), size=(n_boot, len(diff)))
    means = diff[idx].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)
