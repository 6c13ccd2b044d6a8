"""A differentiable CPU rasterizer for 3D Gaussian splats in plain torch, following the 3DGS
forward kernel and gsplat's reference projection:

- world -> camera (x right, y down, z forward), pinhole projection with gsplat's clamp of
  x/z and y/z to 1.3 x the field of view; 2D covariance J W Sigma W^T J^T plus 0.3 I (the
  anti-aliasing blur); conic = inverse 2D covariance; radius = ceil(3 sqrt(lambda_max));
  Gaussians with depth outside (near, far) are culled;
- tiles of ``tile`` x ``tile`` pixels, each with the Gaussians whose 3-sigma box touches it,
  in front-to-back depth order;
- alpha = min(0.99, o exp(-sigma)) with sigma = 1/2 d^T conic d at pixel centres (+0.5);
  skipped when sigma < 0 or alpha < 1/255; per-Gaussian weights w enter as
  1 - (1 - alpha)^w (the form gsplat uses for its ``ratio``), applied after the clamp;
- front-to-back compositing C = sum c_i alpha_i T_i that stops before the Gaussian that
  would take the transmittance below 1e-4, on a background colour.

``optical_depth`` gives tau_i(r) = -log(1 - alpha_i(r)) for every ray and Gaussian (the
additive objective F(r) = sum_i tau_i(r) = -log T(r) without the early stop).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from data.splat_scenes import Camera, Gaussians, rotation_matrices

ALPHA_MAX = 0.99
ALPHA_MIN = 1.0 / 255.0
T_STOP = 1e-4
BLUR = 0.3
NEAR, FAR = 0.01, 1e10


def covariances(gaussians: Gaussians) -> torch.Tensor:
    """Sigma = R S S^T R^T."""
    m = rotation_matrices(gaussians.quats) * torch.exp(gaussians.log_scales)[..., None, :]
    return m @ m.transpose(-1, -2)


@dataclass
class Projected:
    means2d: torch.Tensor  # (N, 2) pixels
    conics: torch.Tensor  # (N, 3): a, b, c of [[a, b], [b, c]]
    radii: torch.Tensor  # (N,) pixels, 0 = culled
    depths: torch.Tensor  # (N,)
    cov2d: torch.Tensor  # (N, 2, 2) with the blur


def project(gaussians: Gaussians, camera: Camera) -> Projected:
    view = camera.world_to_cam.to(gaussians.means)
    rot, trans = view[:3, :3], view[:3, 3]
    mean_c = gaussians.means @ rot.T + trans
    cov_c = rot @ covariances(gaussians) @ rot.T
    tx, ty, tz = mean_c.unbind(-1)
    tan_x, tan_y = 0.5 * camera.width / camera.fx, 0.5 * camera.height / camera.fy
    lim_x_pos = (camera.width - camera.cx) / camera.fx + 0.3 * tan_x
    lim_x_neg = camera.cx / camera.fx + 0.3 * tan_x
    lim_y_pos = (camera.height - camera.cy) / camera.fy + 0.3 * tan_y
    lim_y_neg = camera.cy / camera.fy + 0.3 * tan_y
    safe_z = torch.where(tz.abs() < 1e-6, torch.full_like(tz, 1e-6), tz)
    tx_c = safe_z * torch.clamp(tx / safe_z, -lim_x_neg, lim_x_pos)
    ty_c = safe_z * torch.clamp(ty / safe_z, -lim_y_neg, lim_y_pos)
    zeros = torch.zeros_like(tz)
    jac = torch.stack([camera.fx / safe_z, zeros, -camera.fx * tx_c / safe_z ** 2,
                       zeros, camera.fy / safe_z, -camera.fy * ty_c / safe_z ** 2],
                      -1).reshape(-1, 2, 3)
    cov2d = jac @ cov_c @ jac.transpose(-1, -2) + BLUR * torch.eye(2).to(mean_c)
    a, b, c = cov2d[:, 0, 0], cov2d[:, 0, 1], cov2d[:, 1, 1]
    det = a * c - b * b
    valid = (det > 0) & (tz > NEAR) & (tz < FAR)
    safe_det = torch.where(valid, det, torch.ones_like(det))
    conics = torch.stack([c / safe_det, -b / safe_det, a / safe_det], -1)
    half = 0.5 * (a + c)
    radii = torch.ceil(3 * torch.sqrt(half + torch.sqrt(torch.clamp(half * half - det, min=0.01))))
    radii = torch.where(valid, radii, torch.zeros_like(radii)).detach()
    means2d = torch.stack([camera.fx * tx / safe_z + camera.cx,
                           camera.fy * ty / safe_z + camera.cy], -1)
    return Projected(means2d, conics, radii, tz, cov2d)


def _alphas(proj: Projected, opacities: torch.Tensor, index: torch.Tensor,
            pixels: torch.Tensor) -> torch.Tensor:
    """alpha of Gaussians ``index`` at ``pixels`` (P, 2), clamped and cut, (P, n)."""
    d = pixels[:, None, :] - proj.means2d[index][None]
    conic = proj.conics[index]
    sigma = (0.5 * (conic[:, 0] * d[..., 0] ** 2 + conic[:, 2] * d[..., 1] ** 2)
             + conic[:, 1] * d[..., 0] * d[..., 1])
    alpha = torch.clamp(opacities[index] * torch.exp(-sigma), max=ALPHA_MAX)
    keep = (sigma >= 0) & (alpha >= ALPHA_MIN)
    return torch.where(keep, alpha, torch.zeros_like(alpha))


def _tiles(proj: Projected, camera: Camera, tile: int):
    """(pixel centres, flat pixel ids, Gaussians touching the tile in depth order) per tile."""
    order = torch.argsort(proj.depths.detach())
    order = order[proj.radii[order] > 0]
    mx, my = proj.means2d[order, 0].detach(), proj.means2d[order, 1].detach()
    r = proj.radii[order]
    for y0 in range(0, camera.height, tile):
        for x0 in range(0, camera.width, tile):
            x1, y1 = min(x0 + tile, camera.width), min(y0 + tile, camera.height)
            hit = (mx + r >= x0) & (mx - r <= x1) & (my + r >= y0) & (my - r <= y1)
            ys, xs = torch.meshgrid(torch.arange(y0, y1), torch.arange(x0, x1), indexing="ij")
            pixels = torch.stack([xs.reshape(-1), ys.reshape(-1)], -1).to(proj.means2d) + 0.5
            yield pixels, (ys * camera.width + xs).reshape(-1), order[hit]


def composite(alpha: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Front-to-back blending weights alpha_i T_i (P, n) of depth-ordered alphas and the
    final transmittance (P,), stopping before the Gaussian that would take T below 1e-4
    (T only decreases, so everything after the first such Gaussian is dropped)."""
    alive = torch.cumprod(1 - alpha, dim=1) >= T_STOP
    alpha = torch.where(alive, alpha, torch.zeros_like(alpha))
    before = torch.cumprod(torch.cat([torch.ones_like(alpha[:, :1]), 1 - alpha[:, :-1]], 1), 1)
    return alpha * before, before[:, -1] * (1 - alpha[:, -1])


def blending_statistics(gaussians: Gaussians, camera: Camera, tile: int = 16) -> dict:
    """Per-Gaussian sums over the camera's pixels where it is composited: blending weight
    alpha T (Mini-Splatting), hits x opacity (LightGaussian) and hits x opacity x T (the
    later rasterizer's variant)."""
    with torch.no_grad():
        proj = project(gaussians, camera)
        opacities = gaussians.opacities
        n = len(gaussians)
        out = {k: torch.zeros(n) for k in ("blend", "hit_opacity", "hit_opacity_t")}
        for pixels, _, index in _tiles(proj, camera, tile):
            if index.numel() == 0:
                continue
            alpha = _alphas(proj, opacities, index, pixels)
            contrib, _ = composite(alpha)
            hit = contrib > 0
            before = torch.where(hit, contrib / alpha.clamp(min=1e-12), 0.0)
            out["blend"].index_add_(0, index, contrib.sum(0))
            out["hit_opacity"].index_add_(0, index, (hit * opacities[index]).sum(0))
            out["hit_opacity_t"].index_add_(0, index, (before * opacities[index]).sum(0))
    return out


def render(gaussians: Gaussians, camera: Camera, weights: torch.Tensor | None = None,
           background: float = 0.0, tile: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    """Image (H, W, 3) and final transmittance (H, W)."""
    proj = project(gaussians, camera)
    opacities = gaussians.opacities
    n_pixels = camera.height * camera.width
    image = torch.full((n_pixels, 3), float(background), dtype=gaussians.means.dtype)
    trans = torch.ones(n_pixels, dtype=gaussians.means.dtype)
    image_parts, trans_parts, ids = [], [], []
    for pixels, flat, index in _tiles(proj, camera, tile):
        ids.append(flat)
        if index.numel() == 0:
            image_parts.append(image[flat])
            trans_parts.append(trans[flat])
            continue
        alpha = _alphas(proj, opacities, index, pixels)
        if weights is not None:  # unit weights leave alpha bit-identical
            w = weights[index][None]
            alpha = torch.where(w == 1, alpha, 1 - (1 - alpha) ** w)
        contrib, final_t = composite(alpha)
        image_parts.append(contrib @ gaussians.colors[index] + background * final_t[:, None])
        trans_parts.append(final_t)
    flat = torch.cat(ids)
    image = torch.zeros_like(image).index_copy(0, flat, torch.cat(image_parts))
    trans = torch.zeros_like(trans).index_copy(0, flat, torch.cat(trans_parts))
    return image.reshape(camera.height, camera.width, 3), trans.reshape(camera.height,
                                                                         camera.width)


def optical_depth(gaussians: Gaussians, camera: Camera, tile: int = 16) -> torch.Tensor:
    """tau (H*W, N): -log(1 - alpha_i(r)) for every pixel ray r of the camera (rows in
    row-major pixel order) and Gaussian i; zero where the Gaussian does not reach the ray."""
    with torch.no_grad():
        proj = project(gaussians, camera)
        opacities = gaussians.opacities
        tau = torch.zeros(camera.height * camera.width, len(gaussians),
                          dtype=gaussians.means.dtype)
        for pixels, flat, index in _tiles(proj, camera, tile):
            if index.numel():
                alpha = _alphas(proj, opacities, index, pixels)
                tau[flat[:, None], index[None, :]] = -torch.log1p(-alpha)
    return tau


def render_gsplat(gaussians: Gaussians, camera: Camera, weights: torch.Tensor | None = None,
                  background: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """The same image through gsplat's CUDA rasterizer (``pip install gsplat``, a CUDA
    device): weights folded into opacity (exact at the Gaussians' centres), the 0.3 blur.
    gsplat clamps alpha at 0.999 where the 3DGS kernel (and this rasterizer) use 0.99, so
    nearly opaque centres differ slightly."""
    try:
        from gsplat import rasterization
    except ImportError as err:
        from common.errors import UserError

        raise UserError("the gsplat backend needs `pip install gsplat` and a CUDA device") \
            from err
    g = gaussians if weights is None else gaussians.with_weights_in_opacity(weights)
    device = g.means.device
    k = torch.tensor([[camera.fx, 0, camera.cx], [0, camera.fy, camera.cy], [0, 0, 1.0]],
                     device=device)
    image, alpha, _ = rasterization(
        g.means, torch.nn.functional.normalize(g.quats, dim=-1), torch.exp(g.log_scales),
        g.opacities, g.colors, camera.world_to_cam[None].to(device), k[None], camera.width,
        camera.height, eps2d=BLUR, packed=False,
        backgrounds=torch.full((1, 3), float(background), device=device))
    return image[0], 1 - alpha[0, ..., 0]
