"""TPS = sum_t w_t S(p_t, Y): a prequential sum of strictly proper scores (losses, lower is
better) with predictable weights w_t, and its censored reduced version."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

EPS = 1e-12


def brier(p: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Brier loss (p - y)^2."""
    return (p - y) ** 2


def log_loss(p: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Log loss -[y log p + (1 - y) log(1 - p)], p clipped to [1e-12, 1 - 1e-12]."""
    p = np.clip(p, EPS, 1 - EPS)
    return -(y * np.log(p) + (1 - y) * np.log1p(-p))


def spherical(p: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spherical loss 1 - p_y / ||(p, 1 - p)||_2 (the spherical score, negated and shifted)."""
    p_y = np.where(y == 1, p, 1 - p)
    return 1 - p_y / np.sqrt(p**2 + (1 - p) ** 2)


BASE_SCORES: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "brier": brier, "log": log_loss, "spherical": spherical,
}


def expected_score(score: str, p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """E_{Y ~ Bernoulli(q)} S(p, Y) = q S(p, 1) + (1 - q) S(p, 0)."""
    fn = BASE_SCORES[score]
    return q * fn(p, np.ones_like(p)) + (1 - q) * fn(p, np.zeros_like(p))


def step_weights(schedule: str, mask: np.ndarray, gamma: float = 0.9) -> np.ndarray:
    """Weights w_t per step (n, T); zero on unobserved steps.

    - ``uniform``: 1 / T_max on every step (predictable: depends on t only);
    - ``geometric``: (1 - gamma) gamma^t, early steps weigh more (predictable);
    - ``per_trajectory``: 1 / T_i, every trajectory weighs the same in total. T_i is known
      only at the end, so this weight is not predictable; for trajectories whose length is
      a stopping time it can break strict propriety (kept because it is in common use);
    - ``last``: weight 1 on the final observed step only: the scalarized final-forecast score.
    """
    n, horizon = mask.shape
    t = np.broadcast_to(np.arange(horizon), (n, horizon))
    lengths = mask.sum(axis=1, keepdims=True)
    if schedule == "uniform":
        w = np.full((n, horizon), 1.0 / horizon)
    elif schedule == "geometric":
        w = (1 - gamma) * gamma**t
    elif schedule == "per_trajectory":
        w = np.broadcast_to(1.0 / np.maximum(lengths, 1), (n, horizon)).copy()
    elif schedule == "last":
        w = (t == lengths - 1).astype(float)
    else:
        raise ValueError(f"unknown weight schedule '{schedule}'; known: {WEIGHT_SCHEDULES}")
    return np.where(mask, w, 0.0)


WEIGHT_SCHEDULES = ("uniform", "geometric", "per_trajectory", "last")
# Predictable weights that are positive on every step: the schedules TPS's strict propriety
# covers. per_trajectory is positive on every step but not predictable.
PREDICTABLE_EVERY_STEP = ("uniform", "geometric")


def tps(p: np.ndarray, y: np.ndarray, mask: np.ndarray, score: str = "brier",
        schedule: str = "uniform", gamma: float = 0.9) -> np.ndarray:
    """Per-trajectory TPS_i = sum_t w_t S(p_t, y_i) (complete observation), shape (n,)."""
    loss = BASE_SCORES[score](np.where(mask, p, 0.5), y[:, None].astype(float))
    return np.sum(step_weights(schedule, mask, gamma) * loss, axis=1)


def censored_reduced_score(p: np.ndarray, q_stop: np.ndarray, mask: np.ndarray,
                           score: str = "brier", schedule: str = "uniform",
                           gamma: float = 0.9) -> np.ndarray:
    """The complete-data score projected on the stopped prefix H_Z (administrative censoring):

        E[sum_{t <= Z} w_t S(p_t, Y) | H_Z]
            = sum_{t <= Z} w_t [q_Z S(p_t, 1) + (1 - q_Z) S(p_t, 0)].

    ``mask`` marks the observed prefix t <= Z. With the true q_Z (``q_stop``) this is exact;
    passing the predictor's own p_Z instead is the tractable approximation, which is not
    proper (a predictor can improve it by being confident about itself).
    """
    w = step_weights(schedule, mask, gamma)
    exp_loss = expected_score(score, np.where(mask, p, 0.5),
                              np.broadcast_to(q_stop[:, None], p.shape))
    return np.sum(w * exp_loss, axis=1)
