"""The Proprio self-score of a clip under a frozen flow generator, its motion mask,
best-of-N selection, gradient self-refinement, a learned-discriminator baseline, and the
Physics-IQ score formula.

Score (RECON from the abstract; every choice configurable): re-noise the clip x0 at noise
levels s in S with K shared perturbations eps_k (common random numbers: the same (s, eps)
for every candidate), and measure the flow residual
    r(s, k) = || M * (v(x_s, s, c) - (eps_k - x0)) ||^2 / ||M||_1,  x_s = (1 - s) x0 + s eps_k
(how well the model's dynamics explain the clip); R = mean over (s, k) + beta * std over k
of the per-perturbation means (the stability term). Lower R = more plausible.

Motion mask (Physics-IQ's ``binary_mask_generator`` logic on the clip itself): optionally a
Gaussian blur (OpenCV's sigma for the kernel size), a running average of the frames (weight
``alpha``), |frame - average| > ``threshold``, morphological opening then closing with a
``kernel`` x ``kernel`` square, the first frame empty, then dilated by ``dilate`` px; an
all-empty mask falls back to all ones.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from common.streams import Streams


@dataclass(frozen=True)
class ScoreOptions:
    sigmas: tuple[float, ...] = (0.2, 0.4, 0.6, 0.8)
    perturbations: int = 4
    beta: float = 0.5  # weight of the across-perturbation std (stability)
    mask: bool = True
    mask_threshold: float = 0.04
    mask_alpha: float = 0.3
    mask_kernel: int = 3
    mask_dilate: int = 1
    mask_blur: int = 0  # Gaussian blur kernel before the running average (Physics-IQ: 5)


def shared_perturbations(shape: tuple[int, ...], k: int, seed: int) -> torch.Tensor:
    """(k, *shape) noise drawn once and reused for every candidate."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randn((k, *shape), generator=gen)


def _binary_open_close(mask: torch.Tensor, kernel: int) -> torch.Tensor:
    pad = kernel // 2

    def dilate(m):
        return F.max_pool2d(m, kernel, 1, pad)

    def erode(m):
        return 1 - F.max_pool2d(1 - m, kernel, 1, pad)

    opened = dilate(erode(mask))
    return erode(dilate(opened))


def gaussian_blur(images: torch.Tensor, size: int) -> torch.Tensor:
    """(N, 1, H, W) blurred by a ``size`` x ``size`` Gaussian with OpenCV's default sigma
    0.3 ((size - 1) / 2 - 1) + 0.8 and reflected borders."""
    sigma = 0.3 * ((size - 1) * 0.5 - 1) + 0.8
    x = torch.arange(size, dtype=images.dtype) - (size - 1) / 2
    k = torch.exp(-(x**2) / (2 * sigma**2))
    k = k / k.sum()
    padded = F.pad(images, [size // 2] * 4, mode="reflect")
    return F.conv2d(F.conv2d(padded, k.reshape(1, 1, 1, -1)), k.reshape(1, 1, -1, 1))


def motion_mask(clips: torch.Tensor, opts: ScoreOptions) -> torch.Tensor:
    """(B, T, H, W) clips in [0, 1] -> (B, T, H, W) binary mask of moving pixels."""
    b, t, h, w = clips.shape
    if opts.mask_blur > 1:
        clips = gaussian_blur(clips.reshape(b * t, 1, h, w), opts.mask_blur).reshape(b, t, h, w)
    avg = clips[:, 0]
    masks = [torch.zeros_like(avg)]
    for i in range(1, t):
        avg = opts.mask_alpha * clips[:, i] + (1 - opts.mask_alpha) * avg
        masks.append((clips[:, i] - avg).abs().gt(opts.mask_threshold).float())
    m = torch.stack(masks, 1).reshape(b * t, 1, h, w)
    if opts.mask_kernel > 1:
        m = _binary_open_close(m, opts.mask_kernel)
    if opts.mask_dilate:
        m = F.max_pool2d(m, 2 * opts.mask_dilate + 1, 1, opts.mask_dilate)
    m = m.reshape(b, t, h, w)
    empty = m.sum((1, 2, 3)) == 0
    return torch.where(empty[:, None, None, None], torch.ones_like(m), m)


def residuals(net: nn.Module, x0: torch.Tensor, condition: torch.Tensor,
              eps: torch.Tensor, opts: ScoreOptions, mask: torch.Tensor | None = None
              ) -> torch.Tensor:
    """(B, K, |S|) masked flow residuals r(s, k) (differentiable in ``x0``). ``mask``
    (broadcastable to ``x0``) overrides the motion mask of ``x0`` (a latent clip's mask
    comes from its decoded frames)."""
    if mask is None:
        mask = motion_mask(x0.detach(), opts) if opts.mask else torch.ones_like(x0)
    mask = mask.expand_as(x0)
    norm = mask.flatten(1).sum(1)
    out = []
    for k in range(eps.shape[0]):
        e = eps[k].to(x0).expand_as(x0)
        row = []
        for s in opts.sigmas:
            xs = (1 - s) * x0 + s * e
            v = net(xs, torch.full((len(x0),), s, dtype=x0.dtype, device=x0.device), condition)
            row.append(((mask * (v - (e - x0))) ** 2).flatten(1).sum(1) / norm)
        out.append(torch.stack(row, -1))
    return torch.stack(out, 1)


def proprio_score(net: nn.Module, x0: torch.Tensor, condition: torch.Tensor,
                  eps: torch.Tensor, opts: ScoreOptions, mask: torch.Tensor | None = None
                  ) -> torch.Tensor:
    """(B,) R = mean residual + beta * std over the shared perturbations."""
    return aggregate(residuals(net, x0, condition, eps, opts, mask), opts.beta)


def aggregate(r: torch.Tensor, beta: float) -> torch.Tensor:
    """(B, K, |S|) residuals -> (B,) mean over noise levels and perturbations + beta * the
    std over perturbations of their means over noise levels."""
    per_k = r.mean(-1)
    spread = per_k.std(1) if per_k.shape[1] > 1 else torch.zeros_like(per_k[:, 0])
    return per_k.mean(1) + beta * spread


def score_aggregations(r: torch.Tensor, opts: ScoreOptions) -> dict[str, torch.Tensor]:
    """R (``full``) beside the other ways to read the same (B, K, |S|) residuals: without the
    stability term (``no_stability``), each noise level alone (``sigma<s>``), and each
    perturbation alone (``perturbation<k>``)."""
    out = {"full": aggregate(r, opts.beta), "no_stability": aggregate(r, 0.0)}
    out |= {f"sigma{s:g}": aggregate(r[:, :, j:j + 1], opts.beta)
            for j, s in enumerate(opts.sigmas)}
    out |= {f"perturbation{k}": aggregate(r[:, k:k + 1], opts.beta) for k in range(r.shape[1])}
    return out


def refine(net: nn.Module, to_clip, start: torch.Tensor, condition: torch.Tensor,
           eps: torch.Tensor, opts: ScoreOptions, steps: int, lr: float,
           proximity: float) -> torch.Tensor:
    """Gradient self-refinement: minimise R(to_clip(p)) + proximity * ||p - start||^2 / n
    over the parameters p (from ``start``) with Adam for ``steps`` steps; returns the
    refined clip. p is the sampler's initial noise (``to_clip`` = the sampler) or the clip's
    free frames (``to_clip`` prepends the condition frames)."""
    param = start.detach().clone().requires_grad_(True)
    opt = torch.optim.Adam([param], lr=lr)
    for _ in range(steps):
        loss = proprio_score(net, to_clip(param), condition, eps, opts).sum()
        loss = loss + proximity * ((param - start) ** 2).mean((1, 2, 3)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        return to_clip(param)


class Discriminator(nn.Module):
    """The learned baseline: an MLP on the clip's frames and frame differences that predicts
    'real' against the controlled corruptions."""

    def __init__(self, frames: int, size: int, hidden: int = 256):
        super().__init__()
        d = frames * size * size + (frames - 1) * size * size
        self.net = nn.Sequential(nn.Linear(d, hidden), nn.SiLU(), nn.Linear(hidden, hidden),
                                 nn.SiLU(), nn.Linear(hidden, 1))

    def forward(self, clips: torch.Tensor) -> torch.Tensor:
        b = clips.shape[0]
        diffs = clips[:, 1:] - clips[:, :-1]
        return self.net(torch.cat([clips.reshape(b, -1), diffs.reshape(b, -1)], -1)).squeeze(-1)


def train_discriminator(real: np.ndarray, fake: np.ndarray, epochs: int, seed: int
                        ) -> Discriminator:
    """Logistic regression of real (1) vs corrupted (0) clips, full-batch Adam."""
    streams = Streams(seed)
    x = torch.tensor(np.concatenate([real, fake]))
    y = torch.cat([torch.ones(len(real)), torch.zeros(len(fake))])
    with streams.torch_default("initialisation"):
        disc = Discriminator(x.shape[1], x.shape[2])
    opt = torch.optim.Adam(disc.parameters(), lr=1e-3)
    order = streams.torch("batches")
    for _ in range(epochs):
        for idx in torch.randperm(len(x), generator=order).split(256):
            loss = F.binary_cross_entropy_with_logits(disc(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return disc.eval()


def physics_iq_score(st_iou: float, s_iou: float, ws_iou: float, mse: float,
                     var_st_iou: float, var_s_iou: float, var_ws_iou: float,
                     var_mse: float) -> float:
    """Physics-IQ (original ``calculate_iq_score``): the three IoUs over their physical
    variance (take 1 vs take 2), averaged, minus the MSE excess, x 100, clipped to [0, 100]."""
    ratio = (st_iou / var_st_iou + s_iou / var_s_iou + ws_iou / var_ws_iou) / 3
    return float(np.clip((ratio - (mse - var_mse)) * 100, 0, 100))


def physics_iq_metrics(a: np.ndarray, b: np.ndarray, frames_a: np.ndarray,
                       frames_b: np.ndarray) -> dict[str, float]:
    """Spatiotemporal IoU (per frame, 1 when both empty), spatial IoU of the time-max masks,
    weighted-spatial IoU (sum min / sum max of the time-mean masks) of binary masks (T, H, W),
    and the mean per-frame MSE of the frames."""
    inter = (a & b).sum((1, 2))
    union = (a | b).sum((1, 2))
    st = np.where(union == 0, 1.0, inter / np.maximum(union, 1)).mean()
    ma, mb = a.any(0), b.any(0)
    s = 1.0 if not (ma | mb).any() else (ma & mb).sum() / (ma | mb).sum()
    wa, wb = a.mean(0), b.mean(0)
    ws = 1.0 if np.maximum(wa, wb).sum() == 0 else np.minimum(wa, wb).sum() / np.maximum(
        wa, wb).sum()
    mse = float(((frames_a - frames_b) ** 2).mean())
    return {"st_iou": float(st), "s_iou": float(s), "ws_iou": float(ws), "mse": mse}
