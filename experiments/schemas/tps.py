"""Method schema of tps."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from experiments.schemas import MethodConfig


class Recalibration(Enum):
    temperature = "temperature"
    platt = "platt"
    isotonic = "isotonic"


@dataclass
class TPSConfig(MethodConfig):
    gamma: float = 0.9  # geometric schedule w_t = (1 - gamma) gamma^t
    n_bootstrap: int = 1000  # paired bootstrap resamples over trajectories
    recalibration: Recalibration = Recalibration.platt  # the map whose effect is reported
    tempered_tau: float = 2.5  # the overconfident predictor: sigmoid(tau logit q)
    noise_sigma: float = 0.7  # the noisy predictor: sigmoid(logit q + sigma eps)


METHOD_SCHEMAS = {"tps": TPSConfig}
