"""Bouncing-ball clips, controlled physics corruptions, and a physics evaluator.

A clip is ``frames`` grayscale ``size`` x ``size`` images of one Gaussian ball (radius
``radius`` px) under gravity ``g`` (px / frame^2, +y is down), bouncing off the floor with
restitution ``restitution`` and elastically off the side walls; the state is integrated in
``substeps`` steps per frame. The condition (image-to-video) is the first two frames.

Corruptions of a real clip (the same initial state): ``reverse_gravity`` (g -> -g),
``teleport`` (the ball jumps by 5-8 px from a random frame on), ``shuffle`` (frames after the
first two permuted), ``vanish`` (the ball fades out from a random frame on) and
``velocity_jump`` (the velocity is redrawn at a random frame).

Physics error (RECON of the notes' evaluator; lower = more plausible): from the
intensity-weighted centroids and the total intensity ("mass") per frame,
- acceleration: mean |a_y - g| + |a_x| over frames whose neighbours keep the ball off the
  walls and floor (where the ballistic model holds),
- teleport: the excess of the largest per-frame step over the largest possible speed,
- mass: the relative change of total intensity,
summed with unit weights (px / frame^2, px, fraction).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CORRUPTIONS = ("reverse_gravity", "teleport", "shuffle", "vanish", "velocity_jump")


@dataclass(frozen=True)
class BallWorld:
    frames: int = 8
    size: int = 16
    radius: float = 1.4
    g: float = 0.35
    restitution: float = 0.85
    substeps: int = 8
    max_speed: float = 2.5


def simulate(world: BallWorld, n: int, rng: np.random.Generator,
             gravity_sign: float = 1.0, jump_frame: np.ndarray | None = None) -> np.ndarray:
    """(n, frames, 2) ball centres (x, y) in pixels."""
    s = world.size
    lo, hi = world.radius, s - 1 - world.radius
    pos = np.stack([rng.uniform(lo + 1, hi - 1, n), rng.uniform(lo + 0.5, hi - 3, n)], 1)
    vel = np.stack([rng.uniform(-1.2, 1.2, n), rng.uniform(-1.0, 0.8, n)], 1)
    out = np.zeros((n, world.frames, 2))
    dt = 1.0 / world.substeps
    for t in range(world.frames):
        out[:, t] = pos
        if jump_frame is not None:
            redraw = jump_frame == t + 1
            vel[redraw] = np.stack([rng.uniform(-1.5, 1.5, redraw.sum()),
                                    rng.uniform(-1.5, 1.5, redraw.sum())], 1)
        for _ in range(world.substeps):
            vel[:, 1] += gravity_sign * world.g * dt
            pos = pos + vel * dt
            for axis, bounce in ((0, 1.0), (1, world.restitution)):
                low, high = pos[:, axis] < lo, pos[:, axis] > hi
                pos[low, axis] = 2 * lo - pos[low, axis]
                pos[high, axis] = 2 * hi - pos[high, axis]
                vel[low | high, axis] *= -bounce
    return out


def render(world: BallWorld, centres: np.ndarray, brightness: np.ndarray | None = None
           ) -> np.ndarray:
    """(n, frames, size, size) images of Gaussian balls in [0, 1]."""
    grid = np.arange(world.size, dtype=np.float64)
    dx = grid[None, None, None, :] - centres[..., 0, None, None]
    dy = grid[None, None, :, None] - centres[..., 1, None, None]
    img = np.exp(-(dx**2 + dy**2) / (2 * world.radius**2))
    if brightness is not None:
        img = img * brightness[..., None, None]
    return img.astype(np.float32)


def real_clips(world: BallWorld, n: int, rng: np.random.Generator) -> np.ndarray:
    return render(world, simulate(world, n, rng))


def corrupt(world: BallWorld, kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` clips with the physics violation ``kind`` (the first two frames stay valid)."""
    t = world.frames
    if kind == "reverse_gravity":
        return render(world, simulate(world, n, rng, gravity_sign=-1.0))
    if kind == "velocity_jump":
        return render(world, simulate(world, n, rng, jump_frame=rng.integers(2, t, n)))
    centres = simulate(world, n, rng)
    start = rng.integers(2, t, n)
    after = np.arange(t)[None, :] >= start[:, None]
    if kind == "teleport":
        angle = rng.uniform(0, 2 * np.pi, n)
        jump = rng.uniform(5, 8, n)[:, None] * np.stack([np.cos(angle), np.sin(angle)], 1)
        moved = np.clip(centres + jump[:, None], world.radius, world.size - 1 - world.radius)
        return render(world, np.where(after[..., None], moved, centres))
    if kind == "vanish":
        return render(world, centres, np.where(after, 0.0, 1.0))
    if kind == "shuffle":
        clips = render(world, centres)
        for k in range(n):
            clips[k, 2:] = clips[k, 2 + rng.permutation(t - 2)]
        return clips
    raise ValueError(f"unknown corruption '{kind}'; known: {', '.join(CORRUPTIONS)}")


def track(video: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(centroids (..., frames, 2), masses (..., frames)) of intensity-weighted centres."""
    v = np.clip(video, 0, None)
    mass = v.sum((-1, -2))
    grid = np.arange(video.shape[-1])
    x = (v.sum(-2) * grid).sum(-1) / np.maximum(mass, 1e-6)
    y = (v.sum(-1) * grid).sum(-1) / np.maximum(mass, 1e-6)
    return np.stack([x, y], -1), mass


def physics_error(world: BallWorld, video: np.ndarray) -> np.ndarray:
    """Per clip (..., frames, H, W) -> (...): ballistic acceleration error + teleport excess
    + relative mass change."""
    c, mass = track(video)
    acc = c[..., 2:, :] - 2 * c[..., 1:-1, :] + c[..., :-2, :]
    margin = world.radius + 1.0
    lo, hi = margin, world.size - 1 - margin
    free = ((c[..., :, 0] > lo) & (c[..., :, 0] < hi) & (c[..., :, 1] > lo)
            & (c[..., :, 1] < hi))
    ok = free[..., 2:] & free[..., 1:-1] & free[..., :-2]
    dev = np.abs(acc[..., 1] - world.g) + np.abs(acc[..., 0])
    accel = (dev * ok).sum(-1) / np.maximum(ok.sum(-1), 1)
    step = np.linalg.norm(np.diff(c, axis=-2), axis=-1).max(-1)
    teleport = np.maximum(step - world.max_speed - world.g, 0)
    mass_change = np.abs(mass - mass[..., :1]).max(-1) / np.maximum(mass[..., 0], 1e-6)
    return accel + teleport + mass_change
