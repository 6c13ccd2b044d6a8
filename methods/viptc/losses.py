"""Losses of exemplar-free visible-infrared lifelong ReID.

S-PTC (RECON of the abstract, in CKDA's form): for a current-task image x with the new
feature f(x) and the frozen previous-stage feature f_old(x), the distributions over the
frozen historical prototypes P_old, q(f) = softmax_k(cos(f, P_old,k) / tau), are kept:
L = mean_x D(q(f_old(x)) || q(f(x))), D = KL (default) or squared error. Only the ranking
over old prototypes is constrained, not the feature's position (contrast: feature KD).

CM-PTC (RECON): the current batch's class means per modality, over classes present in both,
give topology matrices A^V_cd = cos(P^V_c, P^V_d) and A^I; L = ||A^V - A^I||_F^2 / C^2 (or a
row-wise KL of softmax(A / tau)); ``anchor`` stops the gradient through one modality. The
``history`` reading compares instead each modality's class means with that modality's frozen
historical prototypes, A^V_cj = cos(P^V_c, P^V_old,j), so the modalities drift alike.

Baselines: feature distillation ||f - f_old||^2 (LwF-style on features) and linear-CKA
distillation 1 - CKA(F, F_old) over the batch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from common.errors import UserError

DIVERGENCES = ("kl", "mse")  # S-PTC
ANCHORS = ("none", "rgb", "ir")  # CM-PTC's stop-gradient side
FORMS = ("frobenius", "kl")  # CM-PTC's comparison of the two topologies


def class_means(features: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor,
                                                                        torch.Tensor]:
    """(classes in sorted order, their mean features)."""
    classes, inverse = torch.unique(labels, return_inverse=True)
    sums = torch.zeros(classes.numel(), features.shape[1], dtype=features.dtype,
                       device=features.device).index_add(0, inverse, features)
    counts = torch.bincount(inverse, minlength=classes.numel()).to(features.dtype)
    return classes, sums / counts[:, None]


def prototype_distribution(features: torch.Tensor, prototypes: torch.Tensor,
                           tau: float) -> torch.Tensor:
    """log softmax_k(cos(f, P_k) / tau), (n, K)."""
    cos = F.normalize(features, dim=1) @ F.normalize(prototypes, dim=1).T
    return F.log_softmax(cos / tau, dim=1)


def sptc_loss(features: torch.Tensor, old_features: torch.Tensor, prototypes: torch.Tensor,
              tau: float = 0.1, divergence: str = "kl") -> torch.Tensor:
    log_new = prototype_distribution(features, prototypes.detach(), tau)
    log_old = prototype_distribution(old_features.detach(), prototypes.detach(), tau)
    if divergence == "kl":
        return (log_old.exp() * (log_old - log_new)).sum(1).mean()
    if divergence == "mse":
        return ((log_old.exp() - log_new.exp()) ** 2).sum(1).mean()
    raise UserError(f"unknown S-PTC divergence '{divergence}' ({', '.join(DIVERGENCES)})")


def topology(prototypes: torch.Tensor) -> torch.Tensor:
    p = F.normalize(prototypes, dim=1)
    return p @ p.T


def cmptc_loss(features: torch.Tensor, labels: torch.Tensor, modality: torch.Tensor,
               anchor: str = "none", form: str = "frobenius", tau: float = 0.1,
               history: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """``history=None``: A^M = cos of the batch's class means of modality M with each other.
    ``history=(P^V, P^I)``: A^M = cos of the class means with the frozen historical
    prototypes of the same modality (rows: the batch's classes, columns: old classes), so the
    two modalities must keep the same relation to the past."""
    rgb_classes, rgb = class_means(features[modality == 0], labels[modality == 0])
    ir_classes, ir = class_means(features[modality == 1], labels[modality == 1])
    shared = rgb_classes[torch.isin(rgb_classes, ir_classes)]
    if shared.numel() < 2:
        return features.sum() * 0
    rgb = rgb[torch.isin(rgb_classes, shared)]
    ir = ir[torch.isin(ir_classes, shared)]
    if history is None:
        a_rgb, a_ir = topology(rgb), topology(ir)
    else:
        old_rgb, old_ir = (F.normalize(p.detach(), dim=1) for p in history)
        a_rgb = F.normalize(rgb, dim=1) @ old_rgb.T
        a_ir = F.normalize(ir, dim=1) @ old_ir.T
    if anchor == "rgb":
        a_rgb = a_rgb.detach()
    elif anchor == "ir":
        a_ir = a_ir.detach()
    elif anchor != "none":
        raise UserError(f"unknown CM-PTC anchor '{anchor}' ({', '.join(ANCHORS)})")
    if form == "frobenius":
        return ((a_rgb - a_ir) ** 2).sum() / a_rgb.numel()
    if form == "kl":
        lr, li = F.log_softmax(a_rgb / tau, 1), F.log_softmax(a_ir / tau, 1)
        return 0.5 * ((lr.exp() * (lr - li)).sum(1) + (li.exp() * (li - lr)).sum(1)).mean()
    raise UserError(f"unknown CM-PTC form '{form}' ({', '.join(FORMS)})")


def feature_kd_loss(features: torch.Tensor, old_features: torch.Tensor) -> torch.Tensor:
    return ((features - old_features.detach()) ** 2).sum(1).mean()


def linear_cka(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x = x - x.mean(0, keepdim=True)
    y = y - y.mean(0, keepdim=True)
    cross = (x.T @ y).norm() ** 2
    return cross / ((x.T @ x).norm() * (y.T @ y).norm()).clamp(min=1e-12)


def cka_kd_loss(features: torch.Tensor, old_features: torch.Tensor) -> torch.Tensor:
    return 1 - linear_cka(features, old_features.detach())


def batch_hard_triplet(features: torch.Tensor, labels: torch.Tensor,
                       margin: float = 0.3) -> torch.Tensor:
    dist = torch.cdist(features, features)
    same = labels[:, None] == labels[None, :]
    hardest_positive = torch.where(same, dist, torch.zeros_like(dist)).max(1).values
    hardest_negative = torch.where(same, torch.full_like(dist, float("inf")), dist).min(1).values
    return F.relu(hardest_positive - hardest_negative + margin).mean()
