"""Prospective prediction, surprise and the surprise-weighted advantage.

Predictor (RECON options; the paper's exact form is not public): P1, a verbalised
confidence token ``<conf_k>`` emitted first, p = k / 9 of the sampled token (``token``) or
its expectation under the policy's distribution over the ten confidence tokens
(``expected``); P2, the policy's yes-probability P(YES) / (P(YES) + P(NO)) after a probing
question appended to the prompt (``yes_probability``; no loss term reaches it, it moves
only through the parameters it shares with the policy); P3, a scalar head (``head``):
p = sigmoid(w . h + b) on the policy's last hidden state before the answer, trained online
with the logistic loss on the outcomes (the policy's features are not moved by it).
Retrospective evaluation e = the verified outcome. Surprise s = |e - p| (``abs``, the
paper's), (e - p)^2 (``squared``) or -log p(e) (``log``). Weighting of the base advantage
A with the stop-gradient surprise:

- ``multiplicative`` (the paper's): A (1 + lambda sg(s)); zero-variance groups (A = 0) are
  unaffected;
- ``additive``: A - lambda sg(s), reward shaping in the style of RLCR (acts on tied groups);
- ``normalized``: A sg(s) / mean(sg(s)).

With P1 the confidence token itself gets the weighted advantage. If the outcome does not
depend on the stated k (success probability q, group std sigma), the expected
multiplicative advantage of ``<conf_k>`` is lambda q (1 - q) (1 - 2 k / 9) / sigma: it
lowers the stated confidence whatever q is (tested by simulation), so ECE improves only
from an overconfident start. The additive weighting with the squared surprise instead
gives -lambda [q (1 - p)^2 + (1 - q) p^2], maximal at p = q (a Brier reward).
"""

from __future__ import annotations

import torch

from data.confidence_tasks import CONF0

WEIGHTINGS = ("multiplicative", "additive", "normalized")
PREDICTORS = ("token", "expected", "yes_probability", "head")


def stated_confidence(tasks, rollouts) -> torch.Tensor:
    """p of the confidence each episode states (``<conf_k>``: k / 9; a real model's
    "Confidence: k"); an episode that states none counts as p = 0.5."""
    stated = [t.stated_confidence(c) for t, c in
              zip(tasks, rollouts.completions(), strict=True)]
    return torch.tensor([0.5 if p is None else p for p in stated], dtype=torch.float)


def expected_confidence(first_logits: torch.Tensor) -> torch.Tensor:
    """E[k / 9] under the policy's distribution over the ten confidence tokens."""
    probs = torch.softmax(first_logits[:, CONF0:CONF0 + 10].float(), dim=-1)
    return probs @ (torch.arange(10, dtype=probs.dtype) / 9)


def prediction_features(policy, rollouts) -> torch.Tensor:
    """(B, hidden) the policy's last-layer hidden state at the last prompt token (where the
    prospective prediction is made), without gradient."""
    from models.lm.rollout import position_ids

    device = next(policy.parameters()).device
    ids = rollouts.sequences[:, :rollouts.prompt_length].to(device)
    mask = rollouts.attention_mask[:, :rollouts.prompt_length].to(device)
    with torch.no_grad():
        out = policy(input_ids=ids, attention_mask=mask, position_ids=position_ids(mask),
                     output_hidden_states=True)
    return out.hidden_states[-1][:, -1].float()


def head_confidence(head, features: torch.Tensor) -> torch.Tensor:
    """p = sigmoid(w . h + b) of the scalar success head on each episode's features."""
    with torch.no_grad():
        return torch.sigmoid(head(features.to(head.weight.device)))[:, 0].cpu()


def probe_confidence(policy, tasks, yes_id: int, no_id: int, pad_id: int) -> torch.Tensor:
    """P(yes) / (P(yes) + P(no)) as the next token after each task's probing question
    (one no-grad forward pass over the left-padded probes)."""
    from models.lm.rollout import left_pad, position_ids

    device = next(policy.parameters()).device
    ids, mask = (t.to(device) for t in left_pad([t.probe_ids for t in tasks], pad_id))
    with torch.no_grad():
        logits = policy(input_ids=ids, attention_mask=mask, position_ids=position_ids(mask),
                        logits_to_keep=1).logits[:, -1, [yes_id, no_id]].float()
    return torch.softmax(logits, dim=-1)[:, 0].cpu()


def episode_confidence(policy, tasks, rollouts, fmt, mode: str = "token", head=None
                       ) -> torch.Tensor:
    """The prospective p of each episode (``fmt``: its ``EpisodeFormat``): the confidence
    it states (``token``), or (``expected``, tiny-lm) the expectation of the first token's
    distribution, or (``yes_probability``) the policy's answer to the probing question, or
    (``head``) the scalar ``head`` on the policy's hidden state at the last prompt token."""
    if mode == "token":
        return stated_confidence(tasks, rollouts)
    if mode == "yes_probability":
        return probe_confidence(policy, tasks, fmt.yes_id, fmt.no_id, fmt.pad_id)
    if mode == "head":
        if head is None:
            raise ValueError("mode='head' needs the trained success head")
        return head_confidence(head, prediction_features(policy, rollouts))
    if mode == "expected":
        if not fmt.confidence_first:
            raise ValueError("predictor 'expected' reads tiny-lm's confidence token")
        from models.lm.rollout import completion_logits

        with torch.no_grad():
            return expected_confidence(completion_logits(policy, rollouts)[:, 0].cpu())
    raise ValueError(f"unknown predictor '{mode}'; known: {', '.join(PREDICTORS)}")


def surprise(evaluation: torch.Tensor, prediction: torch.Tensor, kind: str = "abs"
             ) -> torch.Tensor:
    """s = |e - p|, (e - p)^2 or -log p(e) (p clipped to [1e-4, 1 - 1e-4])."""
    e, p = evaluation.float(), prediction.float()
    if kind == "abs":
        return (e - p).abs()
    if kind == "squared":
        return (e - p) ** 2
    if kind == "log":
        p = p.clamp(1e-4, 1 - 1e-4)
        return -(e * torch.log(p) + (1 - e) * torch.log1p(-p))
    raise ValueError(f"unknown surprise '{kind}'; known: abs, squared, log")


def ph_advantages(advantages: torch.Tensor, surprise_values: torch.Tensor, lam: float,
                  weighting: str = "multiplicative") -> torch.Tensor:
    """The surprise-weighted advantage; the surprise carries no gradient, and lambda = 0
    returns ``advantages`` unchanged (the base method)."""
    if lam == 0.0:
        return advantages
    s = surprise_values.detach().to(advantages.dtype)
    if weighting == "multiplicative":
        return advantages * (1 + lam * s)
    if weighting == "additive":
        return advantages - lam * s
    if weighting == "normalized":
        return advantages * s / s.mean().clamp(min=1e-8)
    raise ValueError(f"unknown weighting '{weighting}'; known: {', '.join(WEIGHTINGS)}")
