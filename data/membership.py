"""Synthetic membership-inference scores for K audited models (benchmark contamination).

Item j is a member (contaminated) for model k with probability rate_k; its membership score
for model k is ``shift`` * member + noise, noise correlated across models with coefficient
``rho`` through a shared per-item effect. Calibration scores: ``n_calibration`` known
members per model (drawn from the member score law, as for known training documents).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class MembershipScores:
    scores: np.ndarray  # (m, K) test items
    contaminated: np.ndarray  # (m, K) bool, ground truth
    calibration: list[np.ndarray]  # K arrays of known-member scores


def model_rates(n_models: int, low: float, high: float) -> np.ndarray:
    """Per-model contamination rates, evenly spaced in [low, high] (0.15/0.25/0.35 for K=3)."""
    return np.linspace(low, high, n_models) if n_models > 1 else np.array([(low + high) / 2])


TAILS = ("gaussian", "cauchy", "student_t", "uniform", "mixed")


def score_noise(tail: str, model: int, size, rng: np.random.Generator) -> np.ndarray:
    """Noise of membership scores: ``gaussian``; heavy-tailed ``cauchy`` or ``student_t``
    (Student t, 1.5 degrees of freedom); light-tailed ``uniform`` (unit variance);
    ``mixed``: Cauchy for even-numbered models, Gaussian for odd ones."""
    if tail == "mixed":
        tail = "cauchy" if model % 2 == 0 else "gaussian"
    if tail == "gaussian":
        return rng.standard_normal(size)
    if tail == "cauchy":
        return rng.standard_cauchy(size)
    if tail == "student_t":
        return rng.standard_t(1.5, size)
    if tail == "uniform":
        return rng.uniform(-np.sqrt(3), np.sqrt(3), size)
    raise ValueError(f"unknown score tail '{tail}'; known: {', '.join(TAILS)}")


def synthetic_membership(n_items: int, n_models: int, rate_low: float, rate_high: float,
                         design: str, shift: float, rho: float, n_calibration: int,
                         rng: np.random.Generator, clean_tail: str = "gaussian",
                         member_tail: str = "gaussian") -> MembershipScores:
    """``design``: ``independent`` (membership independent across models) or
    ``one_model`` (the hardest case for max-p: each contaminated item is contaminated for
    exactly one model; the overall contaminated fraction matches ``independent``).
    Gaussian scores are correlated across models by ``rho`` through a shared per-item
    effect. Clean scores: ``score_noise(clean_tail)``; member scores and the known members
    used for calibration: ``shift`` + ``score_noise(member_tail)``."""
    rates = model_rates(n_models, rate_low, rate_high)
    if design == "independent":
        contaminated = rng.random((n_items, n_models)) < rates
    elif design == "one_model":
        p_any = 1 - np.prod(1 - rates)
        hit = rng.random(n_items) < p_any
        which = rng.choice(n_models, size=n_items, p=rates / rates.sum())
        contaminated = np.zeros((n_items, n_models), dtype=bool)
        contaminated[np.nonzero(hit)[0], which[hit]] = True
    else:
        raise ValueError(f"unknown contamination design '{design}'")
    shared = rng.standard_normal((n_items, 1))
    noise = np.sqrt(rho) * shared + np.sqrt(1 - rho) * rng.standard_normal((n_items, n_models))
    for tail, rows in ((clean_tail, ~contaminated), (member_tail, contaminated)):
        if tail != "gaussian":
            for k in range(n_models):
                noise[rows[:, k], k] = score_noise(tail, k, int(rows[:, k].sum()), rng)
    scores = shift * contaminated + noise
    calibration = [shift + score_noise(member_tail, k, n_calibration, rng)
                   for k in range(n_models)]
    return MembershipScores(scores, contaminated, calibration)


def contaminated_lm_benchmark(n_items: int, length: int, vocab: int, n_models: int,
                              rate_low: float, rate_high: float, rng: np.random.Generator):
    """A synthetic benchmark of random token strings (memorization is the only way to fit
    them), split into a public half, seen by every model, and an audited half; model k also
    trains on its own contaminated subset of the audited half (rates evenly spaced in
    [rate_low, rate_high]). Returns (items (n, length), public mask, contaminated (m, K))."""
    items = rng.integers(0, vocab, size=(n_items, length))
    public = np.zeros(n_items, dtype=bool)
    public[rng.permutation(n_items)[: n_items // 2]] = True
    audited = np.nonzero(~public)[0]
    rates = model_rates(n_models, rate_low, rate_high)
    contaminated = rng.random((len(audited), n_models)) < rates
    return items, public, contaminated
