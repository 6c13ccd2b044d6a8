"""Method schemas of cfbeam."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from experiments.schemas import MethodConfig


class Filter(Enum):
    none = "none"  # vanilla log-likelihood beam search
    freq = "freq"  # empirical frequency among the parent's N samples >= tau
    prob = "prob"  # model probability pi(token | prefix) >= tau


class Rank(Enum):
    global_ll = "global_ll"
    per_parent = "per_parent"


@dataclass
class BeamConfig(MethodConfig):
    beam_width: int = 4
    samples_per_beam: int = 4
    filter: Filter = Filter.freq
    tau: float = 0.25  # the filter threshold (freq: a token must be drawn >= tau N times)
    rank: Rank = Rank.global_ll
    bomaj_alpha: float = 0.2  # Best-of-Majority frequency threshold (baseline)
    reward_noise: float = 0.0  # outcome reward r + N(0, reward_noise^2)


@dataclass
class SamplingConfig(MethodConfig):
    n: int = 16  # samples per prompt
    alpha: float = 0.2  # Best-of-Majority frequency threshold
    reward_noise: float = 0.0


METHOD_SCHEMAS = {"cf_beam": BeamConfig, "ll_beam": BeamConfig, "best_of_n": SamplingConfig,
                  "majority_vote": SamplingConfig, "best_of_majority": SamplingConfig}
