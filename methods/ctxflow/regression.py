"""Backward (training) deviation: online gradient descent on in-context linear regression with
a one-block softmax-attention model, finite n-token context vs the exact Gaussian context,
from the same initialization and on the same query stream.

Tokens z = (x, y) in R^(d+1), y = w^T x, x ~ N(0, I/d); query z_q = (x_q, 0); prediction
y_hat = last coordinate of z_q + V Attn(z_q; mu); loss (y_hat - w^T x_q)^2. For the infinite
context mu = N(0, S_w) with S_w = [[I, w], [w^T, |w|^2]] / d, Attn(z_q) = S_w A^T z_q.
"""

from __future__ import annotations

import torch

from common.streams import Streams


def _predict(query: torch.Tensor, attn: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    return (query + attn @ V.T)[..., -1]


def icl_loss_finite(A, V, w, x_query, x_context) -> torch.Tensor:
    """Squared error with an n-token context (x_context: (n, d))."""
    ctx = torch.cat([x_context, (x_context @ w)[:, None]], dim=1)
    q = torch.cat([x_query, torch.zeros(1, dtype=x_query.dtype)])
    attn = torch.softmax(ctx @ A.T @ q, dim=0) @ ctx
    return (_predict(q, attn, V) - x_query @ w) ** 2


def icl_loss_gaussian(A, V, w, x_query) -> torch.Tensor:
    """Squared error with the infinite (Gaussian) context, in closed form."""
    d = len(w)
    basis = torch.cat([torch.eye(d, dtype=w.dtype), w[None, :]], dim=0)  # z = basis @ x
    cov = basis @ basis.T / d
    q = torch.cat([x_query, torch.zeros(1, dtype=x_query.dtype)])
    attn = cov @ A.T @ q
    return (_predict(q, attn, V) - x_query @ w) ** 2


def online_gd_deviation(d: int, n: int, steps: int, lr: float, seed: int,
                        init_scale: float = 0.3) -> float:
    """sup over iterations of ||theta_t^(n) - theta_t^(inf)||_F, theta = (A, V)."""
    streams = Streams(seed)
    gen = streams.torch("parameters and queries")
    dim = d + 1
    init = [init_scale * torch.randn(dim, dim, generator=gen, dtype=torch.float64)
            for _ in range(2)]
    finite = [p.clone().requires_grad_(True) for p in init]
    infinite = [p.clone().requires_grad_(True) for p in init]
    ctx_gen = streams.torch("context")
    worst = 0.0
    for _ in range(steps):
        w = torch.randn(d, generator=gen, dtype=torch.float64)
        x_q = torch.randn(d, generator=gen, dtype=torch.float64) / d**0.5
        x_ctx = torch.randn(n, d, generator=ctx_gen, dtype=torch.float64) / d**0.5
        for params, loss in ((finite, icl_loss_finite(*finite, w, x_q, x_ctx)),
                             (infinite, icl_loss_gaussian(*infinite, w, x_q))):
            grads = torch.autograd.grad(loss, params)
            with torch.no_grad():
                for p, g in zip(params, grads, strict=True):
                    p -= lr * g
        with torch.no_grad():
            gap = sum(torch.sum((a - b) ** 2) for a, b in zip(finite, infinite, strict=True))
            worst = max(worst, float(gap.sqrt()))
    return worst
