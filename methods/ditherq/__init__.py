"""Dithered quantization with one randomized Hadamard transform (abstract 4).

Rotate with one RHT (O(d log d)), subtract one shared random scalar offset (dither),
scalar-quantize at b bits per coordinate. Claim: the MSE asymptotically matches a truly
random (dense, Haar) rotation; dithered TurboQuant reaches (pi*sqrt(3)/2 + o(1)) 4^-b.
"""

from methods.ditherq.codebooks import lloyd_max_gaussian, panter_dite_bound
from methods.ditherq.hadamard import (
    RandomizedHadamard,
    fwht,
    fwht_torch,
    haar_images,
    haar_rotation,
)
from methods.ditherq.quantizers import QUANTIZERS, quantize_rotated

__all__ = [
    "QUANTIZERS", "RandomizedHadamard", "fwht", "fwht_torch", "haar_images", "haar_rotation",
    "lloyd_max_gaussian", "panter_dite_bound", "quantize_rotated",
]
