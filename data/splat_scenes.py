"""3D Gaussian splat scenes and cameras.

- ``Gaussians`` (positions, (w, x, y, z) quaternions, log-scales, opacity logits, RGB) and
  pinhole ``Camera`` (world-to-camera matrix, x right, y down, z forward);

- ``procedural_scene``: coloured clusters of small opaque Gaussians, faint large background
  blobs and a thin structure (a line of tiny Gaussians), with pinhole cameras on a sphere
  looking at the origin (prescribed views and novel views at other angles);
- ``load_ply`` / ``save_ply``: the 3DGS ``point_cloud.ply`` format (positions, normals,
  degree-0 and higher SH coefficients, opacity as a logit, log-scales, (w, x, y, z)
  quaternions); colour = SH_C0 * f_dc + 0.5;
- ``colmap_cameras``: pinhole cameras from a COLMAP text model (``cameras.txt``,
  ``images.txt``; export binary models with ``colmap model_converter --output_type TXT``),
  every 8th image held out (the 3DGS convention).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from common.errors import UserError

SH_C0 = 0.28209479177387814


@dataclass
class Camera:
    world_to_cam: torch.Tensor  # (4, 4): x right, y down, z forward
    fx: float
    fy: float
    cx: float
    cy: float
    width: int
    height: int

    @staticmethod
    def look_at(eye, target, up, fov_deg: float, width: int, height: int) -> Camera:
        eye, target, up = (torch.as_tensor(v, dtype=torch.float64) for v in (eye, target, up))
        forward = target - eye
        forward = forward / forward.norm()
        right = torch.linalg.cross(forward, up)
        right = right / right.norm()
        down = torch.linalg.cross(forward, right)
        rot = torch.stack([right, down, forward])  # rows: camera axes in world coordinates
        view = torch.eye(4, dtype=torch.float64)
        view[:3, :3] = rot
        view[:3, 3] = -rot @ eye
        focal = 0.5 * width / math.tan(math.radians(fov_deg) / 2)
        return Camera(view.float(), focal, focal, width / 2, height / 2, width, height)


@dataclass
class Gaussians:
    means: torch.Tensor  # (N, 3)
    quats: torch.Tensor  # (N, 4) as (w, x, y, z), any norm
    log_scales: torch.Tensor  # (N, 3)
    opacity_logits: torch.Tensor  # (N,)
    colors: torch.Tensor  # (N, 3) RGB (degree-0 SH already activated)

    def __len__(self) -> int:
        return self.means.shape[0]

    @property
    def opacities(self) -> torch.Tensor:
        return torch.sigmoid(self.opacity_logits)

    def subset(self, index: torch.Tensor) -> Gaussians:
        return Gaussians(*(t[index] for t in (self.means, self.quats, self.log_scales,
                                              self.opacity_logits, self.colors)))

    def detach(self) -> Gaussians:
        return Gaussians(*(t.detach().clone() for t in (self.means, self.quats,
                                                        self.log_scales, self.opacity_logits,
                                                        self.colors)))

    def with_weights_in_opacity(self, weights: torch.Tensor) -> Gaussians:
        """Fold weights into opacity, o' = 1 - (1 - o)^w (exact at the Gaussian's centre; the
        way a weighted coreset is exported to a standard 3DGS file)."""
        folded = 1 - (1 - self.opacities) ** weights
        logit = torch.logit(folded.clamp(1e-6, 1 - 1e-6))
        return replace(self, opacity_logits=logit)


def rotation_matrices(quats: torch.Tensor) -> torch.Tensor:
    w, x, y, z = torch.nn.functional.normalize(quats, dim=-1).unbind(-1)
    return torch.stack([
        1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
        2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
        2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y),
    ], -1).reshape(*quats.shape[:-1], 3, 3)


def _random_quats(rng: np.random.Generator, n: int) -> np.ndarray:
    q = rng.standard_normal((n, 4))
    return q / np.linalg.norm(q, axis=1, keepdims=True)


def procedural_scene(n: int, rng: np.random.Generator, clusters: int = 6,
                     background_fraction: float = 0.15, thin_fraction: float = 0.03,
                     radius: float = 1.0) -> Gaussians:
    n_back = int(round(background_fraction * n))
    n_thin = int(round(thin_fraction * n))
    n_cluster = n - n_back - n_thin
    centres = rng.uniform(-0.55, 0.55, (clusters, 3)) * radius
    palette = rng.uniform(0.1, 0.95, (clusters, 3))
    label = rng.integers(0, clusters, n_cluster)
    means = [centres[label] + 0.12 * radius * rng.standard_normal((n_cluster, 3))]
    scales = [np.log(rng.uniform(0.012, 0.035, (n_cluster, 3)) * radius)]
    opacity = [rng.uniform(0.6, 0.98, n_cluster)]
    colors = [np.clip(palette[label] + 0.05 * rng.standard_normal((n_cluster, 3)), 0, 1)]
    means.append(rng.uniform(-0.9, 0.9, (n_back, 3)) * radius)
    scales.append(np.log(rng.uniform(0.12, 0.3, (n_back, 3)) * radius))
    opacity.append(rng.uniform(0.02, 0.08, n_back))
    colors.append(rng.uniform(0.3, 0.7, (n_back, 3)))
    t = np.linspace(-0.7, 0.7, n_thin)[:, None]
    direction = rng.standard_normal(3)
    direction /= np.linalg.norm(direction)
    means.append(t * direction * radius)
    scales.append(np.log(np.full((n_thin, 3), 0.006 * radius)))
    opacity.append(np.full(n_thin, 0.95))
    colors.append(np.tile([[0.95, 0.95, 0.2]], (n_thin, 1)))
    op = np.concatenate(opacity)
    return Gaussians(
        means=torch.tensor(np.concatenate(means), dtype=torch.float32),
        quats=torch.tensor(_random_quats(rng, n), dtype=torch.float32),
        log_scales=torch.tensor(np.concatenate(scales), dtype=torch.float32),
        opacity_logits=torch.tensor(np.log(op / (1 - op)), dtype=torch.float32),
        colors=torch.tensor(np.concatenate(colors), dtype=torch.float32))


def sphere_cameras(count: int, rng: np.random.Generator, size: int, distance: float = 3.0,
                   fov_deg: float = 50.0) -> list[Camera]:
    """Cameras at random points of a sphere (elevation within +-60 degrees), looking at the
    origin."""
    cams = []
    for _ in range(count):
        azimuth = rng.uniform(0, 2 * math.pi)
        elevation = rng.uniform(-math.pi / 3, math.pi / 3)
        eye = distance * np.array([math.cos(elevation) * math.cos(azimuth),
                                   math.sin(elevation), math.cos(elevation) * math.sin(azimuth)])
        cams.append(Camera.look_at(eye, (0, 0, 0), (0, 1, 0), fov_deg, size, size))
    return cams


# ---------------------------------------------------------------------------- PLY
def _ply_fields(sh_rest: int) -> list[str]:
    return (["x", "y", "z", "nx", "ny", "nz", "f_dc_0", "f_dc_1", "f_dc_2"]
            + [f"f_rest_{i}" for i in range(sh_rest)]
            + ["opacity", "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3"])


def load_ply(path: str | Path) -> tuple[Gaussians, np.ndarray]:
    """A 3DGS PLY: the Gaussians (colour from degree-0 SH) and the raw vertex array (kept to
    save the file back with every field, higher SH included)."""
    from plyfile import PlyData

    path = Path(path)
    if not path.exists():
        raise UserError(f"no 3DGS point cloud at {path}")
    vertex = PlyData.read(str(path))["vertex"].data
    names = vertex.dtype.names
    needed = ["x", "y", "z", "f_dc_0", "opacity", "scale_0", "rot_0"]
    if any(k not in names for k in needed):
        raise UserError(f"{path} is not a 3DGS point cloud (fields {', '.join(needed)} needed)")

    def cols(keys):
        return torch.tensor(np.stack([vertex[k] for k in keys], 1), dtype=torch.float32)

    dc = cols(["f_dc_0", "f_dc_1", "f_dc_2"])
    gaussians = Gaussians(means=cols(["x", "y", "z"]),
                          quats=cols(["rot_0", "rot_1", "rot_2", "rot_3"]),
                          log_scales=cols(["scale_0", "scale_1", "scale_2"]),
                          opacity_logits=torch.tensor(np.asarray(vertex["opacity"]),
                                                      dtype=torch.float32),
                          colors=torch.clamp(SH_C0 * dc + 0.5, 0, 1))
    return gaussians, np.asarray(vertex)


def save_ply(path: str | Path, vertex: np.ndarray) -> None:
    from plyfile import PlyData, PlyElement

    PlyData([PlyElement.describe(vertex, "vertex")]).write(str(path))


def vertex_array(gaussians: Gaussians, sh_rest: int = 0) -> np.ndarray:
    """A 3DGS vertex array for Gaussians with degree-0 colour (higher SH zero)."""
    out = np.zeros(len(gaussians), dtype=[(k, "f4") for k in _ply_fields(sh_rest)])
    g = gaussians.detach()
    dc = (g.colors - 0.5) / SH_C0
    columns = {"x": g.means[:, 0], "y": g.means[:, 1], "z": g.means[:, 2],
               "opacity": g.opacity_logits}
    for i in range(3):
        columns[f"f_dc_{i}"], columns[f"scale_{i}"] = dc[:, i], g.log_scales[:, i]
    for i in range(4):
        columns[f"rot_{i}"] = g.quats[:, i]
    for key, values in columns.items():
        out[key] = values.numpy()
    return out


# ---------------------------------------------------------------------------- COLMAP
def colmap_cameras(folder: str | Path, scale: float = 1.0) -> tuple[list[Camera], list[Camera]]:
    """(training cameras, every 8th image held out) from COLMAP ``cameras.txt`` and
    ``images.txt`` (PINHOLE, SIMPLE_PINHOLE, or the pinhole part of SIMPLE_RADIAL / OPENCV),
    intrinsics scaled by ``scale`` (render at a lower resolution)."""
    folder = Path(folder)
    cam_file, img_file = folder / "cameras.txt", folder / "images.txt"
    if not cam_file.exists() or not img_file.exists():
        raise UserError(f"{folder}: cameras.txt and images.txt needed (a COLMAP text model; "
                        "convert a binary one with colmap model_converter --output_type TXT)")
    intrinsics = {}
    for line in cam_file.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split()
        cam_id, model, width, height = parts[0], parts[1], int(parts[2]), int(parts[3])
        p = [float(v) for v in parts[4:]]
        fx, fy, cx, cy = ((p[0], p[0], p[1], p[2]) if model.startswith("SIMPLE")
                          else (p[0], p[1], p[2], p[3]))
        intrinsics[cam_id] = (fx, fy, cx, cy, width, height)
    lines = [ln for ln in img_file.read_text().splitlines() if ln.strip() and ln[0] != "#"]
    entries = []
    for line in lines[::2]:  # every image has a second line of 2D points
        parts = line.split()
        qw, qx, qy, qz, tx, ty, tz = (float(v) for v in parts[1:8])
        entries.append((parts[9], parts[8], (qw, qx, qy, qz), (tx, ty, tz)))
    cameras = []
    for _, cam_id, quat, trans in sorted(entries):
        fx, fy, cx, cy, width, height = intrinsics[cam_id]
        view = torch.eye(4)
        view[:3, :3] = rotation_matrices(torch.tensor(quat, dtype=torch.float32))
        view[:3, 3] = torch.tensor(trans, dtype=torch.float32)
        cameras.append(Camera(view, fx * scale, fy * scale, cx * scale, cy * scale,
                              max(1, round(width * scale)), max(1, round(height * scale))))
    held_out = [c for i, c in enumerate(cameras) if i % 8 == 0]
    return [c for i, c in enumerate(cameras) if i % 8 != 0], held_out


def scene_and_cameras(cfg, rng: np.random.Generator):
    """(scene, prescribed cameras, novel cameras, scene extent) for a dataset config:
    ``procedural`` (generated) or ``ply`` (a trained point_cloud.ply with a COLMAP text
    model; prescribed = the training cameras, novel = every 8th image)."""
    if cfg.name == "procedural":
        scene = procedural_scene(cfg.gaussians, rng)
        prescribed = sphere_cameras(cfg.prescribed_views, rng, cfg.size, cfg.distance, cfg.fov)
        novel = sphere_cameras(cfg.novel_views, rng, cfg.size, cfg.distance, cfg.fov)
        return scene, prescribed, novel, 1.0
    if cfg.name == "ply":
        scene, _ = load_ply(cfg.path)
        prescribed, novel = colmap_cameras(cfg.colmap, cfg.scale)
        centres = torch.stack([torch.linalg.inv(c.world_to_cam)[:3, 3] for c in prescribed])
        extent = 1.1 * float((centres - centres.mean(0)).norm(dim=1).max())
        return scene, prescribed[:cfg.max_views], novel[:cfg.max_views], extent
    raise UserError(f"unknown splat dataset '{cfg.name}' (procedural, ply)")
