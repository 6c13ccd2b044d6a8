"""GRPO with Prospective Hindsight on single- or multi-turn episodes (a GRPOModule whose
samples are episodes and whose advantages are surprise-weighted)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from methods.prohind.episodes import EPISODE_SAMPLING, run_episodes
from methods.prohind.surprise import episode_confidence, ph_advantages, surprise
from models.lm.post_training import GRPOConfig, GRPOModule, RolloutConfig


@dataclass(frozen=True)
class PHConfig:
    lam: float = 1.0  # 0: the base method exactly
    weighting: str = "multiplicative"
    surprise: str = "abs"
    predictor: str = "token"


class PHGRPOModule(GRPOModule):
    """GRPO on ``turns``-attempt episodes; advantages A (1 + lambda sg(|e - p|)) (or the
    configured weighting), p from the episode's first token, e the verified outcome."""

    def __init__(self, policy, prompts, rollout: RolloutConfig, grpo: GRPOConfig,
                 ph: PHConfig, turns: int, max_digits: int, seed: int = 0) -> None:
        rollout = replace(rollout, sampling=EPISODE_SAMPLING)
        super().__init__(policy, prompts, lambda task, c: float(task.correct(c)), rollout,
                         grpo, seed=seed, shape_advantages=self.weight)
        self.ph, self.turns, self.max_digits = ph, turns, max_digits

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
        p = episode_confidence(self.policy, rollouts, self.ph.predictor)
        return ph_advantages(advantages, surprise(rewards, p, self.ph.surprise), self.ph.lam,
                             self.ph.weighting)
