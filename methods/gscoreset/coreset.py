"""Weighted coresets of Gaussians at a prescribed resolution, and the pruning baselines.

The objective is additive over Gaussians on every prescribed ray r: F(r) = sum_i tau_i(r),
tau_i(r) = -log(1 - alpha_i(r)) (= -log T(r) without the early stop). A weighted subset
(S, w) estimates it by F_hat(r) = sum_{i in S} w_i tau_i(r), which the renderer realises as
alpha_hat = 1 - (1 - alpha)^w.

Sensitivities (RECON: the paper's exact choice is not public; ``kind`` selects):
  max: s_i = max_r tau_i(r) / (F(r) + eta)   (the coreset-theory quantity; sum_i <= |R|)
  sum: s_i = sum_r tau_i(r) / (F(r) + eta)   (average share)
  mix: half of each, each normalised to sum 1
  and ``uniform_mix`` in [0, 1) mixes in 1/N (lightweight coresets).
Sampling: Poisson (keep i with pi_i = min(1, c s_i), c by bisection so that sum pi = budget,
weight 1/pi_i) or multinomial (m i.i.d. draws with p = s/S, weight count_i / (m p_i)); both
give unbiased F_hat. Sample size for an (eps, eta) guarantee on a finite ray set R with
probability 1 - delta (Bernstein + union bound): m >= 3 S ln(2 |R| / delta) / eps^2.

Baselines (top-k, unweighted): opacity; LightGaussian global significance
(sum of opacity over composited hits, or x T, times (volume / 90th-percentile volume)^0.1);
Mini-Splatting blending weight sum alpha T (also as unweighted sampling probabilities);
PUP-3DGS log det of the 6x6 Fisher of (xyz, log-scale) from patch-sum gradients; uniform.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from common.errors import UserError
from methods.gscoreset.rasterizer import (
    Camera,
    Gaussians,
    blending_statistics,
    optical_depth,
    render,
)

SENSITIVITY_KINDS = ("max", "sum", "mix")


@dataclass
class Coreset:
    index: torch.Tensor  # kept Gaussians
    weights: torch.Tensor  # one per kept Gaussian

    def __len__(self) -> int:
        return int(self.index.numel())

    def full_weights(self, n: int) -> torch.Tensor:
        """Weights over all N Gaussians (0 = dropped)."""
        out = torch.zeros(n)
        out[self.index] = self.weights
        return out


class RayObjective:
    """The per-ray optical depths tau_i(r) of a scene on a prescribed set of cameras (sparse,
    one row per pixel ray), with F(r) = sum_i tau_i(r)."""

    def __init__(self, gaussians: Gaussians, cameras: list[Camera], eta: float):
        self.eta, self.n = eta, len(gaussians)
        taus = [optical_depth(gaussians, c) for c in cameras]
        self.full = torch.cat([t.sum(1) for t in taus])
        self.tau = torch.cat(taus).to_sparse().coalesce()

    @property
    def rays(self) -> int:
        return int(self.full.numel())

    def shares(self) -> dict[str, torch.Tensor]:
        """Per Gaussian: max and sum over rays of tau_i(r) / (F(r) + eta)."""
        rows, cols = self.tau.indices()
        share = self.tau.values() / (self.full[rows] + self.eta)
        zeros = torch.zeros(self.n, dtype=share.dtype)
        return {"max": zeros.scatter_reduce(0, cols, share, "amax"),
                "sum": zeros.index_add(0, cols, share)}

    def estimate(self, coreset: Coreset) -> torch.Tensor:
        """F_hat(r) = sum_{i in S} w_i tau_i(r) for every ray."""
        weights = coreset.full_weights(self.n).to(self.tau.dtype)
        return torch.sparse.mm(self.tau, weights[:, None]).flatten()

    def errors(self, coreset: Coreset) -> torch.Tensor:
        """|F_hat(r) - F(r)| / (F(r) + eta) for every ray."""
        return (self.estimate(coreset) - self.full).abs() / (self.full + self.eta)


def sensitivities(shares: dict[str, torch.Tensor], kind: str,
                  uniform_mix: float = 0.0) -> torch.Tensor:
    if kind not in SENSITIVITY_KINDS:
        raise UserError(f"unknown sensitivity kind '{kind}' ({', '.join(SENSITIVITY_KINDS)})")
    if kind == "mix":
        s = 0.5 * _normalised(shares["max"]) + 0.5 * _normalised(shares["sum"])
    else:
        s = shares[kind].clone()
    if uniform_mix:
        s = (1 - uniform_mix) * _normalised(s) + uniform_mix / s.numel()
    return s


def _normalised(x: torch.Tensor) -> torch.Tensor:
    return x / x.sum().clamp(min=1e-30)


def poisson_sample(scores: torch.Tensor, budget: int, generator: torch.Generator,
                   weighted: bool = True) -> Coreset:
    """Keep i with probability pi_i = min(1, c score_i), sum pi = budget (c by bisection);
    weight 1 / pi_i (or 1 when ``weighted`` is false)."""
    scores = scores.double().clamp(min=0)
    positive = int((scores > 0).sum())
    if budget >= positive:
        index = torch.nonzero(scores > 0).flatten()
        return Coreset(index, torch.ones(index.numel()))
    lo, hi = 0.0, 1.0
    while torch.clamp(hi * scores, max=1).sum() < budget:
        hi *= 2
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if torch.clamp(mid * scores, max=1).sum() < budget:
            lo = mid
        else:
            hi = mid
    pi = torch.clamp(hi * scores, max=1)
    keep = torch.rand(scores.numel(), generator=generator, dtype=torch.float64) < pi
    index = torch.nonzero(keep).flatten()
    weights = (1 / pi[index]).float() if weighted else torch.ones(index.numel())
    return Coreset(index, weights)


def multinomial_sample(scores: torch.Tensor, m: int, generator: torch.Generator) -> Coreset:
    """m i.i.d. draws with p = score / sum(score); weight count_i / (m p_i)."""
    p = _normalised(scores.double().clamp(min=0))
    draws = torch.multinomial(p, m, replacement=True, generator=generator)
    counts = torch.bincount(draws, minlength=p.numel())
    index = torch.nonzero(counts).flatten()
    return Coreset(index, (counts[index] / (m * p[index])).float())


def top_k(scores: torch.Tensor, k: int) -> Coreset:
    index = torch.argsort(scores, descending=True)[:k]
    return Coreset(index, torch.ones(index.numel()))


# ---------------------------------------------------------------------------- baselines
def blending_totals(gaussians: Gaussians, cameras: list[Camera]) -> dict[str, torch.Tensor]:
    """:func:`blending_statistics` summed over the cameras, one compositing pass each."""
    totals = {}
    for camera in cameras:
        for key, values in blending_statistics(gaussians, camera).items():
            totals[key] = totals.get(key, 0) + values
    return totals


def lightgaussian_scores(gaussians: Gaussians, totals: dict[str, torch.Tensor],
                         with_t: bool = False, volume_power: float = 0.1) -> torch.Tensor:
    """LightGaussian's global significance from :func:`blending_totals`."""
    importance = totals["hit_opacity_t" if with_t else "hit_opacity"]
    volume = torch.exp(gaussians.log_scales.detach()).prod(1)
    reference = torch.sort(volume, descending=True).values[int(0.9 * volume.numel())]
    return (volume / reference).clamp(max=1) ** volume_power * importance


def pup_fisher(gaussians: Gaussians, cameras: list[Camera], patch: int = 24) -> torch.Tensor:
    """F_i (N, 6, 6) = sum over (view, patch, channel) of g g^T with g the gradient of the
    patch's channel sum w.r.t. Gaussian i's (xyz, log-scale) (PUP-3DGS's pooled Fisher):
    one backward pass per patch and channel, each giving every Gaussian's g."""
    n = len(gaussians)
    fisher = torch.zeros(n, 6, 6, dtype=torch.float64)
    for camera in cameras:
        means = gaussians.means.detach().clone().requires_grad_(True)
        log_scales = gaussians.log_scales.detach().clone().requires_grad_(True)
        g = Gaussians(means, gaussians.quats.detach(), log_scales,
                      gaussians.opacity_logits.detach(), gaussians.colors.detach())
        image, _ = render(g, camera)
        h, w = image.shape[:2]
        if h % patch or w % patch:
            raise UserError(f"the PUP Fisher patch {patch} must divide the image size {h}x{w}")
        sums = image.reshape(h // patch, patch, w // patch, patch, 3).sum((1, 3)).reshape(-1)
        for k in range(sums.numel()):
            grads = torch.autograd.grad(sums[k], (means, log_scales),
                                        retain_graph=k + 1 < sums.numel())
            jac = torch.cat(grads, -1).double()  # (N, 6)
            fisher += jac[:, :, None] * jac[:, None, :]
    return fisher


def pup_fisher_scores(gaussians: Gaussians, cameras: list[Camera], patch: int = 24,
                      damping: float = 1e-12) -> torch.Tensor:
    """PUP-3DGS's score: log det of the damped Fisher (sum of log eigenvalues)."""
    fisher = pup_fisher(gaussians, cameras, patch)
    eigen = torch.linalg.eigvalsh(fisher + damping * torch.eye(6, dtype=torch.float64))
    return torch.log(eigen.clamp(min=damping)).sum(1).float()


# ---------------------------------------------------------------------------- evaluation
def sample_size_bound(total_sensitivity: float, rays: int, eps: float, delta: float) -> int:
    return int(np.ceil(3 * total_sensitivity * np.log(2 * rays / delta) / eps ** 2))
