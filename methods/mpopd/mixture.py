"""The geometric mixture of student and teacher and its trust-region coefficient.

q_beta(. | prefix) ∝ pi_s^{1 - beta} pi_T^{beta} = softmax((1 - beta) z_s + beta z_T) (logits
may stand for log-probabilities: softmax is shift invariant). Two readings give the same
family: the KL-regularised improvement of the relative teacher support log pi_T - log pi_s,
max_q E_q[log pi_T - log pi_s] - (1 / eta) KL(q || pi_s) => q = q_eta; and the trust region
min_q KL(q || pi_T) s.t. KL(q || pi_s) <= epsilon => q = q_lambda, where KL(q_lambda || pi_s)
grows with lambda on [0, 1], so lambda is found per prefix by bisection (lambda = 1 when the
teacher itself is inside the region).
"""

from __future__ import annotations

import torch


def geometric_mixture(student_logits: torch.Tensor, teacher_logits: torch.Tensor,
                      beta: torch.Tensor | float) -> torch.Tensor:
    """Log-probabilities of q_beta; ``beta`` a float or one value per row (..., 1)."""
    mixed = (1 - beta) * student_logits.float() + beta * teacher_logits.float()
    return torch.log_softmax(mixed, dim=-1)


def kl(log_p: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    """KL(p || q) over the last axis from log-probabilities."""
    return (log_p.exp() * (log_p - log_q)).sum(-1)


def trust_region_beta(student_logits: torch.Tensor, teacher_logits: torch.Tensor,
                      epsilon: float, iterations: int = 40) -> torch.Tensor:
    """Per row, the largest beta in [0, 1] with KL(q_beta || pi_s) <= epsilon (bisection;
    1 where KL(pi_T || pi_s) <= epsilon). Shape (..., 1)."""
    log_s = torch.log_softmax(student_logits.float(), dim=-1)
    low = torch.zeros(log_s.shape[:-1] + (1,), device=log_s.device)
    high = torch.ones_like(low)
    def within(beta: torch.Tensor) -> torch.Tensor:
        mixture = geometric_mixture(student_logits, teacher_logits, beta)
        return kl(mixture, log_s)[..., None] <= epsilon

    inside = within(high)
    for _ in range(iterations):
        mid = (low + high) / 2
        ok = within(mid)
        low, high = torch.where(ok, mid, low), torch.where(ok, high, mid)
    return torch.where(inside, torch.ones_like(low), low)


class MixtureProposal:
    """``combine`` for lockstep sampling from [student, teacher]: q_beta with a fixed
    ``beta``, or with the per-prefix trust-region beta for ``epsilon``."""

    def __init__(self, beta: float | None = None, epsilon: float | None = None) -> None:
        if (beta is None) == (epsilon is None):
            raise ValueError("give exactly one of beta and epsilon")
        self.beta, self.epsilon = beta, epsilon

    def __call__(self, logits: list[torch.Tensor]) -> torch.Tensor:
        student, teacher = logits
        beta = (self.beta if self.epsilon is None
                else trust_region_beta(student, teacher, self.epsilon))
        return geometric_mixture(student, teacher, beta)
