"""gscoreset protocol: a procedural 3DGS scene (or a trained point_cloud.ply) with prescribed
and novel cameras; every sampler and pruning baseline at each budget, prune-only (weights
rendered as 1 - (1 - alpha)^w) and after a K-step finetune; PSNR/SSIM against the full
scene's renders on both view sets and the worst-case relative objective error over the
prescribed rays; and the guarantee sweep on a small scene up to the theoretical sample size."""

from __future__ import annotations

import numpy as np
import torch
from torchmetrics.functional.image import (
    peak_signal_noise_ratio,
    structural_similarity_index_measure,
)

from data.splat_scenes import procedural_scene, scene_and_cameras, sphere_cameras
from experiments.helpers.figures import subplots
from experiments.runner import register_paper
from experiments.runner.context import RunContext
from experiments.schemas.shared import RootConfig
from methods.gscoreset import (
    RayObjective,
    blending_totals,
    finetune,
    lightgaussian_scores,
    multinomial_sample,
    poisson_sample,
    pup_fisher_scores,
    render,
    sample_size_bound,
    sensitivities,
    top_k,
)

SAMPLERS = ("sensitivity", "uniform", "importance")  # weighted Poisson sampling
LABELS = {"sensitivity": "sensitivity, weighted (ours)", "uniform": "uniform, weighted",
          "uniform_unweighted": "uniform, unweighted",
          "importance": "Mini-Splatting prob., weighted", "opacity_topk": "top-k opacity",
          "lightgaussian_topk": "top-k LightGaussian", "minisplat_topk": "top-k Mini-Splatting",
          "pup_topk": "top-k PUP Fisher"}


def method_scores(cfg: RootConfig, gaussians, cameras, objective: RayObjective) -> dict:
    """Each method's scores: sampling probabilities up to a factor for the samplers, ranks
    for the top-k pruners."""
    shares = objective.shares()
    method = cfg.method
    totals = blending_totals(gaussians, cameras)
    blending = totals["blend"]  # Mini-Splatting's importance
    scores = {"sensitivity": sensitivities(shares, method.sensitivity.name, method.uniform_mix),
              "uniform": torch.ones(len(gaussians)),
              "uniform_unweighted": torch.ones(len(gaussians)),
              "importance": blending,
              "opacity_topk": gaussians.opacities.detach(),
              "lightgaussian_topk": lightgaussian_scores(gaussians, totals,
                                                         method.lightgaussian_with_t),
              "minisplat_topk": blending}
    if method.pup:
        scores["pup_topk"] = pup_fisher_scores(gaussians, cameras, method.pup_patch)
    return scores, shares


def select(name: str, scores: torch.Tensor, budget: int, generator: torch.Generator):
    if name.endswith("_topk"):
        return top_k(scores, budget)
    if name == "uniform_unweighted":
        return poisson_sample(scores, budget, generator, weighted=False)
    return poisson_sample(scores, budget, generator)


def image_quality(gaussians, cameras, targets, weights=None) -> tuple[float, float]:
    psnr, ssim = [], []
    for camera, target in zip(cameras, targets, strict=True):
        image = render(gaussians, camera, weights)[0].clamp(0, 1)
        a, b = image.permute(2, 0, 1)[None], target.permute(2, 0, 1)[None]
        psnr.append(peak_signal_noise_ratio(a, b, data_range=1.0).item())
        ssim.append(structural_similarity_index_measure(a, b, data_range=1.0).item())
    return float(np.mean(psnr)), float(np.mean(ssim))


def guarantee_sweep(cfg: RootConfig, rng: np.random.Generator, generator: torch.Generator):
    """Failure rate of multinomial sensitivity sampling (any prescribed ray off by more than
    eps (F + eta)) against the sample size, up to the Bernstein + union bound."""
    g = cfg.protocol.guarantee
    scene = procedural_scene(g.gaussians, rng)
    cameras = sphere_cameras(g.views, rng, g.size)
    objective = RayObjective(scene, cameras, cfg.method.eta)
    s = objective.shares()["max"]
    total = float(s.sum())
    bound = sample_size_bound(total, objective.rays, g.eps, g.delta)
    rows = []
    for fraction in g.fractions:
        m = max(1, int(round(fraction * bound)))
        failures = sum(bool((objective.errors(multinomial_sample(s, m, generator)) > g.eps)
                            .any()) for _ in range(g.trials))
        rows.append({"fraction_of_bound": fraction, "m": m, "failure_rate": failures / g.trials})
    return {"total_sensitivity": total, "rays": objective.rays, "bound": bound,
            "gaussians": g.gaussians, "rows": rows}


@register_paper("gscoreset")
def run(cfg: RootConfig, ctx: RunContext) -> dict[str, float]:
    protocol, method = cfg.protocol, cfg.method
    scene, prescribed, novel, extent = scene_and_cameras(cfg.dataset,
                                                         ctx.rng_for("scene and cameras"))
    n = len(scene)
    with torch.no_grad():
        targets = {"prescribed": [render(scene, c)[0].clamp(0, 1) for c in prescribed],
                   "novel": [render(scene, c)[0].clamp(0, 1) for c in novel]}
    objective = RayObjective(scene, prescribed, method.eta)
    scores, shares = method_scores(cfg, scene, prescribed, objective)
    rows = []
    jobs = [(name, b) for b in protocol.budgets for name in scores]
    for name, budget_fraction in ctx.progress(jobs, "coresets (method x budget)"):
        budget = max(1, int(round(budget_fraction * n)))
        coreset = select(name, scores[name], budget,
                         ctx.streams.torch(f"coreset {name} at {budget_fraction:g}"))
        weights = coreset.full_weights(n)
        errors = objective.errors(coreset)
        row = {"method": name, "budget": budget_fraction, "kept": len(coreset),
               "worst_objective_err": float(errors.max()),
               "mean_objective_err": float(errors.mean())}
        with torch.no_grad():
            for views in ("prescribed", "novel"):
                cams = prescribed if views == "prescribed" else novel
                row[f"psnr_{views}"], row[f"ssim_{views}"] = image_quality(
                    scene, cams, targets[views], weights)
        rows.append(row)
        if budget_fraction == protocol.finetune_budget and name in protocol.finetune_methods:
            kept = scene.subset(coreset.index).with_weights_in_opacity(coreset.weights)
            tuned = finetune(kept, prescribed, targets["prescribed"], protocol.finetune_steps,
                             extent, ctx.compute)
            with torch.no_grad():
                row["psnr_prescribed_finetuned"], _ = image_quality(
                    tuned, prescribed, targets["prescribed"])
                row["psnr_novel_finetuned"], _ = image_quality(tuned, novel, targets["novel"])
    ctx.save_table("coresets", rows)
    guarantee = guarantee_sweep(cfg, ctx.rng_for("guarantee scene"),
                                ctx.streams.torch("guarantee samples"))
    ctx.save_table("guarantee", guarantee["rows"])
    ctx.save_figure("coresets", _figure(rows, guarantee, cfg.protocol.guarantee.delta))
    return _metrics(rows, shares, objective, guarantee, protocol)


def _row(rows, name, budget):
    return next(r for r in rows if r["method"] == name and abs(r["budget"] - budget) < 1e-9)


def _metrics(rows, shares, objective, guarantee, protocol) -> dict[str, float]:
    metrics = {
        "psnr_sensitivity_weighted_10pct": _row(rows, "sensitivity", 0.1)["psnr_novel"],
        "psnr_opacity_topk_10pct": _row(rows, "opacity_topk", 0.1)["psnr_novel"],
        "psnr_uniform_weighted_10pct": _row(rows, "uniform", 0.1)["psnr_novel"],
        "worst_objective_err_sensitivity_20pct":
            _row(rows, "sensitivity", 0.2)["worst_objective_err"],
        "worst_objective_err_importance_20pct":
            _row(rows, "importance", 0.2)["worst_objective_err"],
        "worst_objective_err_uniform_20pct": _row(rows, "uniform", 0.2)["worst_objective_err"],
        "total_sensitivity": float(shares["max"].sum()),
        "total_sensitivity_over_rays": float(shares["max"].sum()) / objective.rays,
        "guarantee_failure_rate_at_bound": guarantee["rows"][-1]["failure_rate"],
        "guarantee_sample_size_bound": guarantee["bound"],
    }
    for r in rows:
        if r["budget"] == 0.1:
            metrics[f"psnr_prescribed_{r['method']}_10pct"] = r["psnr_prescribed"]
            metrics[f"psnr_novel_{r['method']}_10pct"] = r["psnr_novel"]
            if "psnr_novel_finetuned" in r:
                metrics[f"psnr_novel_{r['method']}_10pct_finetuned"] = r["psnr_novel_finetuned"]
    return metrics


def _figure(rows, guarantee, delta):
    fig, axes = subplots(3, panel=(5.0, 3.8))
    for name in dict.fromkeys(r["method"] for r in rows):
        mine = sorted((r for r in rows if r["method"] == name), key=lambda r: r["budget"])
        budgets = [100 * r["budget"] for r in mine]
        style = "-o" if name == "sensitivity" else "--" if name in SAMPLERS else ":"
        axes[0].plot(budgets, [r["psnr_novel"] for r in mine], style, label=LABELS[name])
        if name in (*SAMPLERS, "uniform_unweighted"):
            axes[1].plot(budgets, [r["worst_objective_err"] for r in mine], style,
                         label=LABELS[name])
    axes[0].set(title="prune-only PSNR on novel views", xlabel="budget (% of Gaussians)",
                ylabel="PSNR (dB)", xscale="log")
    axes[1].set(title="worst relative objective error (prescribed rays)",
                xlabel="budget (% of Gaussians)", xscale="log", yscale="log")
    g = guarantee["rows"]
    axes[2].plot([r["m"] for r in g], [r["failure_rate"] for r in g], "-o",
                 label="sensitivity sampling")
    axes[2].axhline(delta, color="gray", ls=":", label=f"delta = {delta}")
    axes[2].axvline(guarantee["bound"], color="k", ls="--", label="3 S ln(2|R|/delta)/eps^2")
    axes[2].set(title=f"guarantee (N = {guarantee['gaussians']}, |R| = {guarantee['rays']})",
                xlabel="samples m", ylabel="failure rate", xscale="log")
    ticks = sorted({100 * r["budget"] for r in rows})
    for ax in axes[:2]:
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
        ax.minorticks_off()
    for ax in axes:
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
