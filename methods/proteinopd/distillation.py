"""Multi-teacher on-policy distillation into the consensus of preference-specific teachers.

The student samples its own sequences; at every prefix the target is the normalized
geometric consensus g = softmax(sum_k w_k log_softmax(z_k / tau_k)) of the teachers (the
unique minimiser of sum_k w_k KL(q || pi_k)), or, as a baseline, their arithmetic mixture
sum_k w_k pi_k. Weights are static or, as an option of the official code, dynamic per token:
w_k proportional to w_k softmax_k(-H_k / tau_H) (confident teachers count more). The loss is
the post-training core's OPD objective (generalized JSD with beta 0.5 by default, as the
official run script; reverse KL; or the sampled-token policy-gradient form).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np
import torch

from models.lm.post_training import GRPOModule, OPDModule
from models.lm.rollout import completion_logits

MIXTURES = ("geometric", "arithmetic")
WEIGHTINGS = ("static", "entropy")


def teacher_target(teacher_logits: Sequence[torch.Tensor], weights: Sequence[float],
                   mixture: str = "geometric", weighting: str = "static",
                   temperatures: Sequence[float] | None = None,
                   entropy_temperature: float = 1.0) -> torch.Tensor:
    """Log-probabilities (..., V) of the combined teacher at every position."""
    if mixture not in MIXTURES:
        raise ValueError(f"unknown mixture '{mixture}'; known: {', '.join(MIXTURES)}")
    if weighting not in WEIGHTINGS:
        raise ValueError(f"unknown weighting '{weighting}'; known: {', '.join(WEIGHTINGS)}")
    temperatures = temperatures or [1.0] * len(teacher_logits)
    logps = torch.stack([torch.log_softmax(z.float() / t, -1)
                         for z, t in zip(teacher_logits, temperatures, strict=True)])
    w = torch.tensor(list(weights), dtype=logps.dtype, device=logps.device)
    w = (w / w.sum()).view(-1, *([1] * (logps.dim() - 1)))  # (K, 1, ..., 1)
    if weighting == "entropy":
        entropy = -(logps.exp() * logps).sum(-1, keepdim=True)  # (K, ..., 1)
        w = w * torch.softmax(-entropy / entropy_temperature, dim=0)
        w = w / w.sum(0, keepdim=True)
    if mixture == "geometric":
        return torch.log_softmax((w * logps).sum(0), -1)
    return torch.logsumexp(torch.log(w.clamp(min=1e-30)) + logps, dim=0)


COST_UNITS = ("seconds", "sequences", "policy_tokens", "frozen_tokens", "reward_calls")


class _Traced:
    """Records the learning curve: after every step's sampling, the mean design reward of its
    rollouts and the cumulative cost of training so far, in every unit of ``COST_UNITS``:

    - ``seconds``: wall clock since the first step;
    - ``sequences``: sequences sampled from the policy;
    - ``policy_tokens``: policy forward tokens, each completion token sampled once and scored
      once for the update;
    - ``frozen_tokens``: forward tokens of frozen models, ``frozen_per_token`` per completion
      token (the K teachers of OPD; the KL reference of RL when its beta > 0);
    - ``reward_calls``: sequence-level property evaluations, ``rewards_per_sequence`` per
      sequence (RL's reward; OPD's teachers need none).

    The design reward of the curve itself is a measurement, not part of any method's cost."""

    frozen_per_token = 0
    rewards_per_sequence = 0

    def _trace(self, design_reward: Callable[[list[list[int]]], float]) -> None:
        self.design_reward, self.curve, self._started = design_reward, [], None
        self._spent = dict.fromkeys(COST_UNITS[1:], 0)

    def sample(self, batch_idx: int):
        tasks, rollouts = super().sample(batch_idx)
        now = time.perf_counter()
        if self._started is None:
            self._started = now
        sequences, tokens = len(rollouts.sequences), int(rollouts.completion_mask.sum())
        spent = self._spent
        spent["sequences"] += sequences
        spent["policy_tokens"] += 2 * tokens
        spent["frozen_tokens"] += self.frozen_per_token * tokens
        spent["reward_calls"] += self.rewards_per_sequence * sequences
        self.curve.append({"seconds": now - self._started,
                           "reward": self.design_reward(rollouts.completions()), **spent})
        return tasks, rollouts


def cost_to_gain(curve_a: list[dict], curve_b: list[dict], start: float, fraction: float = 0.8,
                 window: int = 10) -> dict:
    """The cost each learning curve (one dict per step: ``reward`` and cumulative costs, see
    ``_Traced``) spends to reach ``start + fraction * gain`` with its moving average over
    ``window`` steps, gain the smaller of the two curves' final gains (mean of their last
    ``window`` steps over ``start``). A curve that never reaches the target counts its whole
    cost (a lower bound: ``reached`` is False). Returns ``target``, ``gain`` and, under
    ``a`` and ``b``, ``reached`` and the cost in every unit the curves record."""
    def smoothed(curve):
        reward = np.array([row["reward"] for row in curve], dtype=float)
        w = min(window, len(reward))  # a curve shorter than the window: its plain mean
        return np.convolve(reward, np.ones(w) / w, mode="valid"), w

    finals = [smoothed(c)[0][-1] - start for c in (curve_a, curve_b)]
    target = start + fraction * min(finals)
    out = {"target": float(target), "gain": float(min(finals))}
    for name, curve in (("a", curve_a), ("b", curve_b)):
        reward, w = smoothed(curve)
        hit = np.nonzero(reward >= target)[0]
        step = hit[0] + w - 1 if len(hit) else len(curve) - 1
        out[name] = {"reached": bool(len(hit)),
                     **{k: float(v) for k, v in curve[step].items() if k != "reward"}}
    return out


class ConsensusOPDModule(_Traced, OPDModule):
    """OPD of the student towards the combined teachers (``teacher_target``)."""

    def __init__(self, student, prompts, teachers, rollout, opd, weights: Sequence[float],
                 design_reward, mixture: str = "geometric", weighting: str = "static",
                 temperatures: Sequence[float] | None = None, seed: int = 0) -> None:
        super().__init__(student, prompts, teachers, rollout, opd, weights, seed=seed)
        self._trace(design_reward)
        self.frozen_per_token = len(self.teachers)
        self.mixture, self.weighting, self.temperatures = mixture, weighting, temperatures

    def teacher_logits(self, rollouts):
        with torch.no_grad():
            logits = [completion_logits(t, rollouts) for t in self.teachers]
        return teacher_target(logits, self.weights, self.mixture, self.weighting,
                              self.temperatures)


class ScalarizedRLModule(_Traced, GRPOModule):
    """The RL-alignment baseline: GRPO on the scalarized reward sum_k w_k z_k (with a KL3
    penalty to ``reference`` when ``grpo.beta`` > 0)."""

    def __init__(self, policy, prompts, rollout, grpo, design_reward, reference=None,
                 seed: int = 0) -> None:
        super().__init__(policy, prompts, lambda task, c: design_reward([c]), rollout, grpo,
                         reference=reference, seed=seed)
        self._trace(design_reward)
        self.frozen_per_token, self.rewards_per_sequence = int(grpo.beta != 0.0), 1
