"""Schemas of cfbeam (its datasets and models are the shared LM ones)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from omegaconf import MISSING

from experiments.schemas.shared import MethodConfig


class Filter(Enum):
    none = "none"  # vanilla log-likelihood beam search
    freq = "freq"  # empirical frequency among the parent's N samples >= tau
    prob = "prob"  # model probability pi(token | prefix) >= tau


class Rank(Enum):
    global_ll = "global_ll"
    per_parent = "per_parent"


@dataclass
class BeamConfig(MethodConfig):
    beam_width: int = MISSING
    samples_per_beam: int = MISSING
    filter: Filter = MISSING
    tau: float = MISSING  # the filter threshold (freq: a token must be drawn >= tau N times)
    rank: Rank = MISSING
    bomaj_alpha: float = MISSING  # Best-of-Majority frequency threshold (baseline)
    reward_noise: float = MISSING  # outcome reward r + N(0, reward_noise^2)


@dataclass
class SamplingConfig(MethodConfig):
    n: int = MISSING  # samples per prompt
    alpha: float = MISSING  # Best-of-Majority frequency threshold
    reward_noise: float = MISSING


@dataclass
class TreeConfig:
    coverages: list[int] = MISSING
    hard_steps: int = MISSING
    bon_hard_steps: list[int] = MISSING
    bon_coverage: int = MISSING
    trials: int = MISSING
    survival: float = MISSING
    widths: list[int] = MISSING
    reward_noise: list[float] = MISSING


@dataclass
class CfbeamProtocol:
    tree: TreeConfig = MISSING


PROTOCOL = CfbeamProtocol
METHODS = {"cf_beam": BeamConfig, "ll_beam": BeamConfig, "best_of_n": SamplingConfig,
           "majority_vote": SamplingConfig, "best_of_majority": SamplingConfig}
