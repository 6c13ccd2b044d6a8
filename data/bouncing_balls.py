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
  walls and floor and where no contact happens within a frame, detected from the velocity
  turning back from a wall (where the ballistic model holds),
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
    step = np.linalg.norm(np.diff(c, axis=-2), axis=-1).max(-1)
    teleport = np.maximum(step - world.max_speed - world.g, 0)
    mass_change = np.abs(mass - mass[..., :1]).max(-1) / np.maximum(mass[..., 0], 1e-6)
    return acceleration_error(world, c) + teleport + mass_change


def acceleration_error(world: BallWorld, centres: np.ndarray) -> np.ndarray:
    """Mean |a_y - g| + |a_x| per trajectory (..., frames, 2) over the frames where the
    ballistic model holds: the frame and its two neighbours keep the ball clear of the walls
    by a margin, and no contact happens within a frame of it (:func:`contact_frames`). A
    trajectory with no such frame scores 0."""
    c = centres
    acc = c[..., 2:, :] - 2 * c[..., 1:-1, :] + c[..., :-2, :]
    margin = world.radius + 1.0
    lo, hi = margin, world.size - 1 - margin
    clear = ((c[..., :, 0] > lo) & (c[..., :, 0] < hi) & (c[..., :, 1] > lo)
             & (c[..., :, 1] < hi))
    ok = clear[..., 2:] & clear[..., 1:-1] & clear[..., :-2] & ~contact_frames(world, c)
    dev = np.abs(acc[..., 1] - world.g) + np.abs(acc[..., 0])
    return (dev * ok).sum(-1) / np.maximum(ok.sum(-1), 1)


def contact_frames(world: BallWorld, centres: np.ndarray, slack: float = 1.0) -> np.ndarray:
    """(..., frames - 2) True for the second differences that a wall or floor contact may
    touch. Free flight changes the velocity towards a wall by exactly +g per frame (floor),
    -g (ceiling) or 0 (side walls); a contact takes away more than that (a rebound reverses
    it, a rebound late in the frame interval only slows it), while the ball is within one
    frame's travel (plus ``slack`` px for tracking error) of that wall. A contact between
    frames t and t + 1 bends the differences centred at t and t + 1 and may show at either,
    so each detected contact also marks its two neighbours. A change must fall short of free
    flight's by more than g / 2 (above the tracker's noise, below any rebound's). Rebounds
    that happen between two frames clear of the walls (fast floor bounces) are what this adds to
    the margin test; an apex or a noisy track next to a wall at worst leaves a frame out.
    """
    c = centres
    before = c[..., 1:-1, :] - c[..., :-2, :]
    after = c[..., 2:, :] - c[..., 1:-1, :]
    reach = np.maximum(np.abs(before), np.abs(after)) + slack
    low, high = world.radius, world.size - 1 - world.radius
    free_change = np.array([0.0, world.g])  # of the velocity along +x, +y per frame
    contact = np.zeros(c.shape[:-2] + (c.shape[-2] - 2,), dtype=bool)
    for direction, distance in ((1.0, high - c[..., 1:-1, :]), (-1.0, c[..., 1:-1, :] - low)):
        towards_before, towards_after = direction * before, direction * after
        slowed = towards_after - towards_before < direction * free_change - world.g / 2
        contact |= ((towards_before > 0) & slowed & (distance <= reach)).any(-1)
    marked = contact.copy()
    marked[..., 1:] |= contact[..., :-1]
    marked[..., :-1] |= contact[..., 1:]
    return marked
