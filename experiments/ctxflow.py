"""ctxflow protocol: forward deviation of the finite-context token from the exact
infinite-context flow vs n, per depth, map and dimension; backward deviation over online
gradient descent; deviation and the flow map's Lipschitz constant vs embedding dimension."""

from __future__ import annotations

import numpy as np
import torch

from common.streams import Streams
from experiments.helpers.figures import subplots
from experiments.helpers.fits import fit_loglog_slope, slope_with_interval
from experiments.runner import register_paper
from experiments.runner.context import RunContext
from experiments.schemas.shared import RootConfig
from methods.ctxflow import (
    FlowParams,
    finite_context_flow,
    flow_lipschitz,
    gaussian_context_flow,
    online_gd_deviation,
    random_flow_params,
)

LIPSCHITZ_PAIRS = 64  # random token pairs per width and replicate


def forward_deviation(d: int, n: int, depth: int, kind: str, seed: int, cfg: RootConfig
                      ) -> float:
    """RMS over query tokens of |x_L^(n) - x_L^(inf)| for one seed (params, tokens, context)."""
    gen = torch.Generator().manual_seed(seed)
    method = cfg.method
    params = random_flow_params(d, method.attention_scale, method.value_scale, gen)
    x = torch.randn(cfg.dataset.n_queries, d, generator=gen, dtype=torch.float64) / d**0.5
    context = torch.randn(n, d, generator=gen, dtype=torch.float64) / d**0.5
    mean, cov = torch.zeros(d, dtype=torch.float64), torch.eye(d, dtype=torch.float64) / d
    exact, _, _ = gaussian_context_flow(x, mean, cov, params, depth, kind)
    finite = finite_context_flow(x, context, params, depth, kind)
    return float(((finite - exact) ** 2).sum(1).mean().sqrt())


def context_w2(d: int, n: int, depth: int, seed: int, cfg: RootConfig) -> float:
    """W2(mu_n^L, sample of mu^L) with POT's exact solver (both empirical, n points each)."""
    import ot

    gen = torch.Generator().manual_seed(seed)
    method = cfg.method
    params = random_flow_params(d, method.attention_scale, method.value_scale, gen)
    ctx = torch.randn(n, d, generator=gen, dtype=torch.float64) / d**0.5
    # the particles tracked as tokens (same update rule, same context): mu_n after L blocks
    evolved = finite_context_flow(ctx, ctx, params, depth)
    mean, cov = torch.zeros(d, dtype=torch.float64), torch.eye(d, dtype=torch.float64) / d
    _, m_L, cov_L = gaussian_context_flow(ctx[:1], mean, cov, params, depth)
    chol = torch.linalg.cholesky(cov_L)
    reference = m_L + torch.randn(n, d, generator=gen, dtype=torch.float64) @ chol.T
    cost = ot.dist(evolved.numpy(), reference.numpy())
    return float(np.sqrt(ot.emd2(np.full(n, 1 / n), np.full(n, 1 / n), cost)))


def lipschitz_constant(d: int, n: int, depth: int, seed: int, cfg: RootConfig,
                       control: bool = False) -> float:
    """The flow map's Lipschitz estimate in the token at width d (random parameters and an
    n-token context from the replicate's own stream). ``control``: the value map a d x d
    standard Gaussian matrix times value_scale, without the 1/sqrt(d) that keeps its norm
    fixed (its norm grows like 2 sqrt(d)): a map that is not dimension-free."""
    gen = Streams(seed).torch("lipschitz control" if control else "lipschitz")
    method = cfg.method
    params = random_flow_params(d, method.attention_scale, method.value_scale, gen)
    if control:
        params = FlowParams(params.A, method.value_scale * torch.randn(
            d, d, generator=gen, dtype=torch.float64))
    context = torch.randn(n, d, generator=gen, dtype=torch.float64) / d**0.5
    return flow_lipschitz(params, context, depth, LIPSCHITZ_PAIRS, gen)


@register_paper("ctxflow")
def run(cfg: RootConfig, ctx: RunContext) -> dict[str, float]:
    protocol = cfg.protocol
    ns = np.array(list(protocol.n_values), dtype=float)
    # the replicates' seeds, shared by every n and study (paired comparisons across n)
    seeds = [ctx.streams.seed(f"replicate {r}") for r in range(protocol.seeds)]
    depth = cfg.method.depth
    rows, metrics, curves = [], {}, {}

    def study(label, d, L, kind):
        errs = np.array([[forward_deviation(d, int(n), L, kind, s, cfg) for n in ns]
                         for s in seeds])
        slope, lo, hi = slope_with_interval(ns, errs)
        curves[label] = errs.mean(axis=0)
        for n, e in zip(ns, errs.T, strict=True):
            rows.append({"study": label, "n": int(n), "deviation_mean": e.mean(),
                         "deviation_std": e.std(ddof=1)})
        rows.append({"study": label, "n": "slope", "deviation_mean": slope,
                     "deviation_std": f"[{lo:.3f}, {hi:.3f}]"})
        ctx.log({f"slope_{label}": slope})
        return errs, slope, (lo, hi)

    # attention and nearest-neighbour maps across dimensions (depth L = method.depth)
    att_slopes = {}
    for d in ctx.progress(list(protocol.dims), "dims"):
        _, att_slopes[d], ci = study(f"attention_d{d}_L{depth}", int(d), depth, "softmax")
        _, s_nn, ci_nn = study(f"nearest_d{d}_L{depth}", int(d), depth, "nearest")
        metrics[f"slope_attention_d{d}"] = att_slopes[d]
        metrics[f"slope_attention_d{d}_ci_low"], metrics[f"slope_attention_d{d}_ci_high"] = ci
        metrics[f"slope_nonsmooth_d{d}"] = s_nn
        metrics[f"slope_nonsmooth_d{d}_ci_low"], metrics[f"slope_nonsmooth_d{d}_ci_high"] = ci_nn
    metrics["slope_attention"] = float(np.mean(list(att_slopes.values())))

    # depth: residual weights 1/L, L in depths, fixed dimension
    d0 = protocol.depth_study_dim
    by_depth = {}
    for L in ctx.progress(list(protocol.depths), "depths"):
        by_depth[L], metrics[f"slope_attention_L{L}"], _ = study(
            f"attention_d{d0}_L{L}", d0, int(L), "softmax")
    if 1 in by_depth and max(by_depth) > 1:
        top = max(by_depth)
        ratio = by_depth[top].mean(axis=0) / by_depth[1].mean(axis=0)
        metrics[f"depth_ratio_L{top}_over_L1"] = float(ratio.max())

    # backward: sup over OGD iterations of the parameter gap, vs n
    back = np.array([[online_gd_deviation(protocol.backward_dim, int(n),
                                          cfg.method.gd_steps, cfg.method.gd_lr, s)
                      for n in ns] for s in ctx.progress(seeds, "online GD")])
    slope_b, lo_b, hi_b = slope_with_interval(ns, back)
    curves["backward (sup over OGD iterations)"] = back.mean(axis=0)
    metrics.update(slope_backward=slope_b, slope_backward_ci_low=lo_b,
                   slope_backward_ci_high=hi_b)
    rows += [{"study": "backward", "n": int(n), "deviation_mean": b.mean(),
              "deviation_std": b.std(ddof=1)} for n, b in zip(ns, back.T, strict=True)]

    # embedding dimension at fixed n
    dim_dev = {}
    for d in protocol.dim_study_dims:
        dim_dev[d] = float(np.mean([forward_deviation(int(d), protocol.dim_study_n, depth,
                                                      "softmax", s, cfg) for s in seeds]))
        rows.append({"study": "dimension", "n": protocol.dim_study_n, "dim": int(d),
                     "deviation_mean": dim_dev[d]})
    metrics["dim_ratio_max_over_min"] = max(dim_dev.values()) / min(dim_dev.values())
    # the Lipschitz constants across embedding widths (the dimension-free estimates)
    widths = [int(d) for d in protocol.dim_study_dims]
    lipschitz = [float(np.mean([lipschitz_constant(d, protocol.dim_study_n, depth, s, cfg)
                                for s in seeds])) for d in widths]
    rows += [{"study": "lipschitz", "n": protocol.dim_study_n, "dim": d,
              "deviation_mean": value} for d, value in zip(widths, lipschitz, strict=True)]
    metrics["lipschitz_exponent_dim"] = fit_loglog_slope(widths, lipschitz)
    control = [float(np.mean([lipschitz_constant(d, protocol.dim_study_n, depth, s, cfg, True)
                              for s in seeds])) for d in widths]
    metrics["lipschitz_exponent_dim_control"] = fit_loglog_slope(widths, control)
    metrics["lipschitz_max_over_min"] = max(lipschitz) / min(lipschitz)

    # the context measure itself: W2 to the limit law decays like n^(-1/d), not n^(-1/2)
    w_ns = ns[ns <= protocol.wasserstein_max_n]
    w2 = np.array([[context_w2(d0, int(n), depth, s, cfg) for n in w_ns] for s in seeds])
    metrics["slope_context_w2"] = slope_with_interval(w_ns, w2)[0]
    curves[f"context W2 (d={d0}, vs a limit sample)"] = w2.mean(axis=0)

    ctx.save_table("deviation_vs_n", rows)
    ctx.save_figure("deviation_vs_n", _figure(ns, w_ns, curves, list(protocol.dims), depth, d0,
                                              list(protocol.depths), dim_dev))
    return metrics


def _figure(ns, w_ns, curves, dims, depth, d0, depths, dim_dev):

    fig, axes = subplots(4, panel=(4.75, 4.3))
    ax = axes[0]
    for i, d in enumerate(dims):
        ax.loglog(ns, curves[f"attention_d{d}_L{depth}"], "o-", color=f"C{i}",
                  label=f"attention d={d}")
        ax.loglog(ns, curves[f"nearest_d{d}_L{depth}"], "s--", color=f"C{i}",
                  label=f"nearest-neighbour d={d}")
    ax.loglog(ns, curves[f"attention_d{dims[0]}_L{depth}"][0] * (ns / ns[0]) ** -0.5, "k:",
              label="n^-1/2")
    ax.set(title=f"forward deviation (L={depth})", xlabel="context size n",
           ylabel="RMS |x_L^(n) - x_L^(inf)|")
    ax.legend(fontsize=6)
    ax = axes[1]
    for L in depths:
        ax.loglog(ns, curves[f"attention_d{d0}_L{L}"], "o-", label=f"L={L}")
    ax.set(title=f"depth, residual weight 1/L (d={d0})", xlabel="n")
    ax.legend(fontsize=7)
    ax = axes[2]
    ax.loglog(ns, curves["backward (sup over OGD iterations)"], "o-", label="backward (OGD)")
    key = next(k for k in curves if k.startswith("context W2"))
    ax.loglog(w_ns, curves[key], "s-", label=key)
    ax.set(title="training and context measure", xlabel="n")
    ax.legend(fontsize=7)
    ax = axes[3]
    ax.semilogx(list(dim_dev), list(dim_dev.values()), "o-", base=2)
    ax.set(title="deviation vs embedding dimension", xlabel="d", ylim=(0, None))
    fig.tight_layout()
    return fig
