"""Schemas of cfbeam (its datasets and models are the shared LM ones)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from omegaconf import MISSING

from experiments.schemas.shared import MethodConfig, nonnegative, open_unit, unit


class Filter(StrEnum):
    none = "none"  # vanilla log-likelihood beam search
    freq = "freq"  # empirical frequency among the parent's N samples >= tau
    prob = "prob"  # model probability pi(token | prefix) >= tau


class Rank(StrEnum):
    global_ll = "global_ll"
    per_parent = "per_parent"


@dataclass
class BeamConfig(MethodConfig):
    beam_width: int = MISSING
    samples_per_beam: int = MISSING
    filter: Filter = MISSING
    tau: float = unit()  # the filter threshold (freq: a token must be drawn >= tau N times)
    rank: Rank = MISSING
    bomaj_alpha: float = unit()  # Best-of-Majority frequency threshold (baseline)
    reward_noise: float = nonnegative()  # outcome reward r + N(0, reward_noise^2)


@dataclass
class SamplingConfig(MethodConfig):
    n: int = MISSING  # samples per prompt
    alpha: float = unit()  # Best-of-Majority frequency threshold
    reward_noise: float = nonnegative()


@dataclass
class TreeConfig:
    coverages: list[int] = MISSING  # token-level coverage C of the hard instance
    hard_steps: int = MISSING
    stochastic_branching: int = MISSING  # tokens per dead node of the stochastic-lure instance
    trials: int = MISSING  # searches per grid point
    survival: float = unit()  # target survival rate of y*
    widths: list[int] = MISSING  # beam widths B on the grid
    samples: list[int] = MISSING  # per-beam samples N (the cap for adaptive sampling)
    bootstrap: int = MISSING  # resamples for the slope intervals
    filter: Filter = MISSING  # CF-Beam's filter on the tree (RECON)
    tau: float = unit()  # its fixed threshold (configured, never read from the instance)
    rank: Rank = MISSING
    stop_mass: float = unit()  # adaptive sampling: stop when P(top token) >= stop_mass ...
    stop_alpha: float = open_unit()  # ... at one-sided confidence 1 - stop_alpha
    bon_hard_steps: list[int] = MISSING
    bon_coverage: int = MISSING
    reward_noise: list[float] = nonnegative()


@dataclass
class CfbeamProtocol:
    tree: TreeConfig = MISSING


PROTOCOL = CfbeamProtocol
METHODS = {"cf_beam": BeamConfig, "ll_beam": BeamConfig, "best_of_n": SamplingConfig,
           "majority_vote": SamplingConfig, "best_of_majority": SamplingConfig}
