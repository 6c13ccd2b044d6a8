"""Analyses of a prototype encoder: exact attributions, noise ceiling, concept and tuning
recovery against the planted truth, closed-loop synthesis."""

from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment


def attributions(coef: np.ndarray, activations: np.ndarray) -> np.ndarray:
    """(N, V, K) contributions W_vk a_k(x); with the intercept they sum to the prediction."""
    return activations[:, None, :] * coef.T[None]


def noise_ceiling(repeats: np.ndarray) -> np.ndarray:
    """(V,) NC for the mean of the n repeats (Allen et al. 2022): ncsnr^2 / (ncsnr^2 + 1/n),
    ncsnr = sqrt(max(var_total - var_noise, 0) / var_noise), on z-scored responses."""
    n = repeats.shape[0]
    z = (repeats - repeats.mean((0, 1))) / (repeats.std((0, 1)) + 1e-12)
    noise_var = z.var(axis=0, ddof=1).mean(0)
    total_var = z.reshape(-1, z.shape[-1]).var(0)
    snr2 = np.maximum(total_var - noise_var, 0) / noise_var
    return snr2 / (snr2 + 1 / n)


def pearson(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Column-wise Pearson r of two (N, V) arrays."""
    a, b = a - a.mean(0), b - b.mean(0)
    return (a * b).sum(0) / (np.sqrt((a ** 2).sum(0) * (b ** 2).sum(0)) + 1e-12)


def auroc(scores: np.ndarray, labels: np.ndarray) -> float:
    """scikit-learn's AUROC (ties count one half); 0.5 when one class is absent."""
    from sklearn.metrics import roc_auc_score

    positive = labels > 0.5
    if positive.all() or not positive.any():
        return 0.5
    return float(roc_auc_score(positive, scores))


def auroc_table(activations: np.ndarray, presence: np.ndarray) -> np.ndarray:
    """(C, K) AUROC of every prototype's activation a_k as a detector of every concept."""
    return np.array([[auroc(activations[:, k], presence[:, c])
                      for k in range(activations.shape[1])] for c in range(presence.shape[1])])


def match_concepts(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Hungarian matching of concepts to prototypes on an ``auroc_table``: (prototype per
    concept (C,), its AUROC (C,))."""
    rows, cols = linear_sum_assignment(-table)
    match = np.empty(table.shape[0], dtype=int)
    match[rows] = cols
    return match, table[np.arange(table.shape[0]), match]


def concept_tuning(coef: np.ndarray, activations: np.ndarray, presence: np.ndarray,
                   table: np.ndarray) -> np.ndarray:
    """(V, C) each voxel's learned tuning to each concept, read off the readout: every
    prototype is named by the concept it detects best (many prototypes may share one), and
    T_vc = sum over the prototypes named c of W_vk (E[a_k | c shown] - E[a_k | c absent]),
    in response units like the planted weights."""
    named = table.argmax(0)
    tuning = np.zeros((coef.shape[1], presence.shape[1]))
    for k, concept in enumerate(named):
        shown = presence[:, concept] > 0.5
        if shown.all() or not shown.any():
            continue
        rise = activations[shown, k].mean() - activations[~shown, k].mean()
        tuning[:, concept] += coef[k] * rise
    return tuning


def tuning_recovery(learned: np.ndarray, planted: np.ndarray) -> float:
    """Mean over voxels of the correlation between a voxel's learned and planted tuning
    profiles over concepts (rows of (V, C) arrays): the selectivity's shape, whatever the
    voxel's overall gain (which its pRF sets)."""
    return float(pearson(learned.T, planted.T).mean())


def patch_grid(patches: int) -> int:
    """The side of a square patch grid of ``patches`` tokens (8 for the random CNN's 64; a
    hub ViT's, e.g. 16 for DINOv2 at 224 px)."""
    side = int(round(patches ** 0.5))
    if side * side != patches:
        raise ValueError(f"{patches} patch tokens do not form a square grid")
    return side


def pointing_chance(masks: np.ndarray, patches: int) -> float:
    """The pointing game's chance level: over (image, present concept) pairs, the share of
    the grid's ``patches`` cells the concept's mask touches (a patch picked at random)."""
    n, c, h, w = masks.shape
    grid = patch_grid(patches)
    cells = masks.reshape(n, c, grid, h // grid, grid, w // grid).any(axis=(3, 5))
    covered = cells.reshape(n, c, -1).mean(-1)
    return float(covered[cells.reshape(n, c, -1).any(-1)].mean())


def pointing_game(patch_maps: np.ndarray, masks: np.ndarray, match: np.ndarray) -> float:
    """Localisation: over (image, present concept) pairs, the fraction where the matched
    prototype's most active patch overlaps the concept's mask. ``patch_maps`` (N, K, P)
    with P patches of a square grid in raster order; ``masks`` (N, C, H, W)."""
    n, c, h, w = masks.shape
    grid = patch_grid(patch_maps.shape[-1])
    cells = masks.reshape(n, c, grid, h // grid, grid, w // grid).any(axis=(3, 5))
    hits, total = 0, 0
    for concept in range(c):
        present = cells[:, concept].reshape(n, -1)
        shown = present.any(1)
        best = patch_maps[:, match[concept]].argmax(1)
        hits += int(present[np.arange(n), best][shown].sum())
        total += int(shown.sum())
    return hits / max(total, 1)
