"""GRPO with Prospective Hindsight on single- or multi-turn episodes (a GRPOModule whose
samples are episodes and whose advantages are surprise-weighted)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import nn

from methods.prohind.episodes import EPISODE_SAMPLING, run_episodes
from methods.prohind.surprise import (
    episode_confidence,
    ph_advantages,
    prediction_features,
    surprise,
)
from models.lm.post_training import GRPOConfig, GRPOModule, RolloutConfig


@dataclass(frozen=True)
class PHConfig:
    lam: float = 1.0  # 0: the base method exactly
    weighting: str = "multiplicative"
    surprise: str = "abs"
    predictor: str = "token"
    head_lr: float = 0.01  # predictor="head": the success head's learning rate


class PHGRPOModule(GRPOModule):
    """GRPO on ``turns``-attempt episodes; advantages A (1 + lambda sg(|e - p|)) (or the
    configured weighting), p from the episode's first token (or the scalar ``head``, trained
    beside the policy with the logistic loss on the outcomes), e the verified outcome."""

    def __init__(self, policy, prompts, rollout: RolloutConfig, grpo: GRPOConfig,
                 ph: PHConfig, turns: int, max_digits: int, seed: int = 0) -> None:
        rollout = replace(rollout, sampling=EPISODE_SAMPLING)
        super().__init__(policy, prompts, lambda task, c: float(task.correct(c)), rollout,
                         grpo, seed=seed, shape_advantages=self.weight)
        self.ph, self.turns, self.max_digits = ph, turns, max_digits
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

    def sample(self, batch_idx: int):
        tasks = list(self.prompts(batch_idx, self.generator))
        repeated = [t for t in tasks for _ in range(self.rollout.group_size)]
        was_training = self.policy.training
        self.policy.eval()
        rollouts = run_episodes(self.policy, repeated, self.turns, self.max_digits,
                                self.generator, self.rollout.sampling)
        self.policy.train(was_training)
        return repeated, rollouts

    def weight(self, tasks, rollouts, rewards: torch.Tensor, advantages: torch.Tensor
               ) -> torch.Tensor:
        if self.head is not None:
            features = prediction_features(self.policy, rollouts)
            self._head_batch = (features, rewards)
            with torch.no_grad():
                p = torch.sigmoid(self.head(features.to(self.head.weight.device)))[:, 0].cpu()
        else:
            p = episode_confidence(self.policy, rollouts, self.ph.predictor)
        return ph_advantages(advantages, surprise(rewards, p, self.ph.surprise), self.ph.lam,
                             self.ph.weighting)
