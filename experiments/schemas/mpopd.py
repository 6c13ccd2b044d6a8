"""Schemas of mpopd."""

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
    unit,
)


class Variant(StrEnum):
    opd = "opd"  # on-policy distillation: the student's own samples
    mpopd = "mpopd"  # mixture proposal with a fixed beta
    mpopd_trust_region = "mpopd_trust_region"  # beta from the trust region epsilon
    mpopd_head = "mpopd_head"  # the single-pass proposal head
    seqkd = "seqkd"  # the teacher's samples (sequence-level KD)
    gkd = "gkd"  # generalized KD (mixed on- and off-policy)


@dataclass
class MPOPDConfig(MethodConfig):
    beta: float = unit()  # teacher weight of the geometric mixture proposal
    epsilon: float = nonnegative()  # the trust-region variant's KL budget per prefix
    objective: DistillationLoss = MISSING  # the student's loss
    importance_clip: float | None = positive()  # sampled objective: clip of pi_s / q (null: no IS)
    anneal: bool = MISSING  # anneal beta (epsilon) linearly to 0 over the steps
    head_refresh_every: int = MISSING  # single-pass proposal head (RECON)
    head_refresh_steps: int = MISSING
    lr: float = positive()
    prompts_per_step: int = MISSING
    group_size: int = MISSING
    max_new_tokens: int = MISSING


@dataclass
class MpopdProtocol:
    steps: int = MISSING  # student updates per variant (equal for every variant)
    variants: list[Variant] = MISSING
    eval_prompts: int = MISSING
    eval_every: int = MISSING  # learning curves: evaluate every this many updates (0: off)
    curve_prompts: int = MISSING  # held-out prompts per learning-curve point


@dataclass
class LoopingAdditionConfig(DatasetConfig):
    min_digits: int = MISSING  # prompts have min_digits..max_digits digits; the models
    max_digits: int = MISSING  # train on 1..max_digits
    verbose: bool = MISSING  # the verbose scratchpad (4 tokens per digit: long answers)
    train_examples: int = MISSING
    student_loop_fraction: float = unit()  # the student's shifted pretraining: loops ...
    student_loops_to_limit: bool = MISSING  # ... that run to method.max_new_tokens (no EOS)


PROTOCOL = MpopdProtocol
METHODS = {"mpopd": MPOPDConfig}
DATASETS = {"looping_addition": LoopingAdditionConfig}
