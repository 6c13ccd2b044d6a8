"""Schemas of ditherq: one method schema shared by its five quantizers."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from omegaconf import MISSING

from experiments.schemas.shared import DatasetConfig, MethodConfig, within


class Rotation(StrEnum):
    dense = "dense"  # Haar-random orthogonal matrix, Theta(d^2) per vector
    rht = "rht"  # one randomized Hadamard transform, O(d log d) per vector


# the widest bit-width any quantizer takes (methods/ditherq/quantizers.py, QuantizerSpec)
MAX_BITS = 16


@dataclass
class DitherQuantizerConfig(MethodConfig):
    bits: int | None = within(1, MAX_BITS)  # one bit-width, or null for the protocol's grid
    rotation: Rotation = MISSING
    dither: bool = MISSING


@dataclass
class OneBitQuantizerConfig(DitherQuantizerConfig):
    bits: int | None = within(1, 1)  # RaBitQ is a 1-bit quantizer


@dataclass
class DitherqProtocol:
    bits: list[int] = within(1, MAX_BITS)  # the grid used when method.bits is null
    n_trials: int = MISSING  # independent rotations (and dither offsets) per input
    uniformity_dims: list[int] = MISSING  # powers of 2: dithered TurboQuant's bound at each
    timing_dims: list[int] = MISSING
    timing_batches: list[int] = MISSING  # vectors rotated at once (1: matrix-vector)
    timing_repeats: int = MISSING


@dataclass
class UnitVectorsConfig(DatasetConfig):
    dim: int = MISSING
    n_random: int = MISSING  # Gaussian directions
    n_sparse: int = MISSING  # +-1 on `sparsity` random coordinates
    sparsity: int = MISSING
    n_basis: int = MISSING  # e_0 and random e_j


@dataclass
class NpyVectorsConfig(DatasetConfig):
    path: str = MISSING  # a .npy file of shape (n, d)
    max_rows: int = MISSING


PROTOCOL = DitherqProtocol
METHODS = {**{name: DitherQuantizerConfig for name in
              ("turboquant", "eden_biased", "eden_unbiased", "uniform_sq")},
           "rabitq": OneBitQuantizerConfig}
DATASETS = {"unit_vectors": UnitVectorsConfig, "npy_vectors": NpyVectorsConfig}
