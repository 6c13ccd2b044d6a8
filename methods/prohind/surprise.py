"""Prospective prediction, surprise and the surprise-weighted advantage.

Predictor (RECON options; the paper's exact form is not public): P1, a verbalised
confidence token ``<conf_k>`` emitted first, p = k / 9 of the sampled token (``token``) or
its expectation under the policy's distribution over the ten confidence tokens
(``expected``); or a scalar head (``head``): p = sigmoid(w . h + b) on the policy's last
hidden state before the answer, trained online with the logistic loss on the outcomes
(the policy's features are not moved by it). Retrospective evaluation e = the verified
outcome. Surprise s = |e - p| (``abs``, the paper's), (e - p)^2 (``squared``) or -log p(e)
(``log``). Weighting of the base advantage A with the stop-gradient surprise:

- ``multiplicative`` (the paper's): A (1 + lambda sg(s)); zero-variance groups (A = 0) are
  unaffected;
- ``additive``: A - lambda sg(s), reward shaping in the style of RLCR (acts on tied groups);
- ``normalized``: A sg(s) / mean(sg(s)).
"""

from __future__ import annotations

import torch

from data.confidence_tasks import CONF0

WEIGHTINGS = ("multiplicative", "additive", "normalized")


def prospective_confidence(first_token: torch.Tensor, first_logits: torch.Tensor | None = None,
                           mode: str = "token") -> torch.Tensor:
    """p in [0, 1] per rollout from its first completion token (a confidence token) or,
    with ``mode="expected"``, from the policy's logits at that position. A first token that
    is no confidence token counts as p = 0.5."""
    if mode == "expected":
        if first_logits is None:
            raise ValueError("mode='expected' needs the logits at the confidence position")
        probs = torch.softmax(first_logits[:, CONF0:CONF0 + 10].float(), dim=-1)
        return probs @ (torch.arange(10, dtype=probs.dtype) / 9)
    if mode != "token":
        raise ValueError(f"unknown predictor mode '{mode}'; known: token, expected, head")
    k = first_token - CONF0
    valid = (k >= 0) & (k < 10)
    return torch.where(valid, k.float() / 9, torch.full_like(k, 0.5, dtype=torch.float))


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


def episode_confidence(policy, rollouts, mode: str = "token", head=None) -> torch.Tensor:
    """The prospective p of each episode: from its first completion token, or (``expected``)
    from the policy's distribution at that position (one no-grad forward pass), or
    (``head``) from the scalar ``head`` on the policy's hidden state there."""
    if mode == "head":
        if head is None:
            raise ValueError("mode='head' needs the trained success head")
        with torch.no_grad():
            return torch.sigmoid(head(prediction_features(policy, rollouts)))[:, 0].cpu()
    first_logits = None
    if mode == "expected":
        from models.lm.rollout import completion_logits

        with torch.no_grad():
            first_logits = completion_logits(policy, rollouts)[:, 0].cpu()
    return prospective_confidence(rollouts.completion_ids[:, 0].cpu(), first_logits, mode)


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
