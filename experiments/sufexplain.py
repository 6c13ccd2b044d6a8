"""sufexplain protocol: train a NAM, an NA2M (interaction graph chosen from the training
data) and a plain MLP; explain test points with the exact and interaction-aware
algorithms on the NA2M, the NAM algorithm on the NAM, and the generic verifier-driven
baseline on the NA2M and the MLP; check every returned explanation with an independent
whole-model MILP."""

from __future__ import annotations

import numpy as np

from data.binary_tabular import binary_task, select_edges
from experiments.helpers.figures import subplots
from experiments.runner import register_paper
from experiments.runner.context import RunContext
from experiments.schemas.shared import RootConfig
from experiments.schemas.sufexplain import BinaryTabularConfig
from methods.sufexplain import (
    AdditiveNet,
    MLPNet,
    accuracy,
    exact_explanation,
    interaction_aware_explanation,
    is_sufficient,
    nam_explanation,
    perturbation_box,
    sensitivity_order,
    train_classifier,
    verix_explanation,
)

OURS = ("exact", "interaction_aware", "nam")
LABELS = {"exact": "NA2M exact (ours)", "interaction_aware": "NA2M interaction-aware (ours)",
          "nam": "NAM algorithm", "baseline": "NA2M verifier baseline",
          "mlp_baseline": "MLP verifier baseline"}


def train_models(cfg: RootConfig, ctx: RunContext, task, edges) -> dict:
    protocol, hidden = cfg.protocol, list(cfg.method.hidden)
    n = task.x_train.shape[1]
    nets = {"nam": AdditiveNet(n, [], hidden), "na2m": AdditiveNet(n, edges, hidden),
            "mlp": MLPNet(n, list(protocol.mlp_hidden))}
    for name in ctx.progress(list(nets), "training NAM, NA2M, MLP"):
        train_classifier(nets[name], task.x_train, task.y_train, protocol.epochs,
                         protocol.batch_size, protocol.lr, protocol.weight_decay,
                         protocol.output_penalty, ctx.compute)
    return nets


def explain_point(models: dict, x: np.ndarray, lo, hi, max_component: int,
                  explain_mlp: bool) -> dict:
    """Every algorithm's explanation of one point, keyed by algorithm."""
    na2m = models["na2m"]
    out = {"exact": exact_explanation(na2m, x, lo, hi, max_component),
           "interaction_aware": interaction_aware_explanation(na2m, x, lo, hi),
           "nam": nam_explanation(models["nam"], x, lo, hi),
           "baseline": verix_explanation(na2m, x, lo, hi, sensitivity_order(na2m, x, lo, hi))}
    if explain_mlp:
        mlp = models["mlp"]
        out["mlp_baseline"] = verix_explanation(mlp, x, lo, hi, sensitivity_order(mlp, x, lo, hi))
    return out


def real_data_accuracy(cfg: RootConfig, ctx: RunContext) -> dict[str, float]:
    """The NAM, the NA2M and the MLP trained alike on a real binary task
    (``protocol.real_data``): their held-out accuracy (``acc_<model>_real``), and NA2M's
    lead over the NAM as Cohen's h (``acc_na2m_vs_nam_real_cohens_h``: 2 asin sqrt p1 -
    2 asin sqrt p2, the effect size of a difference of two proportions)."""
    if cfg.protocol.real_data is None:
        return {}
    data = BinaryTabularConfig(name="binary_tabular", source=cfg.protocol.real_data,
                               test_fraction=0.25)
    task = binary_task(data, ctx.rng_for("real data split"))
    method = cfg.method
    edges = select_edges(task.x_train, task.y_train, method.edges, method.max_component)
    with ctx.streams.torch_default("real data models"):
        nets = train_models(cfg, ctx, task, edges)
    out = {f"acc_{name}_real": accuracy(net, task.x_test, task.y_test)
           for name, net in nets.items()}
    out["acc_na2m_vs_nam_real_cohens_h"] = float(
        2 * np.arcsin(np.sqrt(out["acc_na2m_real"])) - 2 * np.arcsin(np.sqrt(out["acc_nam_real"])))
    return out


@register_paper("sufexplain")
def run(cfg: RootConfig, ctx: RunContext) -> dict[str, float]:
    protocol, method = cfg.protocol, cfg.method
    task = binary_task(cfg.dataset, ctx.rng_for("task"))
    edges = select_edges(task.x_train, task.y_train, method.edges, method.max_component)
    nets = train_models(cfg, ctx, task, edges)
    key = task.name
    metrics = {f"acc_{name}_{key}": accuracy(net, task.x_test, task.y_test)
               for name, net in nets.items()}
    metrics |= real_data_accuracy(cfg, ctx)
    models = {name: net.export() for name, net in nets.items()}
    owner = {"exact": "na2m", "interaction_aware": "na2m", "nam": "nam", "baseline": "na2m",
             "mlp_baseline": "mlp"}
    rows, insufficient = [], 0
    points = task.x_test[:protocol.points]
    for index, x in enumerate(ctx.progress(points, "explained points")):
        lo, hi = perturbation_box(x, protocol.eps, task.domain_lo, task.domain_hi)
        for algorithm, found in explain_point(models, x, lo, hi, method.max_component,
                                              protocol.explain_mlp).items():
            checked = None
            if algorithm in OURS:  # the baseline verifies every step itself
                checked = is_sufficient(models[owner[algorithm]], x, found.fixed, lo, hi)
                insufficient += not checked
            rows.append({"point": index, "algorithm": algorithm, "size": found.size,
                         "solver_calls": found.solver_calls, "seconds": found.seconds,
                         "verified_sufficient": checked})
    ctx.save_table("explanations", rows)
    for algorithm, name in (("exact", "ours_exact"), ("baseline", "baseline")):  # paired
        ctx.save_instances(f"size_{name}_mean", {f"point {r['point']}": r["size"]
                                                 for r in rows if r["algorithm"] == algorithm})
    summary = _summary(rows)
    ctx.save_table("algorithms", [{"algorithm": a, **s} for a, s in summary.items()])
    ctx.save_figure("explanations", _figure(summary, rows))
    for algorithm, s in summary.items():
        name = {"exact": "ours_exact", "interaction_aware": "ours_ia"}.get(algorithm, algorithm)
        metrics.update({f"size_{name}_mean": s["size_mean"],
                        f"seconds_{name}_mean": s["seconds_mean"],
                        f"solver_calls_{name}_mean": s["calls_mean"]})
    metrics["time_speedup_ours_vs_baseline"] = (summary["baseline"]["seconds_mean"]
                                                / summary["exact"]["seconds_mean"])
    metrics["insufficient_found"] = insufficient
    metrics["features"] = task.x_train.shape[1]
    metrics["interaction_edges"] = len(edges)
    return metrics


def _summary(rows: list[dict]) -> dict[str, dict[str, float]]:
    out = {}
    for algorithm in dict.fromkeys(r["algorithm"] for r in rows):
        mine = [r for r in rows if r["algorithm"] == algorithm]
        out[algorithm] = {"size_mean": float(np.mean([r["size"] for r in mine])),
                          "size_median": float(np.median([r["size"] for r in mine])),
                          "seconds_mean": float(np.mean([r["seconds"] for r in mine])),
                          "calls_mean": float(np.mean([r["solver_calls"] for r in mine]))}
    return out


def _figure(summary: dict, rows: list[dict]):
    fig, axes = subplots(2, panel=(5.5, 3.8))
    names = list(summary)
    labels = [LABELS.get(n, n) for n in names]
    sizes = [[r["size"] for r in rows if r["algorithm"] == n] for n in names]
    seconds = [[r["seconds"] for r in rows if r["algorithm"] == n] for n in names]
    axes[0].boxplot(sizes, showmeans=True)
    axes[0].set(title="explanation size (fixed features)", ylabel="features")
    axes[1].boxplot(seconds, showmeans=True)
    axes[1].set(title="time per explanation", ylabel="seconds", yscale="log")
    for ax in axes:
        ax.set_xticks(range(1, len(names) + 1), labels, rotation=30, ha="right", fontsize=7)
    fig.tight_layout()
    return fig
