"""Schemas of jecs."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from omegaconf import MISSING

from experiments.schemas.shared import DatasetConfig, MethodConfig, open_unit, unit, within


class EnvelopeFamily(StrEnum):
    polynomial = "polynomial"  # sum_r w_r t^r, w_1 at its bootstrap upper bound (default)
    power = "power"  # t^kappa, kappa at its bootstrap lower bound
    identity = "identity"  # F(t) = t: max-p + Storey-BH


class ThresholdRule(StrEnum):
    fixed = "fixed"
    median = "median"


class MembershipDesign(StrEnum):
    independent = "independent"  # membership independent across models
    one_model = "one_model"  # each contaminated item is contaminated for exactly one model


class Tail(StrEnum):
    gaussian = "gaussian"
    cauchy = "cauchy"
    student_t = "student_t"  # Student t with 1.5 degrees of freedom
    uniform = "uniform"  # light-tailed
    mixed = "mixed"  # Cauchy for even-numbered models, Gaussian for odd ones


@dataclass
class JECSConfig(MethodConfig):
    alpha: float = open_unit()  # the GCR level the headline metrics are reported at
    family: EnvelopeFamily = MISSING
    threshold_rule: ThresholdRule = MISSING
    storey_lambda: float = within(0, 1, high_open=True)
    n_boot: int = MISSING  # bootstrap resamples for the conservative envelope
    randomized_pvalues: bool = MISSING  # randomized tie-breaking (exactly uniform nulls)
    tail_check_level: float = unit()  # below it, the right tail is polluted: identity envelope


@dataclass
class DesignConfig:
    design: MembershipDesign = MISSING
    rho: float = within(-1, 1)  # cross-model correlation of the (Gaussian) score noise
    clean_tail: Tail = MISSING  # law of non-member scores
    member_tail: Tail = MISSING  # law of member scores (and of the known members)


@dataclass
class JecsProtocol:
    repetitions: int = MISSING  # synthetic audits per design
    alphas: list[float] = open_unit()
    designs: dict[str, DesignConfig] = MISSING


@dataclass
class MembershipScoresConfig(DatasetConfig):
    n_items: int = MISSING
    n_models: int = MISSING
    rate_low: float = unit()  # per-model contamination rates evenly spaced in [low, high]
    rate_high: float = unit()
    shift: float = MISSING  # member scores N(shift, 1), clean N(0, 1)
    n_calibration: int = MISSING  # known members per model


@dataclass
class LMMembershipConfig(DatasetConfig):
    n_items: int = MISSING
    length: int = MISSING  # tokens per item
    vocab: int = MISSING
    n_models: int = MISSING
    rate_low: float = unit()
    rate_high: float = unit()
    k_percent: float = within(0, 100, low_open=True)  # Min-K% Prob


PROTOCOL = JecsProtocol
METHODS = {"jecs": JECSConfig}
DATASETS = {"membership_scores": MembershipScoresConfig, "lm_membership": LMMembershipConfig}
