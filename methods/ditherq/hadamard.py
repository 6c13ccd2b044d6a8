"""Fast Walsh-Hadamard transform, the randomized Hadamard transform, and Haar rotations."""

from __future__ import annotations

from functools import lru_cache

import numpy as np


def next_pow2(d: int) -> int:
    return 1 << max(0, (d - 1).bit_length())


@lru_cache(maxsize=32)
def sylvester(d: int) -> np.ndarray:
    """The d x d Sylvester-Hadamard matrix (entries +-1), d a power of two."""
    h = np.ones((1, 1))
    while h.shape[0] < d:
        h = np.block([[h, h], [h, -h]])
    return h


def kronecker_factors(d: int, largest: int = 16) -> list[int]:
    """Powers of two f_1 .. f_m with product d, each <= ``largest`` and as equal as possible:
    H_d = H_{f_1} (x) ... (x) H_{f_m} (Sylvester matrices are Kronecker powers of H_2)."""
    bits = d.bit_length() - 1
    count = max(1, -(-bits // (largest.bit_length() - 1)))
    return [1 << (bits // count + (i < bits % count)) for i in range(count)]


def fwht(x: np.ndarray) -> np.ndarray:
    """Unnormalized Walsh-Hadamard transform along the last axis (Sylvester order).

    Equals ``x @ scipy.linalg.hadamard(d)`` (H is symmetric), computed in the Kronecker form
    H_d = H_{f_1} (x) ... (x) H_{f_m} (factors of at most 16): each vector, reshaped to an
    f_1 x ... x f_m array, is multiplied by H_{f_j} along axis j, one batched matrix product
    per factor (sum of f_j flops per entry, at GEMM speed: 48 for d = 4096 against 4096 for a
    dense rotation), block by block of rows (see :func:`_rowwise`). This is about 10x faster
    than log2(d) vectorized butterfly stages even for a single vector, whose per-stage
    overhead dominates. The last axis must be a power of two (see :func:`pad_pow2`).
    Returns a new array.
    """
    return _rowwise(np.asarray(x, dtype=np.float64))


# Rows per block of a batched transform: at most 1 MiB and 64 rows. Measured at d = 256,
# 1024, 4096 (batch 256, one thread): blocks of 32-64 rows run 3-8x faster per vector than
# blocks of 128 rows or more, which spill the L2 cache.
BLOCK_BYTES = 1 << 20
BLOCK_ROWS = 64


def _rowwise(x: np.ndarray, prepare=None, finish=None) -> np.ndarray:
    """``finish(H prepare(row))`` for every row of x (..., d), where prepare and finish are
    elementwise (the random signs, the scaling) and H the unnormalized Hadamard transform in
    the Kronecker form, one block of rows at a time: each block is small enough that it and
    its temporaries stay in the L2 cache, and is written into one output array. Every row
    goes through the same operations whatever the batch and the block, so a vector's result
    is the same bits alone or in any batch, without batch-sized temporaries (which made a
    batch of 256 at d = 4096 memory-bound).
    """
    d = x.shape[-1]
    if d & (d - 1):
        raise ValueError(f"fwht needs a power-of-two length, got {d}; pad with pad_pow2")
    prepare = prepare or (lambda rows: rows)
    finish = finish or (lambda rows: rows)
    rows = x.reshape(-1, d)
    out = np.empty_like(rows)
    step = max(1, min(BLOCK_ROWS, BLOCK_BYTES // (rows.itemsize * d)))
    for start in range(0, len(rows), step):
        block = rows[start:start + step]
        out[start:start + step] = finish(_kronecker_transform(prepare(block), d, np.matmul))
    return out.reshape(x.shape)


def _kronecker_transform(x, d: int, matmul, as_matrix=lambda m: m):
    """x (rows, d) times H_d, one factor at a time: for factor j the data is viewed as
    (rows * before, f_j, after) and multiplied by H_{f_j} along the middle axis (the last
    factor, with after = 1, as one right product over all rows)."""
    factors = kronecker_factors(d)
    rows, before, after = x.shape[0], d, 1
    y = x
    for f in reversed(factors):
        before //= f
        h = as_matrix(sylvester(f))
        if after == 1:
            y = (y.reshape(rows * before, f) @ h)
        else:
            y = matmul(h, y.reshape(rows * before, f, after))
        after *= f
    return y.reshape(rows, d)


def fwht_torch(x):
    """The same transform in torch (any device, differentiable), last axis a power of two,
    in the Kronecker form of :func:`fwht` over the whole batch at once."""
    import torch

    d = x.shape[-1]
    if d & (d - 1):
        raise ValueError(f"fwht_torch needs a power-of-two length, got {d}")
    lead = x.shape[:-1]
    rows = int(np.prod(lead)) if len(lead) else 1

    def as_tensor(m):
        return torch.as_tensor(m, dtype=x.dtype, device=x.device)

    return _kronecker_transform(x.reshape(rows, d), d, torch.matmul, as_tensor).reshape(*lead, d)


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
        return _rowwise(pad_pow2(x), lambda rows: rows * self.signs,
                        lambda rows: rows / np.sqrt(self.dim))

    def inverse(self, y: np.ndarray) -> np.ndarray:
        y = np.asarray(y, dtype=np.float64)
        return _rowwise(y, finish=lambda rows: rows / np.sqrt(self.dim) * self.signs)[
            ..., : self.d]


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
