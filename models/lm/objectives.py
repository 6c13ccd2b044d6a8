"""Post-training objectives on rollouts: GRPO, on-policy distillation (full-vocabulary
reverse KL, generalized JSD, the sampled-token surrogate), SFT, and the geometric consensus
of several teachers. Formulas follow TRL 1.16 where TRL has them (tests compare).

Shapes: per-token tensors are (B, T) over completion tokens with a 0/1 ``mask``; logits are
(B, T, vocab); per-sequence tensors are (B,).
"""

from __future__ import annotations

import torch

LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")


def group_advantages(rewards: torch.Tensor, group_size: int, scale_rewards: str = "group",
                     weights: torch.Tensor | None = None) -> torch.Tensor:
    """GRPO advantages: A_i = (r_i - mean of its group) / (std + 1e-4), the std with
    Bessel's correction over the group (``scale_rewards="group"``), over the whole batch
    (``"batch"``) or not at all (``"none"``, Dr. GRPO); tied groups get A = 0. ``weights``
    (per sample) multiply the advantages (Prospective Hindsight's surprise weights)."""
    grouped = rewards.view(-1, group_size)
    centered = (grouped - grouped.mean(dim=1, keepdim=True)).view(-1)
    if scale_rewards == "group":
        std = grouped.std(dim=1, unbiased=True).repeat_interleave(group_size)
    elif scale_rewards == "batch":
        std = rewards.std(unbiased=True).expand_as(rewards)
    elif scale_rewards == "none":
        std = None
    else:
        raise ValueError(f"unknown scale_rewards '{scale_rewards}'; known: group, batch, none")
    advantages = centered if std is None else centered / (std + 1e-4)
    return advantages if weights is None else advantages * weights


def aggregate(per_token: torch.Tensor, mask: torch.Tensor, loss_type: str,
              max_completion_length: int | None = None) -> torch.Tensor:
    """Reduce a per-token loss: ``grpo`` mean over each sequence's tokens then over
    sequences; ``bnpo`` and ``dapo`` sum over all tokens / number of tokens (dapo's global
    count equals bnpo's on one process); ``dr_grpo`` sum / (B * max_completion_length)."""
    mask = mask.to(per_token.dtype)
    if loss_type == "grpo":
        return ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    if loss_type in ("bnpo", "dapo"):
        return (per_token * mask).sum() / mask.sum().clamp(min=1.0)
    if loss_type == "dr_grpo":
        length = max_completion_length or per_token.shape[1]
        return (per_token * mask).sum() / (per_token.shape[0] * length)
    raise ValueError(f"unknown loss_type '{loss_type}'; known: {', '.join(LOSS_TYPES)}")


def grpo_loss(logps: torch.Tensor, old_logps: torch.Tensor, advantages: torch.Tensor,
              mask: torch.Tensor, epsilon_low: float = 0.2, epsilon_high: float = 0.2,
              beta: float = 0.0, ref_logps: torch.Tensor | None = None,
              loss_type: str = "dapo", max_completion_length: int | None = None
              ) -> torch.Tensor:
    """Clipped surrogate -min(ratio A, clip(ratio, 1 - eps_low, 1 + eps_high) A) per token,
    plus beta times the k3 estimate exp(ref - logp) - (ref - logp) - 1 of KL to a
    reference, aggregated by ``loss_type``."""
    ratio = torch.exp(logps - old_logps)
    adv = advantages[:, None] if advantages.dim() == 1 else advantages
    per_token = -torch.min(ratio * adv,
                           torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high) * adv)
    if beta != 0.0:
        if ref_logps is None:
            raise ValueError("beta != 0 needs the reference model's log-probs")
        delta = ref_logps - logps
        per_token = per_token + beta * (torch.exp(delta) - delta - 1)
    return aggregate(per_token, mask, loss_type, max_completion_length)


def reverse_kl(student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    """Per-token KL(pi_s || pi_T) over the full vocabulary, (B, T)."""
    s = torch.log_softmax(student_logits.float(), dim=-1)
    t = torch.log_softmax(teacher_logits.float(), dim=-1)
    return (s.exp() * (s - t)).sum(-1)


def generalized_jsd(student_logits: torch.Tensor, teacher_logits: torch.Tensor,
                    mask: torch.Tensor | None = None, beta: float = 0.5,
                    temperature: float = 1.0) -> torch.Tensor:
    """beta KL(pi_T || m) + (1 - beta) KL(pi_s || m), m = (1 - beta) pi_s + beta pi_T, per
    token; beta = 0 is forward KL(pi_T || pi_s), beta = 1 reverse KL(pi_s || pi_T) (GKD).
    Mean over the masked tokens (TRL's reduction with labels)."""
    s = torch.log_softmax(student_logits.float() / temperature, dim=-1)
    t = torch.log_softmax(teacher_logits.float() / temperature, dim=-1)
    if beta == 0.0:
        per_token = (t.exp() * (t - s)).sum(-1)
    elif beta == 1.0:
        per_token = (s.exp() * (s - t)).sum(-1)
    else:
        b = torch.tensor(beta, dtype=s.dtype)
        m = torch.logsumexp(torch.stack([s + torch.log1p(-b), t + torch.log(b)]), dim=0)
        per_token = (beta * (t.exp() * (t - m)).sum(-1)
                     + (1 - beta) * (s.exp() * (s - m)).sum(-1))
    if mask is None:
        return per_token.mean()
    mask = mask.to(per_token.dtype)
    return (per_token * mask).sum() / mask.sum().clamp(min=1.0)


def opd_token_advantages(student_logps: torch.Tensor, teacher_logps: torch.Tensor
                         ) -> torch.Tensor:
    """On-policy distillation's per-token advantage on the sampled tokens,
    A_t = -(log pi_s - log pi_T), detached (the negative per-token reverse-KL estimate)."""
    return -(student_logps - teacher_logps).detach()


def sampled_token_opd_loss(student_logps: torch.Tensor, teacher_logps: torch.Tensor,
                           mask: torch.Tensor, importance_weights: torch.Tensor | None = None,
                           loss_type: str = "bnpo") -> torch.Tensor:
    """On-policy distillation on the sampled tokens: A_t = -(log pi_s - log pi_T) (detached),
    loss = -sum A_t log pi_s; its expected gradient over y ~ pi_s is the gradient of
    KL(pi_s || pi_T). ``importance_weights`` (per token or per sequence, detached)
    reweight tokens drawn from a proposal other than the student (MPOPD)."""
    per_token = -opd_token_advantages(student_logps, teacher_logps) * student_logps
    if importance_weights is not None:
        w = importance_weights[:, None] if importance_weights.dim() == 1 else importance_weights
        per_token = per_token * w.detach()
    return aggregate(per_token, mask, loss_type)


def geometric_consensus(teacher_logits: list[torch.Tensor], weights: list[float]
                        ) -> torch.Tensor:
    """log g of g = prod_k pi_k^{w_k / sum(w)} / Z, the unique minimiser of
    sum_k w_k KL(q || pi_k) over q (ProteinOPD's consensus target); returns normalized
    log-probabilities. The weights are normalized here, so any positive scale of them gives
    the same target."""
    total_weight = float(sum(weights))
    if total_weight <= 0 or any(w < 0 for w in weights):
        raise ValueError(f"teacher weights must be >= 0 with a positive sum, not {weights}")
    total = sum((w / total_weight) * torch.log_softmax(z.float(), dim=-1)
                for w, z in zip(weights, teacher_logits, strict=True))
    return torch.log_softmax(total, dim=-1)
