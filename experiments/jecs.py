"""jecs protocol (experiment 1): GCR and power of max-p + BH, max-p + Storey-BH, the per-model
union and JECS over repeated synthetic audits, for several contamination designs and levels."""

from __future__ import annotations

from itertools import combinations

import numpy as np
from omegaconf import DictConfig

from data.membership import synthetic_membership
from experiments.runner import register_paper
from experiments.runner.context import RunContext
from methods.jecs import (
    benjamini_hochberg,
    conformal_pvalues,
    fit_envelope,
    max_p,
    storey_bh,
)
from methods.jecs.selection import tail_threshold

PROCEDURES = ("maxp_bh", "maxp_storey", "per_model_union", "jecs")


def _fdp_power(selected: np.ndarray, null: np.ndarray) -> tuple[float, float]:
    fdp = (selected & null).sum() / max(1, selected.sum())
    power = (selected & ~null).sum() / max(1, (~null).sum())
    return float(fdp), float(power)


def _jaccard(a: np.ndarray, b: np.ndarray) -> float:
    union = (a | b).sum()
    return float((a & b).sum() / union) if union else 1.0


def one_audit(scores, m, alphas, rng) -> tuple[dict, float]:
    """All procedures on one synthetic audit: {(procedure, alpha): (GCP, power)}, and the
    minimum pairwise Jaccard overlap of the per-model selections at the headline alpha."""
    per_model_p = np.column_stack([
        conformal_pvalues(cal, scores.scores[:, k], m.randomized_pvalues, rng)
        for k, cal in enumerate(scores.calibration)])
    null = scores.contaminated.any(axis=1)
    p = max_p(per_model_p)
    envelope = fit_envelope(p, per_model_p.shape[1], m.family.name,
                            tail_threshold(p, m.threshold_rule.name), int(m.n_boot), rng=rng)
    p_env = envelope(p)
    out, overlap = {}, 1.0
    for alpha in alphas:
        per_model = [storey_bh(per_model_p[:, k], alpha, m.storey_lambda)
                     for k in range(per_model_p.shape[1])]
        selections = {
            "maxp_bh": benjamini_hochberg(p, alpha),
            "maxp_storey": storey_bh(p, alpha, m.storey_lambda),
            "per_model_union": np.any(per_model, axis=0),
            "jecs": storey_bh(p_env, alpha, m.storey_lambda),
        }
        for name, sel in selections.items():
            out[(name, alpha)] = _fdp_power(sel, null)
        if np.isclose(alpha, m.alpha) and len(per_model) > 1:
            overlap = min(_jaccard(a, b) for a, b in combinations(per_model, 2))
    return out, overlap


@register_paper("jecs")
def run(cfg: DictConfig, ctx: RunContext) -> dict[str, float]:
    m, ds = cfg.method, cfg.dataset
    alphas = sorted({float(a) for a in cfg.protocol.alphas} | {float(m.alpha)})
    reps = int(cfg.protocol.repetitions)
    rows, results, overlaps = [], {}, []
    for design, spec in cfg.protocol.designs.items():
        runs = []
        for _ in ctx.progress(range(reps), f"audits ({design})"):
            scores = synthetic_membership(ds.n_items, ds.n_models, ds.rate_low, ds.rate_high,
                                          spec.design, ds.shift, spec.rho, ds.n_calibration,
                                          ctx.rng)
            audit, overlap = one_audit(scores, m, alphas, ctx.rng)
            runs.append(audit)
            if design == "default":
                overlaps.append(overlap)
        for name in PROCEDURES:
            for alpha in alphas:
                vals = np.array([r[(name, alpha)] for r in runs])
                gcr, power = vals.mean(axis=0)
                gcr_se = vals[:, 0].std(ddof=1) / np.sqrt(reps)
                results[(design, name, alpha)] = (gcr, power, gcr_se)
                rows.append({"design": design, "procedure": name, "alpha": alpha, "gcr": gcr,
                             "gcr_stderr": gcr_se, "power": power})
        ctx.log({f"gcr_jecs_{design}": results[(design, "jecs", float(m.alpha))][0]})
    ctx.save_table("gcr_power", rows)

    a = float(m.alpha)
    metrics = {
        "gcr_jecs_max_over_designs": max(results[(d, "jecs", a)][0]
                                         for d in cfg.protocol.designs),
        "benchmark_overlap_per_model_min": float(np.mean(overlaps)),
    }
    for name in PROCEDURES:
        gcr, power, se = results[("default", name, a)]
        metrics[f"gcr_{name}"] = gcr
        metrics[f"power_{name}"] = power
    metrics["gcr_jecs_stderr"] = results[("default", "jecs", a)][2]
    ctx.save_figure("gcr_power_vs_alpha", _figure(results, alphas, list(cfg.protocol.designs)))
    return metrics


def _figure(results, alphas, designs):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(designs), figsize=(4.2 * len(designs), 7), squeeze=False)
    for col, design in enumerate(designs):
        top, bottom = axes[0, col], axes[1, col]
        for i, name in enumerate(PROCEDURES):
            gcr = [results[(design, name, a)][0] for a in alphas]
            se = [results[(design, name, a)][2] for a in alphas]
            power = [results[(design, name, a)][1] for a in alphas]
            top.errorbar(alphas, gcr, yerr=se, marker="o", color=f"C{i}", label=name,
                         capsize=3)
            bottom.plot(alphas, power, marker="o", color=f"C{i}", label=name)
        top.plot(alphas, alphas, "k--", lw=1, label="y = alpha")
        top.set(title=f"design: {design}", xlabel="alpha", ylabel="GCR")
        bottom.set(xlabel="alpha", ylabel="power (clean-for-all items selected)")
        top.legend(fontsize=7)
    fig.tight_layout()
    return fig
