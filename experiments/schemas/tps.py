"""Schemas of tps."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from omegaconf import MISSING

from experiments.schemas.shared import (
    DatasetConfig,
    MethodConfig,
    nonnegative,
    open_unit,
    positive,
    within,
)


class Recalibration(StrEnum):
    temperature = "temperature"
    platt = "platt"
    isotonic = "isotonic"


@dataclass
class TPSConfig(MethodConfig):
    gamma: float = within(0, 1, high_open=True)  # geometric schedule w_t = (1 - gamma) gamma^t
    n_bootstrap: int = MISSING  # paired bootstrap resamples over trajectories
    recalibration: Recalibration = MISSING  # the map whose effect is reported
    tempered_tau: float = positive()  # the overconfident predictor: sigmoid(tau logit q)
    noise_sigma: float = nonnegative()  # the noisy predictor: sigmoid(logit q + sigma eps)


@dataclass
class GamblersRuinConfig(DatasetConfig):
    n: int = MISSING
    up: int = MISSING
    down: int = MISSING


@dataclass
class PolyaUrnConfig(DatasetConfig):
    n: int = MISSING
    red: float = nonnegative()
    blue: float = nonnegative()
    horizon: int = MISSING


@dataclass
class HiddenBernoulliConfig(DatasetConfig):
    n: int = MISSING
    alpha: float = positive()
    beta: float = positive()
    horizon: int = MISSING


@dataclass
class AgentLogConfig(DatasetConfig):
    path: str = MISSING  # JSONL, one line per step


@dataclass
class TpsProtocol:
    calibration_fraction: float = open_unit()  # held-out trajectories for base rate and recal
    censoring_design: HiddenBernoulliConfig = MISSING  # the designed censoring case


PROTOCOL = TpsProtocol
METHODS = {"tps": TPSConfig}
DATASETS = {"gamblers_ruin": GamblersRuinConfig, "polya_urn": PolyaUrnConfig,
            "hidden_bernoulli": HiddenBernoulliConfig, "agent_log": AgentLogConfig}
