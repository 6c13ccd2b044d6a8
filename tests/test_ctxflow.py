"""ctxflow: exact Gaussian flow vs large-n simulation, gradients, smoke run."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from methods.ctxflow import (
    finite_context_flow,
    gaussian_context_flow,
    icl_loss_finite,
    icl_loss_gaussian,
    random_flow_params,
)


def _setup(d, seed=0):
    gen = torch.Generator().manual_seed(seed)
    params = random_flow_params(d, 0.5, 1.0, gen)
    x = torch.randn(6, d, generator=gen, dtype=torch.float64) / d**0.5
    mean = 0.3 * torch.randn(d, generator=gen, dtype=torch.float64) / d**0.5
    cov = torch.eye(d, dtype=torch.float64) / d
    return gen, params, x, mean, cov


@pytest.mark.parametrize("depth,n", [(1, 100_000), (2, 8192)])
def test_gaussian_closed_form_matches_large_n_simulation(depth, n):
    d = 3
    gen, params, x, mean, cov = _setup(d)
    exact, _, _ = gaussian_context_flow(x, mean, cov, params, depth)
    chol = torch.linalg.cholesky(cov)
    devs, small = [], []
    for _ in range(4):
        ctx = mean + torch.randn(n, d, generator=gen, dtype=torch.float64) @ chol.T
        devs.append(float((finite_context_flow(x, ctx, params, depth) - exact).norm(dim=1)
                          .mean()))
        ctx_small = mean + torch.randn(n // 64, d, generator=gen, dtype=torch.float64) @ chol.T
        small.append(float((finite_context_flow(x, ctx_small, params, depth) - exact)
                           .norm(dim=1).mean()))
    # Monte-Carlo error only: 64x fewer particles give ~8x the deviation
    assert np.mean(devs) < 2 / np.sqrt(n)
    assert 4 < np.mean(small) / np.mean(devs) < 16


def test_gaussian_flow_propagates_the_measure_exactly():
    """The pushed context measure is N(T m, M S M^T): check against transporting samples."""
    d = 2
    gen, params, _, mean, cov = _setup(d, seed=1)
    _, m1, s1 = gaussian_context_flow(mean[None], mean, cov, params, 1)
    samples = mean + torch.randn(200_000, d, generator=gen, dtype=torch.float64) @ (
        torch.linalg.cholesky(cov).T)
    moved, _, _ = gaussian_context_flow(samples, mean, cov, params, 1)
    assert torch.allclose(moved.mean(0), m1, atol=5e-3)
    assert torch.allclose(torch.cov(moved.T), s1, atol=5e-3)


def test_nearest_neighbour_limit_is_the_identity_and_error_is_the_nn_distance():
    d = 2
    gen, params, x, mean, cov = _setup(d)
    exact, _, _ = gaussian_context_flow(x, mean, cov, params, 3, kind="nearest")
    assert torch.equal(exact, x)
    ctx = torch.randn(20000, d, generator=gen, dtype=torch.float64) / d**0.5
    moved = finite_context_flow(x, ctx, params, 1, kind="nearest")
    nn_dist = torch.cdist(x, ctx).min(dim=1).values
    assert torch.allclose((moved - x).norm(dim=1), nn_dist, rtol=1e-9)  # |V| = orthogonal


@pytest.mark.parametrize("loss", ["finite", "gaussian"])
def test_autograd_matches_finite_differences(loss):
    gen = torch.Generator().manual_seed(3)
    d = 3
    A = 0.3 * torch.randn(d + 1, d + 1, generator=gen, dtype=torch.float64)
    V = 0.3 * torch.randn(d + 1, d + 1, generator=gen, dtype=torch.float64)
    w = torch.randn(d, generator=gen, dtype=torch.float64)
    xq = torch.randn(d, generator=gen, dtype=torch.float64)
    xc = torch.randn(50, d, generator=gen, dtype=torch.float64)

    def f(a, v):
        return (icl_loss_finite(a, v, w, xq, xc) if loss == "finite"
                else icl_loss_gaussian(a, v, w, xq))

    a, v = A.clone().requires_grad_(True), V.clone().requires_grad_(True)
    ga, gv = torch.autograd.grad(f(a, v), (a, v))
    eps = 1e-6
    for (i, j) in [(0, 0), (1, 2), (3, 3), (2, 0)]:
        e = torch.zeros_like(A)
        e[i, j] = eps
        fd_a = (f(A + e, V) - f(A - e, V)) / (2 * eps)
        fd_v = (f(A, V + e) - f(A, V - e)) / (2 * eps)
        assert float(fd_a) == pytest.approx(float(ga[i, j]), rel=1e-5, abs=1e-9)
        assert float(fd_v) == pytest.approx(float(gv[i, j]), rel=1e-5, abs=1e-9)


def test_ctxflow_smoke_run(smoke_run):
    metrics, run_dir = smoke_run("ctxflow")
    assert -1.0 < metrics["slope_attention"] < 0
    assert "depth_ratio_L4_over_L1" in metrics
    assert (run_dir / "figures" / "deviation_vs_n.png").is_file()


def test_the_lipschitz_estimate_is_exact_without_attention_and_bounded_by_the_limit():
    """With A = 0 the block adds the context mean, so the flow map of the token is a shift:
    Lipschitz 1. With attention and a large Gaussian context the map tends to the exact
    affine limit, whose Jacobian is the product of I + V S A^T / L (S = I/d): the estimate
    (the largest Jacobian norm over random tokens) approaches that product's spectral norm."""
    from methods.ctxflow import FlowParams, flow_lipschitz, random_flow_params

    gen = torch.Generator().manual_seed(0)
    d, depth = 3, 4
    params = random_flow_params(d, 1.0, 1.0, gen)
    context = torch.randn(2048, d, generator=gen, dtype=torch.float64) / d**0.5
    shift = FlowParams(torch.zeros(d, d, dtype=torch.float64), params.V)
    assert flow_lipschitz(shift, context, depth, 16, gen) == pytest.approx(1.0, rel=1e-6)
    jacobian = torch.eye(d, dtype=torch.float64)
    S = torch.eye(d, dtype=torch.float64) / d
    for _ in range(depth):  # the context stays near N(m, S) under the exact flow
        M = torch.eye(d, dtype=torch.float64) + params.V @ S @ params.A.T / depth
        jacobian, S = M @ jacobian, M @ S @ M.T
    limit = float(torch.linalg.matrix_norm(jacobian, ord=2))
    estimate = flow_lipschitz(params, context, depth, 400, gen)
    assert 0.85 * limit < estimate < 1.1 * limit
