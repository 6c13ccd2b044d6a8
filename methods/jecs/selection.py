"""Conformal p-values, BH / Storey-BH, the max-p aggregate and the JECS envelope.

Orientation: selecting an item declares it clean, so for model k the null H_j^k is "item j
is contaminated for model k". Calibration scores come from known members of model k; a
membership score LOWER than the members' is evidence of cleanliness, so
p_j^k = (1 + #{i : S_i^k <= S_j^k}) / (n + 1). The item null "contaminated for at least one
model" is the union of the H_j^k, for which p_j = max_k p_j^k is valid
(intersection-union). GCR = E[#selected contaminated-for-some-model / max(1, #selected)].
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import nnls
from scipy.stats import kstest


def conformal_pvalues(calibration: np.ndarray, test: np.ndarray, randomized: bool = False,
                      rng: np.random.Generator | None = None) -> np.ndarray:
    """Conformal p-values of ``test`` scores against null ``calibration`` scores (low = evidence).

    Conservative: (1 + #{cal <= test}) / (n + 1), super-uniform under exchangeability.
    Randomized tie-breaking: (#{cal < test} + U (1 + #{cal == test})) / (n + 1), exactly
    uniform for a null test score.
    """
    cal = np.sort(np.asarray(calibration, dtype=float))
    n = len(cal)
    le = np.searchsorted(cal, test, side="right")
    if not randomized:
        return (1.0 + le) / (n + 1)
    lt = np.searchsorted(cal, test, side="left")
    u = (rng or np.random.default_rng()).random(np.shape(test))
    return (lt + u * (1.0 + le - lt)) / (n + 1)


def max_p(pvalues: np.ndarray) -> np.ndarray:
    """Per-item maximum over models (rows: items, columns: models)."""
    return np.max(pvalues, axis=1)


def benjamini_hochberg(p: np.ndarray, alpha: float) -> np.ndarray:
    """Boolean mask of BH rejections at level alpha (step-up on sorted p-values)."""
    p = np.asarray(p, dtype=float)
    m = len(p)
    order = np.argsort(p, kind="stable")
    below = p[order] <= alpha * np.arange(1, m + 1) / m
    selected = np.zeros(m, dtype=bool)
    if below.any():
        selected[order[: np.nonzero(below)[0][-1] + 1]] = True
    return selected


def storey_pi0(p: np.ndarray, lam: float = 0.5) -> float:
    """Storey's null-proportion estimate with the +1 correction (finite-sample valid):
    (1 + #{p > lam}) / (m (1 - lam)), capped at 1."""
    return float(min(1.0, (1.0 + np.sum(p > lam)) / (len(p) * (1 - lam))))


def storey_bh(p: np.ndarray, alpha: float, lam: float = 0.5) -> np.ndarray:
    """Adaptive BH: BH at level alpha / pi0_hat (Storey, Taylor and Siegmund, 2004)."""
    return benjamini_hochberg(p, alpha / storey_pi0(p, lam))


@dataclass(frozen=True)
class Envelope:
    """F_hat(t) = sum_r weights[r-1] t^r (``family`` "polynomial" / "identity"), or t^kappa."""

    family: str
    weights: tuple[float, ...] = (1.0,)
    kappa: float = 1.0
    threshold: float = 0.5

    def __call__(self, p: np.ndarray) -> np.ndarray:
        if self.family == "power":
            return p**self.kappa
        powers = np.arange(1, len(self.weights) + 1)
        return np.sum(np.array(self.weights)[None, :] * p[:, None] ** powers[None, :], axis=1)


def tail_threshold(p: np.ndarray, rule: str = "median", low: float = 0.5,
                   high: float = 0.9) -> float:
    """The right-tail threshold tau: ``fixed`` = ``low``; ``median`` = the median max-p
    clipped to [low, high] (data-driven: a larger tau leaves fewer clean items in the tail)."""
    if rule == "fixed":
        return low
    if rule == "median":
        return float(np.clip(np.median(p), low, high))
    raise ValueError(f"unknown threshold rule '{rule}'; known: fixed, median")


def fit_envelope(p: np.ndarray, n_models: int, family: str = "polynomial",
                 threshold: float = 0.5, n_boot: int = 200, level: float = 0.95,
                 rng: np.random.Generator | None = None) -> Envelope:
    """Fit a conservative envelope F_hat >= F0 of the null law of max-p from its right tail.

    RECON (the paper's family and threshold rule are not public; both are options here):
    an item contaminated for exactly r models has max-p law F_r(t) <= t^r (the max of r
    super-uniform p-values), so the null law is dominated by a mixture
    F0(t) <= sum_{r=1..K} w_r t^r. Above the threshold tau almost every item is null (clean
    items have small max-p), so the tail counts #{p > t} ~ sum_r c_r (1 - t^r), t > tau, are
    fitted by non-negative least squares. Conservativeness: w_1, the weight that dominates
    F0 near 0 where selection happens, is raised to its ``level`` bootstrap upper bound, and
    clean items left in the tail only push w_1 up (they look flat there).

    ``family``: "polynomial" (default); "power" (t^kappa with kappa at its bootstrap lower
    bound, >= 1); "identity" (F(t) = t: JECS reduces to max-p + Storey-BH).
    """
    rng = rng or np.random.default_rng(0)
    if family == "identity":
        return Envelope("identity", threshold=threshold)
    grid = np.linspace(threshold, 1.0, 26)[:-1]
    if family == "polynomial":
        design = 1.0 - grid[:, None] ** np.arange(1, n_models + 1)[None, :]

        def weights_of(sample: np.ndarray) -> np.ndarray:
            counts = (sample[None, :] > grid[:, None]).sum(axis=1).astype(float)
            c, _ = nnls(design, counts)
            return c / c.sum() if c.sum() > 0 else np.eye(n_models)[0]

        w = weights_of(p)
        boot_w1 = [weights_of(rng.choice(p, len(p)))[0] for _ in range(n_boot)]
        w1 = max(w[0], float(np.quantile(boot_w1, level)))
        rest = w[1:] * (1 - w1) / w[1:].sum() if w[1:].sum() > 0 else np.zeros(n_models - 1)
        return Envelope("polynomial", tuple(np.concatenate([[w1], rest])), threshold=threshold)
    if family == "power":
        kappas = np.linspace(1.0, float(n_models), 61)
        shape = (1 - grid[None, :] ** kappas[:, None]) / (1 - threshold ** kappas[:, None])

        def kappa_of(sample: np.ndarray) -> float:
            tail = sample[sample > threshold]
            if len(tail) < 10:
                return 1.0
            surv = (tail[None, :] > grid[:, None]).mean(axis=1)
            return float(kappas[np.argmin(np.sum((shape - surv) ** 2, axis=1))])

        boot = [kappa_of(rng.choice(p, len(p))) for _ in range(n_boot)]
        return Envelope("power", kappa=max(1.0, float(np.quantile(boot, 1 - level))),
                        threshold=threshold)
    raise ValueError(f"unknown envelope family '{family}'; known: polynomial, power, identity")


def right_tail_uniformity(pvalues: np.ndarray, threshold: float) -> float:
    """Bonferroni-combined p-value of "every model's p-values above ``threshold`` are
    uniform" (Kolmogorov-Smirnov per model, on the tail rescaled to (0, 1]).

    The envelope fit reads the null law from the right tail of max-p, which is sound only
    when clean items stay out of that tail: then the p-values above the threshold are those
    of contaminated items, uniform for each model. Clean scores with heavy tails (Cauchy
    non-member scores against Gaussian members) put clean items' p-values there too, piled
    up near 1; this test sees it."""
    combined = 1.0
    for column in pvalues.T:
        tail = column[column > threshold]
        if len(tail) >= 20:
            u = (tail - threshold) / (1 - threshold)
            combined = min(combined, kstest(u, "uniform").pvalue * pvalues.shape[1])
    return float(min(combined, 1.0))


class JECS:
    """JECS on one audit: max-p per item -> the envelope F_hat, fitted once from the right
    tail -> Storey-adaptive BH on F_hat(p) at any level ``alpha`` (``select``). Selected =
    declared clean for every model.

    Validity guard: max-p alone is valid whatever the score distributions (a null item has
    at least one super-uniform p-value, so F0(t) <= t); the fitted envelope needs the right
    tail to hold only contaminated items. When ``right_tail_uniformity`` rejects that at
    ``tail_check_level``, the envelope falls back to the identity (max-p + Storey-BH) and
    ``fallback`` is set."""

    def __init__(self, pvalues: np.ndarray, family: str = "polynomial",
                 threshold_rule: str = "median", lam: float = 0.5, n_boot: int = 200,
                 rng: np.random.Generator | None = None, tail_check_level: float = 0.001
                 ) -> None:
        self.p = max_p(pvalues)
        self.lam = lam
        threshold = tail_threshold(self.p, threshold_rule)
        self.tail_check = right_tail_uniformity(pvalues, threshold)
        self.fallback = family != "identity" and self.tail_check < tail_check_level
        self.envelope = fit_envelope(self.p, pvalues.shape[1],
                                     "identity" if self.fallback else family, threshold,
                                     n_boot, rng=rng)
        self.rescaled = self.envelope(self.p)

    def select(self, alpha: float) -> np.ndarray:
        return storey_bh(self.rescaled, alpha, self.lam)
