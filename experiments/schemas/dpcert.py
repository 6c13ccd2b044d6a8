"""Method schema of dpcert."""

from __future__ import annotations

from dataclasses import dataclass

from experiments.schemas import MethodConfig


@dataclass
class JointCertificateConfig(MethodConfig):
    smoothing_sigma: float = 0.25  # test-time Gaussian smoothing (and training augmentation)
    confidence_alpha: float = 0.001  # Clopper-Pearson level of each one-sided bound
    # DPA: k models on hash partitions
    partitions: int = 50
    hidden: int = 32
    dpa_steps: int = 300
    dpa_lr: float = 0.01
    dpa_noise_draws: int = 20  # smoothing draws per base model and test point
    # DP-SGD: a population of softmax-regression models (p_A over training randomness)
    dpsgd_models: int = 300
    dpsgd_noise_multiplier: float = 2.0
    dpsgd_clip: float = 1.0
    dpsgd_sampling_rate: float = 0.05
    dpsgd_steps: int = 150
    dpsgd_lr: float = 2.0


METHOD_SCHEMAS = {"joint_certificate": JointCertificateConfig}
