"""Schemas of proteinopd."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from omegaconf import MISSING

from experiments.schemas.shared import (
    DatasetConfig,
    DistillationLoss,
    MethodConfig,
    nonnegative,
    positive,
    share,
    unit,
)


class TeacherWeighting(StrEnum):
    static = "static"  # the configured weights at every token
    entropy = "entropy"  # dynamic per-token weights



class Objective(StrEnum):
    thermostability = "thermostability"
    solubility = "solubility"
    stability = "stability"
    charge = "charge"


@dataclass
class ProteinOPDConfig(MethodConfig):
    weights: list[float] = nonnegative()  # teacher weights, one per protocol.objectives entry
    objective: DistillationLoss = MISSING  # the student's OPD loss
    jsd_beta: float = unit()  # generalized JSD's beta (0.5: the official run script)
    weighting: TeacherWeighting = MISSING
    teacher_temperature: float = positive()  # tau_k of log_softmax(z_k / tau_k)
    lr: float = positive()
    sequences_per_step: int = MISSING


@dataclass
class ProteinopdProtocol:
    objectives: list[Objective] = MISSING
    teacher_top_fraction: float = share()  # a teacher finetunes on this top share
    teacher_steps: int = MISSING
    teacher_lr: float = positive()
    teacher_batch_size: int = MISSING  # also sequential finetuning's
    opd_steps: int = MISSING  # student updates of every distillation variant
    rl_steps: int = MISSING  # GRPO updates of the RL baseline
    rl_group_size: int = MISSING
    rl_lr: float = positive()
    rl_kl_beta: float = nonnegative()  # GRPO's KL3 penalty to the base model
    front_kl_betas: list[float] = nonnegative()  # RL's KL weights along the designability
    # front (empty: no front)
    pareto_weights: list[float] = unit()  # w of the first objective along the front
    eval_samples: int = MISSING
    invalid_score: float = MISSING  # design score of a sequence shorter than min_length
    gain_fraction: float = share()  # time-to-gain target: this share of the smaller gain


@dataclass
class SyntheticProteinsConfig(DatasetConfig):
    sequences: int = MISSING
    families: int = MISSING
    concentration: float = positive()  # Dirichlet spread of family compositions (lower: wider)
    min_length: int = MISSING
    max_length: int = MISSING
    seed: int = MISSING  # the corpus is fixed across run seeds


@dataclass
class FastaProteinsConfig(DatasetConfig):
    path: str = MISSING
    min_length: int = MISSING
    max_length: int = MISSING


PROTOCOL = ProteinopdProtocol
METHODS = {"proteinopd": ProteinOPDConfig}
DATASETS = {"synthetic_proteins": SyntheticProteinsConfig, "fasta_proteins": FastaProteinsConfig}
