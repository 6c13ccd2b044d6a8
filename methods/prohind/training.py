"""Prospective Hindsight on GRPO, on on-policy distillation (OPD) or on their combination,
over single- or multi-turn episodes: a GRPOModule whose samples are episodes and whose
advantages are the base method's, surprise-weighted.

Bases (the advantage enters GRPO's clipped surrogate, one gradient step per generation):
- ``grpo``: A_i, the group advantage of the episode's outcome;
- ``opd``: A_t = -(log pi_s - log pi_T) per generated token (the sampled-token reverse-KL
  advantage of on-policy distillation towards the frozen ``teacher``; its gradient equals
  ``sampled_token_opd_loss``'s);
- ``grpo_opd``: A_i + ``distill_weight`` A_t.
PH multiplies the base advantage by (1 + lambda sg(s_i)) (or the configured weighting),
s_i = |e_i - p_i| broadcast over the episode's tokens; lambda = 0 is the base exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import nn

from methods.prohind.episodes import EpisodeFormat, run_episodes
from methods.prohind.surprise import (
    episode_confidence,
    head_confidence,
    ph_advantages,
    prediction_features,
    surprise,
)
from models.lm.objectives import opd_token_advantages
from models.lm.post_training import GRPOConfig, GRPOModule, RolloutConfig
from models.lm.rollout import teacher_forced_logprobs

BASES = ("grpo", "opd", "grpo_opd")


@dataclass(frozen=True)
class PHConfig:
    lam: float = 1.0  # 0: the base method exactly
    weighting: str = "multiplicative"
    surprise: str = "abs"
    predictor: str = "token"
    head_lr: float = 0.01  # predictor="head": the success head's learning rate
    base: str = "grpo"  # grpo | opd | grpo_opd
    distill_weight: float = 1.0  # grpo_opd: weight of the distillation advantage


class PHModule(GRPOModule):
    """The base method on ``turns``-attempt episodes with surprise-weighted advantages;
    p from the episode's first token, the probing question or the scalar ``head`` (trained
    beside the policy with the logistic loss on the outcomes), e the verified outcome."""

    def __init__(self, policy, prompts, rollout: RolloutConfig, grpo: GRPOConfig,
                 ph: PHConfig, turns: int, fmt: EpisodeFormat, teacher=None, seed: int = 0
                 ) -> None:
        if ph.base not in BASES:
            raise ValueError(f"unknown base '{ph.base}'; known: {', '.join(BASES)}")
        if ph.base != "grpo" and teacher is None:
            raise ValueError(f"base '{ph.base}' distils from a teacher; none was given")
        rollout = replace(rollout, sampling=fmt.sampling)
        super().__init__(policy, prompts, lambda task, c: float(task.correct(c)), rollout,
                         grpo, seed=seed)
        self.ph, self.turns, self.fmt = ph, turns, fmt
        self.teacher = teacher.requires_grad_(False).eval() if teacher is not None else None
        self.head = nn.Linear(policy.config.hidden_size, 1) if ph.predictor == "head" else None
        if self.head is not None:
            nn.init.zeros_(self.head.weight)  # p = 0.5 until outcomes are seen
            nn.init.zeros_(self.head.bias)
        self._head_batch = None

    def parameter_groups(self) -> list[dict]:
        groups = super().parameter_groups()
        if self.head is not None:  # its own learning rate
            groups.append({"params": self.head.parameters(), "lr": self.ph.head_lr})
        return groups

    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        if self.head is None:
            return loss
        features, outcomes = self._head_batch
        logits = self.head(features.to(self.head.weight.device))[:, 0]
        return loss + nn.functional.binary_cross_entropy_with_logits(
            logits, outcomes.to(logits.device).float())

    def generate(self, tasks: list, batch_idx: int):
        return run_episodes(self.policy, tasks, self.turns, self.fmt, self.generator)

    def base_advantages(self, tasks, rollouts, rewards: torch.Tensor, logps: torch.Tensor
                        ) -> torch.Tensor:
        """(B,) for GRPO (its group advantages), (B, T) with distillation."""
        group = super().advantages(tasks, rollouts, rewards, logps)
        if self.ph.base == "grpo":
            return group
        with torch.no_grad():
            teacher = teacher_forced_logprobs(self.teacher, rollouts, self.rollout.sampling)
        distill = opd_token_advantages(logps, teacher.to(logps.device)).cpu()
        if self.ph.base == "opd":
            return distill
        return group[:, None] + self.ph.distill_weight * distill

    def prediction(self, tasks, rollouts, rewards: torch.Tensor) -> torch.Tensor:
        """The prospective p of each episode (the head's features kept for its loss)."""
        if self.head is None:
            return episode_confidence(self.policy, tasks, rollouts, self.fmt, self.ph.predictor)
        features = prediction_features(self.policy, rollouts)
        self._head_batch = (features, rewards)
        return head_confidence(self.head, features)

    def advantages(self, tasks, rollouts, rewards: torch.Tensor, logps: torch.Tensor
                   ) -> torch.Tensor:
        base = self.base_advantages(tasks, rollouts, rewards, logps)
        s = surprise(rewards, self.prediction(tasks, rollouts, rewards), self.ph.surprise)
        return ph_advantages(base, s if base.dim() == 1 else s[:, None], self.ph.lam,
                             self.ph.weighting)
