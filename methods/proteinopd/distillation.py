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


class _Traced:
    """Records (wall-clock seconds since the first step, mean design reward of the step's
    rollouts) at every step in ``curve``: the learning curve in time."""

    def _trace(self, design_reward: Callable[[list[list[int]]], float]) -> None:
        self.design_reward, self.curve, self._started = design_reward, [], None

    def sample(self, batch_idx: int):
        tasks, rollouts = super().sample(batch_idx)
        now = time.perf_counter()
        if self._started is None:
            self._started = now
        self.curve.append((now - self._started, self.design_reward(rollouts.completions())))
        return tasks, rollouts


def time_to_gain(curve_a: list, curve_b: list, start: float, fraction: float = 0.8,
                 window: int = 10) -> dict:
    """Wall-clock seconds each learning curve ((seconds, reward) per step, moving average
    over ``window`` steps) needs to reach ``start + fraction * gain``, gain the smaller of
    the two curves' final gains (mean of their last ``window`` steps over ``start``);
    speedup = seconds of b / seconds of a. A curve that never reaches the target counts
    its whole duration (then the speedup is a lower bound: ``b_reached`` is False)."""
    def smoothed(curve):
        t, r = np.array(curve, dtype=float).T
        w = min(window, len(r))  # a curve shorter than the window: its plain mean
        return t, np.convolve(r, np.ones(w) / w, mode="valid"), t[w - 1:]

    finals = [smoothed(c)[1][-1] - start for c in (curve_a, curve_b)]
    target = start + fraction * min(finals)
    seconds, reached = [], []
    for curve in (curve_a, curve_b):
        t, r, t_valid = smoothed(curve)
        hit = np.nonzero(r >= target)[0]
        reached.append(bool(len(hit)))
        seconds.append(float(t_valid[hit[0]] if len(hit) else t[-1]))
    return {"target": float(target), "opd_seconds": seconds[0], "rl_seconds": seconds[1],
            "speedup": seconds[1] / max(seconds[0], 1e-9), "rl_reached": reached[1],
            "opd_reached": reached[0], "gain": float(min(finals))}


class ConsensusOPDModule(_Traced, OPDModule):
    """OPD of the student towards the combined teachers (``teacher_target``)."""

    def __init__(self, student, prompts, teachers, rollout, opd, weights: Sequence[float],
                 design_reward, mixture: str = "geometric", weighting: str = "static",
                 temperatures: Sequence[float] | None = None, seed: int = 0) -> None:
        super().__init__(student, prompts, teachers, rollout, opd, weights, seed=seed)
        self._trace(design_reward)
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
