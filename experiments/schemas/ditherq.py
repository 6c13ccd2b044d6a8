"""Method schemas of ditherq (one schema shared by its five quantizers)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from experiments.schemas import MethodConfig


class Rotation(Enum):
    dense = "dense"  # Haar-random orthogonal matrix, Theta(d^2) per vector
    rht = "rht"  # one randomized Hadamard transform, O(d log d) per vector


@dataclass
class DitherQuantizerConfig(MethodConfig):
    bits: int | None = None  # one bit-width, or None for the protocol's grid (1..6)
    rotation: Rotation = Rotation.rht
    dither: bool = True


METHOD_SCHEMAS = {name: DitherQuantizerConfig for name in
                  ("turboquant", "eden_biased", "eden_unbiased", "rabitq", "uniform_sq")}
