"""Frozen patch features, sparse prototype activations and a ridge voxel readout.

- ``PatchFeatures``: a fixed, seeded, randomly initialised two-layer conv net (plain torch)
  giving a grid of patch tokens per image, with each patch's mean colour appended (a
  stand-in for a frozen foundation backbone).
- Prototypes p_k (K of them) are k-means centres of the most salient training patch tokens
  (the largest-norm fraction: mostly objects, not background); patch similarity
  s_kp = cos(z_p, p_k); activation a_k = max_p ReLU(s_kp - theta_k) with theta_k a
  quantile of s_k over training patches, then only the ``top_k`` largest a_k per image are
  kept (RECON: the paper's exact sparsifier is not public). ``push`` replaces every
  prototype by its nearest training patch token (interpretable by construction).
- Prototype learning (RECON, ``method.selection``): ``voxel_greedy`` (default) pushes a
  larger k-means pool to real patches and keeps the K candidates that best explain the
  training voxels, chosen greedily (orthogonal matching pursuit over all voxels at once);
  ``kmeans`` keeps K k-means centres directly.
- Readout (``method.readout``), ridge in closed form with alpha per voxel from a grid by
  k-fold cross-validation: ``receptive_field`` (default) pools each prototype's activation
  map through the voxel's own Gaussian receptive field over the patch grid, chosen per voxel
  from candidate centres and widths ("where-what" factorized encoding), y_v = sum_k W_vk
  sum_p g_v(p) A_kp + b_v; ``max`` is y_v = W_v a + b_v on the global maxima a. The
  black-box baseline is the same ridge on the full tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from methods.protofmri.analysis import patch_grid


class PatchFeatures(nn.Module):
    """(N, 3, 64, 64) images -> (N, P, D) patch tokens (P = 8 x 8 grid, D = channels + 3).
    The mean colour is scaled by ``colour_weight`` times the median conv-token norm on fixed
    random probe images, so an image's tokens do not depend on the batch it comes in."""

    def __init__(self, channels: int = 64, seed: int = 0, colour_weight: float = 3.0) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.conv1 = nn.Conv2d(3, channels // 2, 5, stride=2, padding=2)
        self.conv2 = nn.Conv2d(channels // 2, channels, 3, stride=2, padding=1)
        with torch.no_grad():
            for conv in (self.conv1, self.conv2):
                fan_in = conv.weight[0].numel()
                conv.weight.copy_(torch.randn(conv.weight.shape, generator=generator)
                                  * (2 / fan_in) ** 0.5)
                conv.bias.zero_()
            probe = torch.rand((16, 3, 8, 8), generator=generator).repeat_interleave(
                8, 2).repeat_interleave(8, 3)
            self.colour_scale = colour_weight * float(self._conv_tokens(probe).norm(
                dim=-1).median())
        self.requires_grad_(False)

    def _conv_tokens(self, images: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.conv2(torch.relu(self.conv1(images))))  # (N, D, 16, 16)
        return nn.functional.avg_pool2d(h, 2).flatten(2).transpose(1, 2)  # (N, 64, D)

    def encode(self, images: torch.Tensor) -> torch.Tensor:
        """Differentiable in the pixels (image-space synthesis)."""
        colour = nn.functional.avg_pool2d(images, images.shape[-1] // 8).flatten(2)
        return torch.cat([self._conv_tokens(images), self.colour_scale * colour.transpose(1, 2)],
                         dim=-1)

    @torch.no_grad()
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.encode(images)

    def tokens(self, images: np.ndarray, batch: int = 256) -> np.ndarray:
        return np.concatenate([self(torch.as_tensor(images[i:i + batch])).numpy()
                               for i in range(0, len(images), batch)])


class HubPatchFeatures:
    """Patch tokens of a vision transformer by hub id (e.g. facebook/dinov2-small): the last
    hidden state without the class token, images resized by the model's processor."""

    def __init__(self, hub_id: str, device: str = "cpu") -> None:
        from transformers import AutoImageProcessor, AutoModel

        from models.lm.loader import load_by_name

        def load(local_only: bool):
            return (AutoImageProcessor.from_pretrained(hub_id, local_files_only=local_only),
                    AutoModel.from_pretrained(hub_id, local_files_only=local_only))

        self.processor, self.model = load_by_name(hub_id, load, kind="backbone",
                                                  setting="method.backbone")
        self.model = self.model.to(device).eval()
        self.device = device

    @torch.no_grad()
    def tokens(self, images: np.ndarray, batch: int = 64) -> np.ndarray:
        out = []
        for i in range(0, len(images), batch):
            pixels = self.processor(images=list(images[i:i + batch].transpose(0, 2, 3, 1)),
                                    return_tensors="pt", do_rescale=False)["pixel_values"]
            hidden = self.model(pixel_values=pixels.to(self.device)).last_hidden_state
            out.append(hidden[:, 1:].float().cpu().numpy())
        return np.concatenate(out)


def patch_features(backbone: str, channels: int, seed: int, colour_weight: float,
                   device: str = "cpu"):
    """``random_cnn`` (offline default) or a vision transformer by hub id."""
    if backbone == "random_cnn":
        return PatchFeatures(channels, seed, colour_weight)
    return HubPatchFeatures(backbone, device)


def _normalize(x: np.ndarray) -> np.ndarray:
    return x / (np.linalg.norm(x, axis=-1, keepdims=True) + 1e-12)


@dataclass
class PrototypeLayer:
    prototypes: np.ndarray  # (K, D) real patch tokens
    thresholds: np.ndarray  # (K,)
    top_k: int
    centre: np.ndarray | float = 0.0  # (D,) mean training token: cosines are taken around it

    def similarities(self, tokens: np.ndarray) -> np.ndarray:
        """(N, K, P) cosine similarity of every centred patch token to every centred
        prototype (a frozen backbone's raw tokens share one direction: raw cosines are all
        near 1)."""
        return np.einsum("npd,kd->nkp", _normalize(tokens - self.centre),
                         _normalize(self.prototypes - self.centre))

    def patch_activations(self, tokens: np.ndarray) -> np.ndarray:
        """(N, K, P) ReLU(s_kp - theta_k): where on the image each prototype fires."""
        return np.maximum(self.similarities(tokens) - self.thresholds[None, :, None], 0.0)

    def sparse_maps(self, tokens: np.ndarray) -> np.ndarray:
        """(N, K, P) patch activations of the top_k prototypes of each image (ranked by
        their largest patch activation), zero for the others."""
        maps = self.patch_activations(tokens)
        a = maps.max(-1)
        if self.top_k < a.shape[1]:
            cut = -np.partition(-a, self.top_k - 1, axis=1)[:, self.top_k - 1:self.top_k]
            rank = np.argsort(np.argsort(-a, axis=1, kind="stable"), axis=1)
            maps = maps * ((a >= cut) & (rank < self.top_k))[..., None]
        return maps

    def __call__(self, tokens: np.ndarray) -> np.ndarray:
        """(N, K) sparse activations: max over patches, the top_k largest kept per image."""
        return self.sparse_maps(tokens).max(-1)


def synthesize(features: PatchFeatures, layer: PrototypeLayer, images: np.ndarray, target: int,
               steps: int, lr: float, hold: float) -> np.ndarray:
    """Image-space synthesis (RECON, in the manner of feature visualisation): Adam on the
    pixels raises prototype ``target``'s best patch similarity max_p s_kp (which has a
    gradient even where the prototype is silent) while a squared penalty (weight ``hold``)
    holds every other prototype's activation max_p ReLU(s_jp - theta_j) at its start;
    pixels stay in [0, 1]. Returns the synthesized (N, 3, H, W) images."""
    x = torch.tensor(images, dtype=torch.float32, requires_grad=True)
    prototypes = torch.as_tensor(_normalize(layer.prototypes - layer.centre),
                                 dtype=torch.float32)
    thresholds = torch.as_tensor(layer.thresholds, dtype=torch.float32)
    centre = torch.as_tensor(layer.centre, dtype=torch.float32)

    def similarities(pixels: torch.Tensor) -> torch.Tensor:
        tokens = nn.functional.normalize(features.encode(pixels) - centre, dim=-1)
        return torch.einsum("npd,kd->nkp", tokens, prototypes)

    with torch.no_grad():
        start = torch.relu(similarities(x) - thresholds[None, :, None]).amax(-1)
    others = torch.ones(len(thresholds))
    others[target] = 0.0
    optimiser = torch.optim.Adam([x], lr=lr)
    for _ in range(steps):
        s = similarities(x)
        a = torch.relu(s - thresholds[None, :, None]).amax(-1)
        loss = -s[:, target].amax(-1).mean() + hold * (((a - start) ** 2) * others).sum(1).mean()
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        with torch.no_grad():
            x.clamp_(0.0, 1.0)
    return x.detach().numpy()


def fit_prototypes(tokens: np.ndarray, count: int, top_k: int, quantile: float,
                   salient_fraction: float, rng: np.random.Generator, sample: int = 20000
                   ) -> PrototypeLayer:
    """k-means prototypes (cosine geometry around the mean token) on a sample of the
    ``salient_fraction`` of training patch tokens farthest from the mean, pushed to their
    nearest real token; thresholds at a quantile of each prototype's similarities."""
    from sklearn.cluster import KMeans

    flat = tokens.reshape(-1, tokens.shape[-1])
    centre = flat.mean(0)
    norms = np.linalg.norm(flat - centre, axis=1)
    flat = flat[norms >= np.quantile(norms, 1 - salient_fraction)]
    pick = rng.choice(len(flat), min(sample, len(flat)), replace=False)
    directions = KMeans(count, n_init=3, random_state=int(rng.integers(2**31))).fit(
        _normalize(flat[pick] - centre)).cluster_centers_
    layer = PrototypeLayer(push(directions + centre, flat[pick], centre), np.zeros(count),
                           top_k, centre)
    sims = layer.similarities(tokens[: max(1, sample // tokens.shape[1])])
    layer.thresholds = np.quantile(sims.transpose(1, 0, 2).reshape(count, -1), quantile, axis=1)
    return layer


def select_prototypes(pool: PrototypeLayer, tokens: np.ndarray, y: np.ndarray, count: int,
                      top_k: int) -> PrototypeLayer:
    """The ``count`` prototypes of ``pool`` whose activations best explain the voxels,
    chosen greedily (orthogonal matching pursuit with all voxels as one multi-output target):
    each step adds the candidate whose activation, made orthogonal to those already chosen,
    removes the most residual variance of the z-scored responses. Selection uses the pool's
    dense activations; ``top_k`` applies to the result. When voxels outnumber images the
    target is replaced by U S of its SVD, which leaves every step's gain unchanged."""
    if count > len(pool.prototypes):
        raise ValueError(f"cannot select {count} prototypes from a pool of "
                         f"{len(pool.prototypes)}")
    dense = PrototypeLayer(pool.prototypes, pool.thresholds, len(pool.prototypes), pool.centre)
    q = dense(tokens)
    q = q - q.mean(0)
    residual = (y - y.mean(0)) / (y.std(0) + 1e-12)
    if residual.shape[1] > residual.shape[0]:
        u, s, _ = np.linalg.svd(residual, full_matrices=False)
        residual = u * s
    chosen: list[int] = []
    for _ in range(count):
        norms2 = (q ** 2).sum(0)
        gain = ((q.T @ residual) ** 2).sum(1) / np.maximum(norms2, 1e-12)
        gain[norms2 < 1e-12] = -1.0
        gain[chosen] = -np.inf
        best = int(gain.argmax())
        chosen.append(best)
        unit = q[:, best] / np.sqrt(max(norms2[best], 1e-12))
        residual -= np.outer(unit, unit @ residual)
        q -= np.outer(unit, unit @ q)
    return PrototypeLayer(pool.prototypes[chosen].copy(), pool.thresholds[chosen].copy(), top_k,
                          pool.centre)


def push(prototypes: np.ndarray, tokens: np.ndarray, centre: np.ndarray | float = 0.0
         ) -> np.ndarray:
    """Each prototype replaced by its most similar real patch token (cosine around
    ``centre``)."""
    nearest = (_normalize(prototypes - centre) @ _normalize(tokens - centre).T).argmax(1)
    return tokens[nearest].copy()


@dataclass
class Ridge:
    coef: np.ndarray  # (F, V)
    intercept: np.ndarray  # (V,)
    alpha: np.ndarray  # (V,) chosen per voxel

    def predict(self, x: np.ndarray) -> np.ndarray:
        return x @ self.coef + self.intercept


def _centred_svd(x: np.ndarray, y: np.ndarray):
    mx, my = x.mean(0), y.mean(0)
    u, s, vt = np.linalg.svd(x - mx, full_matrices=False)
    return mx, my, s, vt, u.T @ (y - my)


def _shrunk(s: np.ndarray, uty: np.ndarray, alphas: np.ndarray) -> np.ndarray:
    """(r, V) ridge coefficients in the right singular basis, one alpha per voxel."""
    return s[:, None] / (s[:, None] ** 2 + alphas[None, :]) * uty


def ridge_fit(x: np.ndarray, y: np.ndarray, alpha: float | np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
    """Closed-form ridge with an unpenalised intercept: (coef (F, V), intercept (V,)); one
    alpha, or one per voxel."""
    mx, my, s, vt, uty = _centred_svd(x, y)
    coef = vt.T @ _shrunk(s, uty, np.broadcast_to(np.asarray(alpha, dtype=float),
                                                   (y.shape[1],)))
    return coef, my - mx @ coef


def ridge_cv(x: np.ndarray, y: np.ndarray, alphas, folds: int, rng: np.random.Generator
             ) -> Ridge:
    """Ridge with alpha chosen per voxel from ``alphas`` by k-fold cross-validated MSE (one
    SVD per fold serves every alpha)."""
    order = rng.permutation(len(x))
    errors = np.zeros((len(alphas), y.shape[1]))
    for fold in np.array_split(order, folds):
        train = np.setdiff1d(order, fold)
        mx, my, s, vt, uty = _centred_svd(x[train], y[train])
        held = (x[fold] - mx) @ vt.T  # (n_fold, r)
        for i, alpha in enumerate(alphas):
            shrunk = _shrunk(s, uty, np.full(y.shape[1], float(alpha)))
            errors[i] += ((held @ shrunk + my - y[fold]) ** 2).sum(0)
    best = np.asarray(alphas, dtype=float)[errors.argmin(0)]
    coef, intercept = ridge_fit(x, y, best)
    return Ridge(coef, intercept, best)


@dataclass
class MaxReadout:
    """Ridge on each prototype's largest patch activation (one global max per prototype):
    blind to where on the image a prototype fires."""

    ridge: Ridge

    @property
    def coef(self) -> np.ndarray:  # (K, V)
        return self.ridge.coef

    def predict(self, maps: np.ndarray) -> np.ndarray:
        return self.ridge.predict(maps.max(-1))


def gaussian_pools(side: int, sigmas) -> np.ndarray:
    """(G, side * side) Gaussian pooling weights (sum 1) centred on every patch of a square
    grid, one set per width in ``sigmas`` (patch units)."""
    grid = np.stack(np.meshgrid(np.arange(side), np.arange(side), indexing="ij"), -1)
    grid = grid.reshape(-1, 2).astype(float)
    d2 = ((grid[:, None, :] - grid[None, :, :]) ** 2).sum(-1)  # (centre, patch)
    pools = [np.exp(-d2 / (2 * sigma**2)) for sigma in sigmas]
    return np.concatenate([g / g.sum(1, keepdims=True) for g in pools])


@dataclass
class PooledReadout:
    """A "where-what" readout: each voxel pools every prototype's activation map through its
    own spatial receptive field (a Gaussian over the patch grid), then weighs the pooled
    prototypes linearly: r_v = sum_k beta_vk sum_p g_v(p) A_kp + b_v."""

    pools: np.ndarray  # (G, P) the receptive fields in use
    field: np.ndarray  # (V,) index into pools of each voxel's receptive field
    coef: np.ndarray  # (K, V) beta
    intercept: np.ndarray  # (V,)

    def pooled(self, maps: np.ndarray) -> np.ndarray:
        """(N, V, K) each voxel's pooled prototype activations."""
        return np.einsum("nkp,gp->ngk", maps, self.pools)[:, self.field]

    def predict(self, maps: np.ndarray) -> np.ndarray:
        return np.einsum("nvk,kv->nv", self.pooled(maps), self.coef) + self.intercept


def fit_pooled_readout(maps: np.ndarray, y: np.ndarray, sigmas, alphas, folds: int,
                       rng: np.random.Generator, select_alpha: float = 1.0) -> PooledReadout:
    """Each voxel's receptive field is the candidate Gaussian (every patch x ``sigmas``) whose
    pooled prototypes predict it best on a held-out fifth of the training images (ridge at
    ``select_alpha``, one SVD per candidate for all voxels); then a ridge per receptive field
    in use, alpha per voxel by ``folds``-fold cross-validation (:func:`ridge_cv`)."""
    pools = gaussian_pools(patch_grid(maps.shape[-1]), sigmas)
    order = rng.permutation(len(maps))
    held, fit = order[: len(order) // 5], order[len(order) // 5:]
    pooled = np.einsum("nkp,gp->gnk", maps, pools)  # (G, N, K)
    errors = np.empty((len(pools), y.shape[1]))
    for g in range(len(pools)):
        coef, intercept = ridge_fit(pooled[g, fit], y[fit], select_alpha)
        errors[g] = ((pooled[g, held] @ coef + intercept - y[held]) ** 2).sum(0)
    best = errors.argmin(0)
    used = np.unique(best)
    coef = np.zeros((maps.shape[1], y.shape[1]))
    intercept = np.zeros(y.shape[1])
    for g in used:
        voxels = np.flatnonzero(best == g)
        ridge = ridge_cv(pooled[g], y[:, voxels], alphas, folds, rng)
        coef[:, voxels], intercept[voxels] = ridge.coef, ridge.intercept
    return PooledReadout(pools[used], np.searchsorted(used, best), coef, intercept)


def random_fourier_features(x: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    """Random Fourier features of the Gaussian kernel (Rahimi & Recht 2007): sqrt(2 / D)
    cos(x W + b), W with i.i.d. N(0, 1 / l^2) entries, b uniform on [0, 2 pi); the length
    scale l is the median distance between the standardized rows (the usual heuristic)."""
    z = (x - x.mean(0)) / (x.std(0) + 1e-12)
    sample = z[rng.choice(len(z), size=min(len(z), 500), replace=False)]
    distances = np.sqrt(((sample[:, None] - sample[None]) ** 2).sum(-1))
    scale = float(np.median(distances[np.triu_indices(len(sample), 1)])) or 1.0
    w = rng.standard_normal((z.shape[1], count)) / scale
    b = rng.uniform(0, 2 * np.pi, count)
    return np.sqrt(2.0 / count) * np.cos(z @ w + b)
