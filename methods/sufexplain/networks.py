"""Models as sums of small ReLU networks, in numpy, for verification.

A ``ReluNet`` is a list of affine layers with ReLU between them (none after the last); it
reads the input coordinates ``inputs``. An ``AdditiveModel`` is f(z) = bias + sum of its
terms: a NAM has one one-input term per feature, an NA2M adds one two-input term per edge
of its interaction graph, and a plain MLP is a single term reading every feature. The
prediction is sign f(x); the margin of a point is y f(x) with y = sign f(x).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class ReluNet:
    weights: list[np.ndarray]  # (out, in) per layer
    biases: list[np.ndarray]  # (out,) per layer
    inputs: tuple[int, ...]  # the model-input coordinates this net reads

    def __call__(self, z: np.ndarray) -> np.ndarray:
        """(B,) outputs for (B, n_features) inputs."""
        return self.forward(z[:, list(self.inputs)])

    def forward(self, h: np.ndarray, depth: int | None = None) -> np.ndarray:
        """Outputs (B,) for (B, len(inputs)) own inputs; with ``depth``, the pre-activations
        (B, units) of hidden layer ``depth`` instead."""
        last = len(self.weights) - 1 if depth is None else depth
        for k in range(last + 1):
            h = h @ self.weights[k].T + self.biases[k]
            if k < last:
                h = np.maximum(h, 0.0)
        return h[:, 0] if depth is None else h

    def fix(self, keep: int, values: dict[int, float]) -> ReluNet:
        """The one-input net of coordinate ``keep`` with the other inputs fixed."""
        w0, b0 = self.weights[0], self.biases[0].copy()
        for pos, coord in enumerate(self.inputs):
            if coord != keep:
                b0 = b0 + w0[:, pos] * values[coord]
        col = self.inputs.index(keep)
        return ReluNet([w0[:, [col]], *self.weights[1:]], [b0, *self.biases[1:]], (keep,))


@dataclass
class AdditiveModel:
    n_features: int
    bias: float
    terms: list[ReluNet]
    edges: list[tuple[int, int]] = field(default_factory=list)  # the interaction graph

    def __call__(self, z: np.ndarray) -> np.ndarray:
        z = np.atleast_2d(z)
        return self.bias + sum(t(z) for t in self.terms)

    def terms_touching(self, features: set[int]) -> list[ReluNet]:
        return [t for t in self.terms if features & set(t.inputs)]


def exact_min_1d(nets: list[ReluNet], lo: float, hi: float) -> float:
    """Exact minimum over [lo, hi] of a sum of one-input ReLU nets (all reading the same
    coordinate). The sum is piecewise linear: each layer's pre-activations are linear
    between the breakpoints found so far, so their zero crossings are found exactly by
    interpolation; the minimum lies at a breakpoint or an end."""
    points = np.array([lo, hi], dtype=float)
    for net in nets:
        for depth in range(len(net.weights) - 1):
            h = net.forward(points[:, None], depth)
            left, right = h[:-1], h[1:]
            cross = (left * right) < 0
            t = np.where(cross, left / np.where(cross, left - right, 1.0), 0.0)
            new = (points[:-1, None] + t * (points[1:, None] - points[:-1, None]))[cross]
            points = np.unique(np.concatenate([points, new]))
    values = sum(net.forward(points[:, None]) for net in nets)
    return float(np.min(values))


def exact_min_planar(nets: list[ReluNet], free: list[int], x: np.ndarray, lo: np.ndarray,
                     hi: np.ndarray) -> float | None:
    """Exact minimum of a sum of one-hidden-layer ReLU nets over the box of at most two
    ``free`` coordinates (the others fixed at ``x``); None when a net is deeper.

    The sum is linear on every cell of the arrangement of the hidden units' lines (and the
    box faces), so the minimum is at a vertex: an intersection of two of those lines inside
    the box (one coordinate: a unit's zero or an end)."""
    if len(free) > 2 or any(len(net.weights) != 2 for net in nets):
        return None
    d = len(free)
    normals, offsets = [], []
    for k, coord in enumerate(free):  # box faces: z_k = lo, z_k = hi
        for end in (lo[coord], hi[coord]):
            normals.append(np.eye(d)[k])
            offsets.append(-end)
    for net in nets:
        w, b = net.weights[0], net.biases[0].copy()
        normal = np.zeros((w.shape[0], d))
        for pos, coord in enumerate(net.inputs):
            if coord in free:
                normal[:, free.index(coord)] = w[:, pos]
            else:
                b = b + w[:, pos] * x[coord]
        normals.extend(normal)
        offsets.extend(b)
    normals, offsets = np.array(normals), np.array(offsets)
    if d == 1:
        keep = np.abs(normals[:, 0]) > 1e-12
        points = (-offsets[keep] / normals[keep, 0])[:, None]
    else:
        i, j = np.triu_indices(len(normals), 1)
        a = np.stack([normals[i], normals[j]], axis=1)  # (pairs, 2, 2)
        det = np.linalg.det(a)
        ok = np.abs(det) > 1e-12
        rhs = -np.stack([offsets[i], offsets[j]], axis=1)[ok][..., None]
        points = np.linalg.solve(a[ok], rhs)[..., 0]
    box_lo, box_hi = lo[free], hi[free]
    tol = 1e-9 * (1 + np.abs(box_hi - box_lo))
    points = points[((points >= box_lo - tol) & (points <= box_hi + tol)).all(axis=1)]
    points = np.clip(points, box_lo, box_hi)
    z = np.repeat(x[None].astype(float), len(points), axis=0)
    z[:, free] = points
    return float(sum(net(z) for net in nets).min())
