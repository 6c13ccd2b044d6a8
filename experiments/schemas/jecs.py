"""Method schema of jecs."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from experiments.schemas import MethodConfig


class EnvelopeFamily(Enum):
    polynomial = "polynomial"  # sum_r w_r t^r, w_1 at its bootstrap upper bound (default)
    power = "power"  # t^kappa, kappa at its bootstrap lower bound
    identity = "identity"  # F(t) = t: max-p + Storey-BH


class ThresholdRule(Enum):
    fixed = "fixed"
    median = "median"


@dataclass
class JECSConfig(MethodConfig):
    alpha: float = 0.1  # the GCR level the headline metrics are reported at
    family: EnvelopeFamily = EnvelopeFamily.polynomial
    threshold_rule: ThresholdRule = ThresholdRule.median
    storey_lambda: float = 0.5
    n_boot: int = 200  # bootstrap resamples for the conservative envelope
    randomized_pvalues: bool = False  # randomized tie-breaking (exactly uniform nulls)


METHOD_SCHEMAS = {"jecs": JECSConfig}
