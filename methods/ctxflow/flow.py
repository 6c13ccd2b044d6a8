"""Forward passes of a contextual flow map with L residual blocks, residual weight 1/L.

Block (softmax attention, A = Q^T K, value map V):
    z <- z + (1/L) V Attn(z; mu),   Attn(z; mu) = int y e^{z^T A y} dmu(y) / int e^{z^T A y} dmu(y),
applied to the distinguished token AND to every context particle (mu_{l+1} is the push-forward
of mu_l by the block: the particles interact). Finite context: mu = (1/n) sum_i delta_{y_i}.

Infinite context, exact: for mu = N(m, S) the tilted mean is m + S A^T z, so the block is the
affine map T(z) = (I + V S A^T / L) z + V m / L, the context stays Gaussian with
m <- T(m), S <- M S M^T, M = I + V S A^T / L.

Non-smooth map ("nearest"): Attn(z; mu_n) = the context particle nearest to z (itself
excluded for a particle), block z <- z + (1/L) V (NN(z) - z). With infinite (full-support)
context NN(z) = z, so the exact limit is the identity; the finite-n deviation is then the
nearest-neighbour distance, of order n^(-1/d).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class FlowParams:
    A: torch.Tensor  # (d, d) attention bilinear form Q^T K
    V: torch.Tensor  # (d, d) value / output map


def random_flow_params(d: int, attention_scale: float, value_scale: float,
                       generator: torch.Generator, dtype=torch.float64) -> FlowParams:
    """A = a sqrt(d) O_1, V = v O_2 with Haar-orthogonal O_i.

    With tokens and context of norm ~1 (covariance I/d), the attention logits z^T A y then
    have standard deviation ~a in every dimension d (the tilt of the softmax does not fade as
    d grows), and V has operator norm v: the problem's difficulty is the same in every d.
    """

    def orthogonal() -> torch.Tensor:
        q, r = torch.linalg.qr(torch.randn(d, d, generator=generator, dtype=dtype))
        return q * torch.sign(torch.diagonal(r))

    return FlowParams(attention_scale * d**0.5 * orthogonal(), value_scale * orthogonal())


def _softmax_attention(queries: torch.Tensor, keys: torch.Tensor, A: torch.Tensor,
                       chunk: int = 2048) -> torch.Tensor:
    out = []
    for start in range(0, queries.shape[0], chunk):
        logits = queries[start:start + chunk] @ A @ keys.T
        out.append(torch.softmax(logits, dim=1) @ keys)
    return torch.cat(out)


def _nearest(queries: torch.Tensor, keys: torch.Tensor, exclude_self: bool,
             chunk: int = 2048) -> torch.Tensor:
    out = []
    for start in range(0, queries.shape[0], chunk):
        dist = torch.cdist(queries[start:start + chunk], keys)
        if exclude_self:
            rows = torch.arange(dist.shape[0])
            dist[rows, rows + start] = torch.inf
        out.append(keys[dist.argmin(dim=1)])
    return torch.cat(out)


def _attention_step(queries: torch.Tensor, keys: torch.Tensor, params: FlowParams, kind: str,
                    exclude_self: bool = False) -> torch.Tensor:
    """Attn(queries; keys) - queries for ``nearest``, Attn(queries; keys) for ``softmax``."""
    if kind == "softmax":
        return _softmax_attention(queries, keys, params.A)
    return _nearest(queries, keys, exclude_self=exclude_self) - queries


def context_trajectory(context: torch.Tensor, params: FlowParams, depth: int,
                       kind: str = "softmax") -> list[torch.Tensor]:
    """The context particles before each of the ``depth`` blocks (they interact with each other
    only: no token moves them, so one trajectory serves every token)."""
    if kind not in ("softmax", "nearest"):
        raise ValueError(f"unknown attention kind '{kind}'; known: softmax, nearest")
    contexts = [context]
    for _ in range(depth - 1):  # the last block's context update cannot reach a token
        ctx = contexts[-1]
        dctx = _attention_step(ctx, ctx, params, kind, exclude_self=True)
        contexts.append(ctx + (1.0 / depth) * dctx @ params.V.T)
    return contexts


def flow_through(token: torch.Tensor, contexts: list[torch.Tensor], params: FlowParams,
                 kind: str = "softmax") -> torch.Tensor:
    """Tokens (q, d) after one block per entry of ``contexts`` (``context_trajectory``)."""
    x, step = token, 1.0 / len(contexts)
    for ctx in contexts:
        x = x + step * _attention_step(x, ctx, params, kind) @ params.V.T
    return x


def finite_context_flow(token: torch.Tensor, context: torch.Tensor, params: FlowParams,
                        depth: int, kind: str = "softmax") -> torch.Tensor:
    """Tokens (q, d) after ``depth`` blocks with an interacting finite context (n, d)."""
    return flow_through(token, context_trajectory(context, params, depth, kind), params, kind)


def gaussian_context_flow(token: torch.Tensor, mean: torch.Tensor, cov: torch.Tensor,
                          params: FlowParams, depth: int, kind: str = "softmax"
                          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Exact infinite-context flow from N(mean, cov): (tokens, final mean, final cov)."""
    if kind == "nearest":
        return token, mean, cov
    if kind != "softmax":
        raise ValueError(f"unknown attention kind '{kind}'")
    x, m, S = token, mean, cov
    eye = torch.eye(len(mean), dtype=cov.dtype)
    for _ in range(depth):
        M = eye + params.V @ S @ params.A.T / depth
        shift = params.V @ m / depth
        x = x @ M.T + shift
        m = M @ m + shift
        S = M @ S @ M.T
    return x, m, S


def flow_lipschitz(params: FlowParams, context: torch.Tensor, depth: int, pairs: int,
                   generator: torch.Generator) -> float:
    """The largest spectral norm of the Jacobian dF/dx of the finite-context (softmax) flow
    map F of the token over ``pairs`` random tokens x: F's local Lipschitz constant at each,
    exact in every direction (the constants whose independence of the dimension the paper's
    estimates need). A finite difference along a random direction would measure the stretch
    of that direction only, an estimate that falls further below the largest stretch as the
    dimension grows."""
    d = context.shape[1]
    tokens = torch.randn(pairs, d, generator=generator, dtype=context.dtype) / d**0.5
    contexts = context_trajectory(context, params, depth)  # the same for every token

    def one_token(x: torch.Tensor) -> torch.Tensor:
        return flow_through(x[None], contexts, params)[0]

    norms = [torch.linalg.matrix_norm(torch.autograd.functional.jacobian(
        one_token, x, vectorize=True), 2) for x in tokens]
    return float(torch.stack(norms).max())
