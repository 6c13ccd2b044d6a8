"""Fast Walsh-Hadamard transform, the randomized Hadamard transform, and Haar rotations."""

from __future__ import annotations

from functools import lru_cache

import numpy as np


def next_pow2(d: int) -> int:
    return 1 << max(0, (d - 1).bit_length())


GEMM_MIN_ROWS = 8  # from this many vectors on, the Kronecker (GEMM) form is faster


@lru_cache(maxsize=32)
def sylvester(d: int) -> np.ndarray:
    """The d x d Sylvester-Hadamard matrix (entries +-1), d a power of two."""
    h = np.ones((1, 1))
    while h.shape[0] < d:
        h = np.block([[h, h], [h, -h]])
    return h


def kronecker_factors(d: int) -> tuple[int, int]:
    """(a, b) with a b = d, both powers of two and as equal as possible: H_d = H_a (x) H_b."""
    k = d.bit_length() - 1
    return 1 << (k // 2), 1 << (k - k // 2)


def fwht(x: np.ndarray) -> np.ndarray:
    """Unnormalized Walsh-Hadamard transform along the last axis (Sylvester order).

    Equals ``x @ scipy.linalg.hadamard(d)`` (H is symmetric). A batch of at least
    ``GEMM_MIN_ROWS`` vectors uses the Kronecker form H_d = H_a (x) H_b (d = a b, a ~ b ~
    sqrt d): each vector reshaped to a x b becomes H_a X H_b, two matrix products over the
    whole batch (2 sqrt(d) flops per entry, at GEMM speed); fewer vectors use log2(d)
    butterfly stages, each a vectorized (a + b, a - b) over pairs at distance h. The last
    axis must be a power of two (see :func:`pad_pow2`). Returns a new array.
    """
    x = np.asarray(x, dtype=np.float64)
    d = x.shape[-1]
    if d & (d - 1):
        raise ValueError(f"fwht needs a power-of-two length, got {d}; pad with pad_pow2")
    lead = x.shape[:-1]
    rows = int(np.prod(lead)) if lead else 1
    if rows >= GEMM_MIN_ROWS and d >= 4:  # two large GEMMs: right by H_b, then left by H_a
        a, b = kronecker_factors(d)
        right = (x.reshape(rows * a, b) @ sylvester(b)).reshape(rows, a, b)
        left = right.transpose(0, 2, 1).reshape(rows * b, a) @ sylvester(a)
        return left.reshape(rows, b, a).transpose(0, 2, 1).reshape(*lead, d)
    y = x.copy()
    h = 1
    while h < d:
        v = y.reshape(*lead, d // (2 * h), 2, h)
        a = v[..., 0, :].copy()
        v[..., 0, :] += v[..., 1, :]
        v[..., 1, :] = a - v[..., 1, :]
        h *= 2
    return y


def fwht_torch(x):
    """The same transform in torch (any device, differentiable), last axis power of two,
    in the Kronecker (GEMM) form for batches as :func:`fwht`."""
    import torch

    d = x.shape[-1]
    if d & (d - 1):
        raise ValueError(f"fwht_torch needs a power-of-two length, got {d}")
    lead = x.shape[:-1]
    rows = int(np.prod(lead)) if len(lead) else 1
    if rows >= GEMM_MIN_ROWS and d >= 4:
        a, b = kronecker_factors(d)
        h_a, h_b = (torch.as_tensor(sylvester(n), dtype=x.dtype, device=x.device)
                    for n in (a, b))
        return torch.matmul(h_a, x.reshape(rows, a, b) @ h_b).reshape(*lead, d)
    h = 1
    y = x
    while h < d:
        v = y.reshape(*lead, d // (2 * h), 2, h)
        y = torch.stack((v[..., 0, :] + v[..., 1, :], v[..., 0, :] - v[..., 1, :]), dim=-2)
        y = y.reshape(*lead, d)
        h *= 2
    return y


def pad_pow2(x: np.ndarray) -> np.ndarray:
    """Zero-pad the last axis to the next power of two."""
    d = x.shape[-1]
    D = next_pow2(d)
    if D == d:
        return np.asarray(x, dtype=np.float64)
    return np.concatenate([x, np.zeros((*x.shape[:-1], D - d))], axis=-1)


class RandomizedHadamard:
    """One randomized Hadamard transform y = H D x / sqrt(D), D = diag(random signs).

    Orthogonal, so the inverse is x = D H y / sqrt(D). Inputs of length d that is not a
    power of two are zero-padded to the next power of two (the rotated vector is longer).
    """

    def __init__(self, d: int, rng: np.random.Generator) -> None:
        self.d = d
        self.dim = next_pow2(d)
        self.signs = rng.choice(np.array([-1.0, 1.0]), size=self.dim)

    def forward(self, x: np.ndarray) -> np.ndarray:
        return fwht(pad_pow2(x) * self.signs) / np.sqrt(self.dim)

    def inverse(self, y: np.ndarray) -> np.ndarray:
        return (fwht(y) / np.sqrt(self.dim) * self.signs)[..., : self.d]


def haar_rotation(d: int, rng: np.random.Generator) -> np.ndarray:
    """A Haar-random orthogonal d x d matrix (QR of a Gaussian matrix with sign fix)."""
    q, r = np.linalg.qr(rng.standard_normal((d, d)))
    return q * np.sign(np.diag(r))


def haar_images(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Rows Q x_i for one Haar-random Q, exactly in distribution, in O(d n^2) not O(d^3).

    With X^T = U R (thin QR, U d x n orthonormal), Q X^T = (Q U) R and Q U is a uniformly
    random orthonormal n-frame, i.e. the thin-QR factor of a Gaussian d x n matrix. Used by
    the experiment to afford many dense-rotation trials at d = 1024; since Q is orthogonal the
    reconstruction error can be measured in the rotated space. Tests check this against
    :func:`haar_rotation`.
    """
    x = np.atleast_2d(np.asarray(x, dtype=np.float64))
    n, d = x.shape
    u, r = np.linalg.qr(x.T)  # d x n, n x n
    frame, rr = np.linalg.qr(rng.standard_normal((d, n)))
    frame = frame * np.sign(np.diag(rr))
    return (frame @ r).T
