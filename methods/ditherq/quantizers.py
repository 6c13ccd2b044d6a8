"""Scalar quantizers applied to rotated vectors, with and without a shared dither.

Every quantizer works on the normalized rotated coordinates u = sqrt(D) y / ||y|| (about
N(0,1) each) and reconstructs y_hat = S * u_hat * ||y|| / sqrt(D):

==============  =========================  ===========================================
quantizer       codebook (dither off)      scale S
==============  =========================  ===========================================
turboquant      Lloyd-Max for N(0,1)       1 (TurboQuant-mse)
eden_biased     Lloyd-Max for N(0,1)       <u, u_hat> / ||u_hat||^2 (EDEN, MSE-optimal)
eden_unbiased   Lloyd-Max for N(0,1)       ||u||^2 / <u, u_hat> (EDEN, unbiased)
rabitq          sign(u), 1 bit only        ||u||^2 / <u, u_hat> (RaBitQ's <x,q> estimator)
uniform_sq      uniform on [-c_b, c_b]     1 (c_b minimizes the N(0,1) MSE)
==============  =========================  ===========================================

Dither on (RECON: the paper's exact construction is not public; this is the reading whose
high-rate MSE is exactly the abstract's pi*sqrt(3)/2 * 4^-b): map u through a compander G
to z in (0, 1) (G = Phi(u / sqrt 3) for the Gaussian codebooks, the linear map of
[-c_b, c_b] for uniform_sq), subtract ONE shared scalar offset s ~ U[0, Delta) per vector
(Delta = 2^-b), round to the grid, add s back, and reconstruct at the midpoint of the cell
clipped to [0, 1] (unclipped edge cells map to +-infinity). The offset is shared randomness
(a seed), not stored; the grid then has up to 2^b + 1 occupied cells, so a dithered code
costs log2(2^b + 1) bits per coordinate (:func:`bits_per_coordinate`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from methods.ditherq.codebooks import (
    gaussian_compander,
    gaussian_expander,
    lloyd_max_gaussian,
    uniform_clip_gaussian,
    uniform_levels,
)


@dataclass(frozen=True)
class QuantizerSpec:
    codebook: str  # "lloyd_max" | "sign" | "uniform"
    scale: str  # "none" | "biased" | "unbiased"
    max_bits: int = 16


QUANTIZERS: dict[str, QuantizerSpec] = {
    "turboquant": QuantizerSpec("lloyd_max", "none"),
    "eden_biased": QuantizerSpec("lloyd_max", "biased"),
    "eden_unbiased": QuantizerSpec("lloyd_max", "unbiased"),
    "rabitq": QuantizerSpec("sign", "unbiased", max_bits=1),
    "uniform_sq": QuantizerSpec("uniform", "none"),
}


def bits_per_coordinate(bits: int, dither: bool) -> float:
    """Storage per coordinate: b without dither, log2(2^b + 1) with (one extra edge cell)."""
    return float(np.log2(2**bits + 1)) if dither else float(bits)


def _codebook_quantize(u: np.ndarray, codebook: str, bits: int) -> np.ndarray:
    if codebook == "sign":
        return np.where(u >= 0, 1.0, -1.0)
    if codebook == "lloyd_max":
        bounds, levels = lloyd_max_gaussian(bits)
    else:
        bounds, levels = uniform_levels(bits, uniform_clip_gaussian(bits))
    idx = np.searchsorted(bounds[1:-1], u)
    return levels[idx]


def _dithered_quantize(u: np.ndarray, codebook: str, bits: int, offset: np.ndarray
                       ) -> np.ndarray:
    step = 2.0**-bits
    if codebook == "uniform":
        clip = uniform_clip_gaussian(bits)
        z = np.clip((u + clip) / (2 * clip), 0.0, 1.0)
    else:
        z = gaussian_compander(u)
    z = np.minimum(z, np.nextafter(1.0, 0.0))
    s = offset[:, None]
    k = np.floor((z - s) / step)
    lo = np.maximum(s + k * step, 0.0)
    hi = np.minimum(s + (k + 1) * step, 1.0)
    z_hat = (lo + hi) / 2
    if codebook == "uniform":
        return z_hat * 2 * clip - clip
    return gaussian_expander(z_hat)


def quantize_rotated(y: np.ndarray, quantizer: str, bits: int, dither: bool,
                     rng: np.random.Generator) -> np.ndarray:
    """Quantize and dequantize rotated vectors (rows of ``y``); returns y_hat, same shape.

    ``rng`` draws the shared dither offset, one scalar per row (unused without dither).
    """
    if quantizer not in QUANTIZERS:
        raise ValueError(f"unknown quantizer '{quantizer}'; known: {sorted(QUANTIZERS)}")
    spec = QUANTIZERS[quantizer]
    if not 1 <= bits <= spec.max_bits:
        raise ValueError(f"{quantizer} supports 1..{spec.max_bits} bits, got {bits}")
    y = np.atleast_2d(np.asarray(y, dtype=np.float64))
    n, dim = y.shape
    norms = np.linalg.norm(y, axis=1, keepdims=True)
    safe = np.where(norms > 0, norms, 1.0)
    u = y * np.sqrt(dim) / safe
    if dither:
        u_hat = _dithered_quantize(u, spec.codebook, bits, rng.uniform(0, 2.0**-bits, size=n))
    else:
        u_hat = _codebook_quantize(u, spec.codebook, bits)
    if spec.scale == "biased":
        scale = np.sum(u * u_hat, 1, keepdims=True) / np.sum(u_hat**2, 1, keepdims=True)
    elif spec.scale == "unbiased":
        scale = np.sum(u * u, 1, keepdims=True) / np.sum(u * u_hat, 1, keepdims=True)
    else:
        scale = 1.0
    return np.where(norms > 0, scale * u_hat * safe / np.sqrt(dim), 0.0)
