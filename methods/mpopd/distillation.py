"""On-policy distillation whose rollouts come from a proposal: the student (OPD), the
geometric mixture of student and teacher sampled in lockstep (MPOPD, exact; fixed beta or
the trust-region beta), a single-pass proposal model distilled towards that mixture (MPOPD,
RECON: the paper's single-pass construction is not public), the teacher (SeqKD-style), or
GKD's random mix of student and teacher rollouts. The student's loss is the configured OPD
objective on whatever prefixes the proposal produced."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from methods.mpopd.mixture import MixtureProposal
from models.lm.objectives import reverse_kl
from models.lm.post_training import OPDConfig, OPDModule, RolloutConfig
from models.lm.rollout import completion_logits, sample_rollouts

PROPOSALS = ("student", "mixture", "head", "teacher", "gkd")


@dataclass(frozen=True)
class ProposalConfig:
    kind: str = "mixture"
    beta: float | None = 0.5  # fixed mixture weight of the teacher (None: trust region)
    epsilon: float | None = None  # trust-region budget KL(q || pi_s) per prefix
    gkd_on_policy: float = 0.5  # GKD: probability of a student batch
    head_refresh_every: int = 10  # single-pass head: re-distil every this many steps ...
    head_refresh_steps: int = 5  # ... for this many steps (reverse KL to the mixture)
    head_lr: float = 3e-3
    # linear anneal of beta (or epsilon) to 0 over this many steps (None: constant), as
    # trust-region behaviour blending anneals its budget
    anneal_steps: int | None = None

    def scale(self, step: int) -> float:
        if self.anneal_steps is None:
            return 1.0
        return max(0.0, 1.0 - step / self.anneal_steps)


class MPOPDModule(OPDModule):
    def __init__(self, student, prompts, teacher, rollout: RolloutConfig, opd: OPDConfig,
                 proposal: ProposalConfig, seed: int = 0) -> None:
        super().__init__(student, prompts, [teacher], rollout, opd, seed=seed)
        if proposal.kind not in PROPOSALS:
            raise ValueError(f"unknown proposal '{proposal.kind}'; known: "
                             + ", ".join(PROPOSALS))
        self.proposal = proposal
        self.teacher = teacher
        self.head = copy.deepcopy(student) if proposal.kind == "head" else None
        self.head_optimizer = (torch.optim.Adam(self.head.parameters(), lr=proposal.head_lr)
                               if self.head is not None else None)
        # cumulative cost: tokens sampled from the proposal, and token positions the teacher
        # ran on (lockstep decoding and the head's refreshes, then scoring for the loss)
        self.cost = {"sampled_tokens": 0, "teacher_tokens": 0}

    def _count(self, rollouts, teacher_ran: bool) -> None:
        tokens = int(rollouts.completion_mask.sum())
        self.cost["sampled_tokens"] += tokens
        self.cost["teacher_tokens"] += tokens if teacher_ran else 0

    def teacher_logits(self, rollouts):
        self.cost["teacher_tokens"] += int(rollouts.completion_mask.sum())
        return super().teacher_logits(rollouts)

    def mixture(self, step: int) -> MixtureProposal:
        """The proposal at ``step`` (beta or epsilon scaled by the anneal schedule)."""
        p, scale = self.proposal, self.proposal.scale(step)
        if p.epsilon is not None:
            return MixtureProposal(epsilon=p.epsilon * scale)
        return MixtureProposal(beta=p.beta * scale)

    def generate(self, tasks: list, batch_idx: int):
        prompts = [t.prompt_ids for t in tasks]
        kind = self.proposal.kind
        if kind == "gkd":
            on_policy = torch.rand(1, generator=self.generator).item() < \
                self.proposal.gkd_on_policy
            kind = "student" if on_policy else "teacher"
        sample = {"student": lambda: self._roll(self.policy, prompts),
                  "teacher": lambda: self._roll(self.teacher, prompts),
                  "mixture": lambda: self._roll([self.policy, self.teacher], prompts,
                                                self.mixture(batch_idx)),
                  "head": lambda: self._roll(self._refreshed_head(batch_idx, prompts),
                                             prompts)}[kind]
        rollouts = sample()
        self._count(rollouts, teacher_ran=kind in ("teacher", "mixture"))
        return rollouts

    def _roll(self, models, prompts, combine=None):
        r = self.rollout
        return sample_rollouts(models, prompts, r.max_new_tokens, r.sampling, r.eos_id,
                               r.pad_id, self.generator, combine=combine)

    def _refreshed_head(self, batch_idx: int, prompts):
        """The single-pass proposal, distilled (full-vocabulary reverse KL on its own
        rollouts) towards the current lockstep mixture every ``head_refresh_every`` steps."""
        if batch_idx % self.proposal.head_refresh_every == 0:
            mixture = self.mixture(batch_idx)
            self.head.train()
            for _ in range(self.proposal.head_refresh_steps):
                rollouts = self._roll(self.head, prompts)
                with torch.no_grad():
                    target = mixture([completion_logits(self.policy, rollouts),
                                      completion_logits(self.teacher, rollouts)])
                self.cost["teacher_tokens"] += int(rollouts.completion_mask.sum())
                per_token = reverse_kl(completion_logits(self.head, rollouts), target)
                mask = rollouts.completion_mask
                loss = (per_token * mask).sum() / mask.sum().clamp(min=1)
                self.head_optimizer.zero_grad()
                loss.backward()
                self.head_optimizer.step()
            self.head.eval()
        return self.head
