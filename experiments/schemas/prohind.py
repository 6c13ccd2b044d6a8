"""Schemas of prohind."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from omegaconf import MISSING

from experiments.schemas.shared import DatasetConfig, MethodConfig, nonnegative, positive, unit


class Weighting(StrEnum):
    multiplicative = "multiplicative"  # A (1 + lambda sg(s)), the paper's
    additive = "additive"  # A - lambda sg(s) (RLCR-style shaping)
    normalized = "normalized"  # A sg(s) / mean(s)


class SurpriseKind(StrEnum):
    abs = "abs"
    squared = "squared"
    log = "log"


class Predictor(StrEnum):
    token = "token"  # p = k / 9 of the sampled <conf_k>
    expected = "expected"  # its expectation under the policy
    yes_probability = "yes_probability"  # P(YES) after the probing question
    head = "head"  # a scalar head on the hidden state, trained on the outcomes


class Base(StrEnum):
    grpo = "grpo"
    opd = "opd"  # on-policy distillation from a teacher (sampled-token advantage)
    grpo_opd = "grpo_opd"  # their sum


class Episode(StrEnum):
    tool = "tool"  # call the lookup tool, answer, retry after WRONG
    retry = "retry"  # answer, retry after WRONG



class RewardScaling(StrEnum):
    group = "group"
    batch = "batch"
    none = "none"  # Bereket-Leskovec ablation



class LossType(StrEnum):
    """How GRPO's per-token loss is averaged (models/lm/objectives.py ``aggregate``)."""

    grpo = "grpo"  # per sequence, then over sequences
    bnpo = "bnpo"  # over all tokens of the batch
    dapo = "dapo"  # over all tokens of the batch (DAPO's token-level average)
    dr_grpo = "dr_grpo"  # divided by a fixed maximum length


@dataclass
class PHMethodConfig(MethodConfig):
    base: Base = MISSING  # the retrospective base method PH weights
    distill_weight: float = nonnegative()  # grpo_opd: weight of the distillation advantage
    teacher_noise: float = unit()  # opd bases: the teacher's SFT noise (lower: better)
    teacher_steps: int = positive()  # opd bases, tiny-lm: the teacher's SFT steps
    lam: float = nonnegative()  # the headline lambda (ece_ph, acc_ph)
    weighting: Weighting = MISSING
    surprise: SurpriseKind = MISSING
    predictor: Predictor = MISSING
    head_lr: float = positive()  # predictor=head: the success head's learning rate
    scale_rewards: RewardScaling = MISSING
    loss_type: LossType = MISSING
    lr: float = positive()
    prompts_per_step: int = MISSING
    group_size: int = MISSING


@dataclass
class ProhindProtocol:
    steps: int = MISSING  # GRPO steps per variant
    lambdas: list[float] = nonnegative()  # PH strengths compared with GRPO (lambda = 0)
    turns_multi: int = MISSING  # answer attempts of a multi-turn episode
    episode_multi: Episode = MISSING  # the multi-turn environment (tool: tiny-lm only; a
    # real model runs the retry episode)
    eval_prompts: int = MISSING  # held-out problems (one episode each)


@dataclass
class ConfidenceAdditionConfig(DatasetConfig):
    digits: list[int] = MISSING  # the graded difficulties (number of digits)
    train_examples: int = MISSING
    noise: float = unit()  # SFT: sum digits replaced at random with this probability
    confidence_low: int = MISSING  # SFT: <conf_k> uniform in [low, high], unrelated to
    confidence_high: int = MISSING  # the problem (an uncalibrated start)
    retry_fraction: float = unit()  # SFT: share of two-attempt traces
    tool_fraction: float = unit()  # SFT: share of tool-episode traces
    probe_fraction: float = unit()  # SFT: share of probing-question answers (P(YES) =
    # the stated confidence, as uncalibrated as the token)


PROTOCOL = ProhindProtocol
# one schema, three bases (ph_opd and ph_grpo_opd set method.base)
METHODS = {"ph_grpo": PHMethodConfig, "ph_opd": PHMethodConfig, "ph_grpo_opd": PHMethodConfig}
DATASETS = {"confidence_addition": ConfidenceAdditionConfig}
