"""Privacy loss distributions (dp_accounting's PLD) of the components a backdoor attacks,
and their privacy profiles delta(eps) = H_{e^eps}(M(D) || M(D')) on a fixed eps grid.

Components:
- test-time Gaussian smoothing with noise sigma_x against an l2 perturbation of size radius:
  the Gaussian mechanism with sensitivity radius;
- DP-SGD against r inserted (poisoned) points: each step is a Poisson-subsampled Gaussian
  where the number of poisoned points in the batch is Binomial(r, q), i.e. a mixture of
  Gaussians with sensitivities 0..r (noise multiplier sigma, in units of the clip norm),
  self-composed over T steps;
- DPA (k models on hash partitions) against r inserted or deleted points: at most r of the k
  uniformly chosen base models change, so with probability r/k the output may change
  arbitrarily (a blatantly non-private component) and otherwise not at all; mixed with the
  smoothing component this is the joint-convexity bound r/k + (1 - r/k) delta_G(eps).
"""

from __future__ import annotations

import numpy as np
from dp_accounting.pld import common
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from scipy.special import ndtr
from scipy.stats import binom

# pessimistic discretization of the privacy loss: every profile is an upper bound, so
# certificates stay valid; 1e-3 keeps a 200-step DP-SGD composition near a second
DISCRETIZATION = 1e-3
EPS_GRID = np.concatenate([[0.0], np.geomspace(1e-4, 60.0, 3000)])


def gaussian_profile(mu: float, eps: np.ndarray | float | None = None) -> np.ndarray:
    """Exact profile of the Gaussian mechanism with mu = sensitivity / sigma:
    delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2) (0 when mu = 0), on the
    grid by default or at any ``eps``."""
    eps = EPS_GRID if eps is None else np.asarray(eps, dtype=float)
    if mu == 0:
        return np.zeros_like(eps)
    return np.clip(ndtr(-eps / mu + mu / 2) - np.exp(eps) * ndtr(-eps / mu - mu / 2), 0.0, 1.0)


def gaussian_pld(sigma: float, sensitivity: float, discretization: float = DISCRETIZATION):
    """PLD of the Gaussian mechanism (identity when the sensitivity is 0)."""
    if sensitivity == 0:
        return pld_lib.identity(value_discretization_interval=discretization)
    return pld_lib.from_gaussian_mechanism(sigma, sensitivity=sensitivity,
                                           value_discretization_interval=discretization)


def dpsgd_group_pld(noise_multiplier: float, sampling_rate: float, steps: int, group: int,
                    discretization: float = DISCRETIZATION):
    """PLD of T steps of Poisson-subsampled DP-SGD against ``group`` inserted points."""
    if group == 0:
        return pld_lib.identity(value_discretization_interval=discretization)
    sens = np.arange(group + 1, dtype=float)
    probs = binom.pmf(np.arange(group + 1), group, sampling_rate)
    step = pld_lib.from_mixture_gaussian_mechanism(noise_multiplier, list(sens), list(probs),
                                                   value_discretization_interval=discretization)
    return step.self_compose(steps)


def dpa_poisoning_pld(changed_models: int, partitions: int, smoothing=None,
                      discretization: float = DISCRETIZATION):
    """PLD of picking one of ``partitions`` models uniformly when ``changed_models`` of them
    may differ arbitrarily, optionally mixed with a smoothing PLD for the unchanged ones."""
    rest = smoothing if smoothing is not None else pld_lib.identity(
        value_discretization_interval=discretization)
    if changed_models == 0:
        return rest
    weight = min(1.0, changed_models / partitions)
    blatant = pld_lib.from_privacy_parameters(common.DifferentialPrivacyParameters(0.0, 1.0),
                                              value_discretization_interval=discretization)
    if weight == 1.0:
        return blatant
    return blatant.compute_mixture(rest, self_weight=weight)


def profile_of(pld) -> np.ndarray:
    """delta(eps) on EPS_GRID (the larger of the two neighbouring directions)."""
    return np.clip(np.asarray(pld.get_delta_for_epsilon(EPS_GRID), dtype=float), 0.0, 1.0)
