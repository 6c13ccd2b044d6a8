"""Schemas of dpcert (its datasets are the shared image datasets)."""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import MISSING

from experiments.schemas.shared import MethodConfig, nonnegative, open_unit, positive, share


@dataclass
class JointCertificateConfig(MethodConfig):
    smoothing_sigma: float = positive()  # test-time Gaussian smoothing (and augmentation)
    confidence_alpha: float = open_unit()  # Clopper-Pearson level of each one-sided bound
    partitions: int = MISSING  # DPA: k models on hash partitions
    hidden: int = MISSING
    dpa_steps: int = MISSING
    dpa_lr: float = positive()
    dpa_noise_draws: int = MISSING  # smoothing draws per base model and test point
    dpsgd_models: int = MISSING  # a population of softmax-regression models
    dpsgd_noise_multiplier: float = nonnegative()
    dpsgd_clip: float = positive()
    dpsgd_sampling_rate: float = share()
    dpsgd_steps: int = MISSING
    dpsgd_lr: float = positive()


@dataclass
class TriggerConfig:
    target: int = MISSING  # the attacker's label
    poisoned: int = MISSING  # triggered training points inserted: the certified poisoning budget
    size: int = MISSING  # patch side in pixels
    train_l2_norm: float = positive()  # the trigger's norm on the poisoned training points
    radius_step: float = positive()  # the grid of each test trigger's certified radius


@dataclass
class DpcertProtocol:
    r_values_dpa: list[int] = MISSING
    r_values_dpsgd: list[int] = MISSING
    radii: list[float] = nonnegative()
    trigger: TriggerConfig = MISSING


PROTOCOL = DpcertProtocol
METHODS = {"joint_certificate": JointCertificateConfig}
