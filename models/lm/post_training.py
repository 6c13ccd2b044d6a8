"""On-policy post-training as Lightning modules: GRPO and on-policy distillation (OPD),
trained through the one trainer factory (``trainer=gpu|ddp|fsdp`` scale them). SFT on
prompt/response pairs is ``train_causal_lm`` on ``sft_examples`` (``models/lm/training.py``).

Each optimizer step draws a fresh batch of prompts, samples rollouts from the current
policy (one gradient step per generation, so the old log-probs are the current ones,
detached, as in TRL), scores them and takes one step on the objective.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import lightning as L
import torch

from models.lm.objectives import (
    generalized_jsd,
    geometric_consensus,
    group_advantages,
    grpo_loss,
    reverse_kl,
    sampled_token_opd_loss,
)
from models.lm.rollout import (
    Rollouts,
    Sampling,
    completion_logits,
    sample_rollouts,
    teacher_forced_logprobs,
)
from models.trainer import Compute, make_trainer, step_indices

# prompt source: (step, generator) -> prompts, each with ``prompt_ids``
PromptSource = Callable[[int, torch.Generator], Sequence]


@dataclass
class RolloutConfig:
    prompts_per_step: int = 8
    group_size: int = 8  # completions per prompt
    max_new_tokens: int = 16
    sampling: Sampling = field(default_factory=Sampling)
    eos_id: int | None = None
    pad_id: int = 0
    lr: float = 1e-4
    warmup_steps: int = 10  # linear learning-rate warm-up (Adam's first steps are large)


@dataclass
class GRPOConfig:
    scale_rewards: str = "group"  # group | batch | none
    loss_type: str = "dapo"  # grpo | bnpo | dr_grpo | dapo
    epsilon_low: float = 0.2
    epsilon_high: float = 0.2
    beta: float = 0.0  # weight of KL3 to the reference model


@dataclass
class OPDConfig:
    objective: str = "reverse_kl"  # reverse_kl | jsd | sampled
    beta: float = 1.0  # generalized JSD's beta (0 forward KL, 1 reverse KL)
    # sampled objective on rollouts from a proposal q other than the student: per-token
    # importance weights pi_s / q clipped at this value (None: no weights)
    importance_clip: float | None = None


class _OnPolicyModule(L.LightningModule):
    def __init__(self, policy, prompts: PromptSource, rollout: RolloutConfig, seed: int) -> None:
        super().__init__()
        self.policy, self.prompts, self.rollout = policy, prompts, rollout
        self.generator = torch.Generator().manual_seed(seed)
        self.history: list[dict[str, float]] = []

    def sample(self, batch_idx: int) -> tuple[list, Rollouts]:
        """A step's prompts, each repeated for its group, and their rollouts (the policy in
        eval mode while it generates)."""
        tasks = list(self.prompts(batch_idx, self.generator))
        repeated = [t for t in tasks for _ in range(self.rollout.group_size)]
        was_training = self.policy.training
        self.policy.eval()
        rollouts = self.generate(repeated, batch_idx)
        self.policy.train(was_training)
        return repeated, rollouts

    def generate(self, tasks: list, batch_idx: int) -> Rollouts:
        """Rollouts of ``tasks`` from the policy; subclasses generate otherwise (multi-turn
        episodes, other proposals)."""
        return sample_rollouts(self.policy, [t.prompt_ids for t in tasks],
                               self.rollout.max_new_tokens, self.rollout.sampling,
                               self.rollout.eos_id, self.rollout.pad_id, self.generator)

    def parameter_groups(self) -> list[dict]:
        """What the optimizer trains: the policy (subclasses add their own heads)."""
        return [{"params": self.policy.parameters()}]

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.parameter_groups(), lr=self.rollout.lr)
        warmup = max(1, self.rollout.warmup_steps)
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: min(1.0, (step + 1) / warmup))
        return {"optimizer": optimizer,
                "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


class GRPOModule(_OnPolicyModule):
    """GRPO with an outcome ``reward(task, completion) -> float``. Subclasses may override
    ``advantages`` (per sample or per token: Prospective Hindsight's surprise weighting, a
    distillation term) and ``generate`` (multi-turn episodes)."""

    def __init__(self, policy, prompts: PromptSource, reward: Callable, rollout: RolloutConfig,
                 grpo: GRPOConfig, reference=None, seed: int = 0) -> None:
        super().__init__(policy, prompts, rollout, seed)
        self.reward, self.grpo, self.reference = reward, grpo, reference

    def advantages(self, tasks: list, rollouts: Rollouts, rewards: torch.Tensor,
                   logps: torch.Tensor) -> torch.Tensor:
        """(B,) or (B, T) advantages of the rollouts; GRPO's group advantages here."""
        return group_advantages(rewards, self.rollout.group_size, self.grpo.scale_rewards)

    def training_step(self, batch, batch_idx):
        tasks, rollouts = self.sample(batch_idx)
        rewards = torch.tensor([float(self.reward(t, c)) for t, c in
                                zip(tasks, rollouts.completions(), strict=True)])
        logps = teacher_forced_logprobs(self.policy, rollouts, self.rollout.sampling)
        advantages = self.advantages(tasks, rollouts, rewards, logps).to(self.device)
        ref = None
        if self.grpo.beta != 0.0:
            with torch.no_grad():
                ref = teacher_forced_logprobs(self.reference, rollouts, self.rollout.sampling)
        loss = grpo_loss(logps, logps.detach(), advantages,
                         rollouts.completion_mask.to(self.device),
                         self.grpo.epsilon_low, self.grpo.epsilon_high, self.grpo.beta, ref,
                         self.grpo.loss_type, self.rollout.max_new_tokens)
        groups = rewards.view(-1, self.rollout.group_size)
        self.history.append({"reward": float(rewards.mean()), "loss": float(loss.detach()),
                             "zero_variance_groups": float((groups.std(1) == 0).float().mean())})
        return loss


class OPDModule(_OnPolicyModule):
    """On-policy distillation of ``policy`` (the student) towards one or several frozen
    teachers (their weighted geometric consensus when several)."""

    def __init__(self, policy, prompts: PromptSource, teachers: Sequence, rollout: RolloutConfig,
                 opd: OPDConfig, teacher_weights: Sequence[float] | None = None,
                 seed: int = 0) -> None:
        super().__init__(policy, prompts, rollout, seed)
        self.teachers = list(teachers)
        self.weights = list(teacher_weights or [1.0 / len(self.teachers)] * len(self.teachers))
        self.opd = opd

    def teacher_logits(self, rollouts: Rollouts) -> torch.Tensor:
        with torch.no_grad():
            logits = [completion_logits(t, rollouts) for t in self.teachers]
        return logits[0] if len(logits) == 1 else geometric_consensus(logits, self.weights)

    def training_step(self, batch, batch_idx):
        _, rollouts = self.sample(batch_idx)
        student = completion_logits(self.policy, rollouts)
        teacher = self.teacher_logits(rollouts)
        mask = rollouts.completion_mask.to(self.device)
        if self.opd.objective == "reverse_kl":
            per_token = reverse_kl(student, teacher)
            loss = (per_token * mask).sum() / mask.sum().clamp(min=1)
        elif self.opd.objective == "jsd":
            loss = generalized_jsd(student, teacher, mask, self.opd.beta)
        elif self.opd.objective == "sampled":
            tokens = rollouts.completion_ids[..., None]
            s = torch.log_softmax(student.float(), -1).gather(-1, tokens).squeeze(-1)
            t = torch.log_softmax(teacher.float(), -1).gather(-1, tokens).squeeze(-1)
            weights = None
            if self.opd.importance_clip is not None:
                weights = torch.exp(s.detach() - rollouts.logprobs.to(s.device))
                weights = weights.clamp(max=self.opd.importance_clip) * mask
            loss = sampled_token_opd_loss(s, t, mask, weights)
        else:
            raise ValueError(f"unknown OPD objective '{self.opd.objective}'; known: "
                             "reverse_kl, jsd, sampled")
        self.history.append({"loss": float(loss.detach())})
        return loss


def post_train(module: _OnPolicyModule, steps: int, compute: Compute | None = None,
               progress_bar: bool = True, callbacks=()) -> _OnPolicyModule:
    """Run ``steps`` optimizer steps of an on-policy module; returns it (``history`` holds
    the per-step reward / loss; Lightning ``callbacks`` may evaluate along the way)."""
    loader = step_indices(steps)
    trainer = make_trainer(compute, progress_bar=progress_bar, callbacks=callbacks,
                           max_steps=steps)
    module.policy.train()
    with warnings.catch_warnings():  # frozen teachers / proposal models stay in eval mode
        warnings.filterwarnings("ignore", message=".*module\\(s\\) in eval mode.*")
        trainer.fit(module, loader)
    module.policy.eval()
    return module
