"""From a privacy profile to a certificate, and the baselines it must reduce to.

For neighbouring inputs (training set, test point) -> (poisoned set, perturbed point), let
P, P' be the smoothed classifier's output distributions and delta(eps) the profile. For any
event S (Dong, Roth and Su's tradeoff function, built from the profile):

    P'(S) >= f(P(S^c)),   f(alpha) = sup_eps max{1 - delta(eps) - e^eps alpha,
                                                 e^-eps (1 - alpha - delta(eps)), 0}.

BOTH linear pieces are needed: the second alone (the common shortcut) loses 18% of Cohen's
radius at sigma = 0.5, p_A = 0.9. The prediction A is certified against runner-up B when the
lower bound on P'(A), f(1 - p_A), exceeds the upper bound on P'(B), 1 - f(p_B). Every eps
gives a valid lower bound on f, so the sup over a finite eps grid keeps certificates valid;
when delta(eps) can be evaluated anywhere (a callable profile), the sup is refined between
grid points, which makes the profile route agree with Cohen's radius to 1e-8 (a 3001-point
grid alone is off by up to 7e-6, always on the safe side).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
from scipy.optimize import minimize_scalar
from scipy.stats import beta, norm

from methods.dpcert.accounting import EPS_GRID, gaussian_pld, profile_of

TIE_TOLERANCE = 1e-12


Profile = np.ndarray | Callable[[np.ndarray], np.ndarray]


def _pieces(a: np.ndarray, e: np.ndarray, d: np.ndarray, one_piece: bool) -> np.ndarray:
    second = np.exp(-e) * (1 - a - d)
    return second if one_piece else np.maximum(1 - d - np.exp(e) * a, second)


def tradeoff(alpha: np.ndarray | float, profile: Profile, eps: np.ndarray = EPS_GRID,
             one_piece: bool = False) -> np.ndarray:
    """f(alpha) from delta(eps): ``profile`` is delta on the ``eps`` grid, or a callable
    delta(eps) (then the sup is refined between the grid points around the best one).
    ``one_piece`` keeps only the second piece (the loose shortcut, for comparison)."""
    a = np.atleast_1d(np.asarray(alpha, dtype=float))
    exact = profile if callable(profile) else None
    grid = exact(eps) if exact is not None else profile
    values = _pieces(a[:, None], eps[None, :], grid[None, :], one_piece)
    best = values.max(axis=1)
    if exact is not None:
        at = values.argmax(axis=1)
        for i, (alpha_i, j) in enumerate(zip(a, at, strict=True)):
            low, high = eps[max(j - 1, 0)], eps[min(j + 1, len(eps) - 1)]
            found = minimize_scalar(
                lambda e, alpha_i=alpha_i: -_pieces(alpha_i, e, exact(e), one_piece),
                bounds=(low, high), method="bounded", options={"xatol": 1e-12})
            best[i] = max(best[i], -float(found.fun))
    return np.maximum(best, 0.0)


def is_certified(p_a_lower: np.ndarray, p_b_upper: np.ndarray, profile: Profile,
                 a_wins_ties: np.ndarray | bool = False) -> np.ndarray:
    """f(1 - p_A) > 1 - f(p_B) (>= when the top class wins ties, as DPA's argmax does)."""
    low_a = tradeoff(1 - np.asarray(p_a_lower, dtype=float), profile)
    up_b = 1 - tradeoff(np.asarray(p_b_upper, dtype=float), profile)
    margin = low_a - up_b
    return np.where(a_wins_ties, margin >= -TIE_TOLERANCE, margin > TIE_TOLERANCE)


def naive_certified(p_a: np.ndarray, p_b: np.ndarray, train_profile: np.ndarray,
                    test_profile: np.ndarray) -> np.ndarray:
    """The union bound of separate certificates (the baseline): each attack alone lowers
    P(A) (raises P(B)) by at most what its own tradeoff function allows; the two losses add."""
    low_a = tradeoff(1 - p_a, train_profile) + tradeoff(1 - p_a, test_profile) - p_a
    up_b = (1 - tradeoff(p_b, train_profile)) + (1 - tradeoff(p_b, test_profile)) - p_b
    return low_a - up_b > TIE_TOLERANCE


def top_two(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(class A, count A, class B, count B) per row; A = argmax, lowest index on ties."""
    a = counts.argmax(axis=1)
    rest = counts.copy()
    rest[np.arange(len(a)), a] = -1
    b = rest.argmax(axis=1)
    return a, counts[np.arange(len(a)), a], b, counts[np.arange(len(b)), b]


def clopper_pearson(successes: np.ndarray, trials: int, alpha: float
                    ) -> tuple[np.ndarray, np.ndarray]:
    """One-sided (1 - alpha) Clopper-Pearson bounds: (lower, upper) for a binomial rate."""
    k = np.asarray(successes, dtype=float)
    lower = np.where(k > 0, beta.ppf(alpha, k, trials - k + 1), 0.0)
    upper = np.where(k < trials, beta.ppf(1 - alpha, k + 1, trials - k), 1.0)
    return lower, upper


def cohen_radius(p_a: np.ndarray, sigma: float) -> np.ndarray:
    """Cohen, Rosenfeld and Kolter: R = sigma * PhiInv(p_A) (0 if p_A <= 1/2)."""
    return np.maximum(sigma * norm.ppf(np.asarray(p_a, dtype=float)), 0.0)


def dpa_vote_certificate(n_a: np.ndarray, n_b: np.ndarray, a_wins_ties: np.ndarray
                         ) -> np.ndarray:
    """Levine and Feizi: floor((n_A - n_B - tie) / 2) poisoned points, tie = 1 when the
    runner-up wins ties."""
    tie = 1 - np.asarray(a_wins_ties, dtype=int)
    return (np.asarray(n_a) - np.asarray(n_b) - tie) // 2


def radius_by_bisection(p_a: float, p_b: float, profile_at, high: float, iters: int = 50
                        ) -> float:
    """Largest l2 radius certified, by bisection on a monotone certificate (the lower end
    of the last bracket, so it is always certified); ``profile_at(radius)`` returns the
    mechanism's profile at that radius (grid values or a callable)."""
    if not is_certified(p_a, p_b, profile_at(0.0))[0]:
        return -1.0
    lo, hi = 0.0, high
    for _ in range(iters):
        mid = (lo + hi) / 2
        if is_certified(p_a, p_b, profile_at(mid))[0]:
            lo = mid
        else:
            hi = mid
    return lo


def certified_radii(p_a: np.ndarray, p_b: np.ndarray, train_pld, sigma: float, step: float
                    ) -> np.ndarray:
    """Each point's largest l2 radius on the grid 0, step, 2 step, ... that the joint
    certificate covers together with ``train_pld``'s poisoning (-1 where not even radius 0
    is); the grid stops at the first radius no point is certified at (certificates shrink
    monotonically with the radius)."""
    radius = np.full(len(p_a), -1.0)
    covered = np.ones(len(p_a), dtype=bool)
    for r in itertools.count():
        at = r * step
        covered &= is_certified(p_a, p_b, profile_of(train_pld.compose(gaussian_pld(sigma, at))))
        if not covered.any():
            return radius
        radius[covered] = at


def toward_other_class(x: np.ndarray, predicted: np.ndarray, x_train: np.ndarray,
                       y_train: np.ndarray) -> np.ndarray:
    """Per test point, the unit direction to the nearest training point of another class
    than its prediction: the shortest way across the decision boundary the data shows."""
    out = np.empty_like(x)
    for i, (point, label) in enumerate(zip(x, predicted, strict=True)):
        others = x_train[y_train != label]
        gap = others[np.argmin(np.sum((others - point) ** 2, axis=1))] - point
        out[i] = gap / max(float(np.linalg.norm(gap)), 1e-12)
    return out
