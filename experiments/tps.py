"""tps protocol: a leaderboard of predictor families under TPS and its contrast metrics,
recalibration's effect, and complete vs censored evaluation."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from data.trajectories import Trajectories, load_agent_log, synthetic_trajectories
from experiments.helpers.figures import subplots
from experiments.runner import register_paper
from experiments.runner.context import RunContext
from experiments.schemas.shared import RootConfig
from experiments.schemas.tps import TPSConfig
from methods.tps import (
    BASE_SCORES,
    WEIGHT_SCHEDULES,
    aurc,
    censored_reduced_score,
    pooled_auprc,
    pooled_auroc,
    scalarized_brier,
    tps,
    trajectory_ece,
)
from methods.tps.predictors import fit_recalibration, paired_bootstrap_ci, predictor_families
from methods.tps.scores import PREDICTABLE_EVERY_STEP

CONTRASTS = {"auroc": pooled_auroc, "auprc": pooled_auprc, "aurc": aurc,
             "ece": trajectory_ece, "scalar_brier": scalarized_brier}
HIGHER_IS_BETTER = {"auroc", "auprc"}


def _variants() -> list[tuple[str, str]]:
    return [(s, w) for s in BASE_SCORES for w in WEIGHT_SCHEDULES]


def leaderboard(families: dict[str, np.ndarray], data: Trajectories, gamma: float
                ) -> dict[str, dict[str, float]]:
    """Metric name -> {predictor: value}; TPS variants are named tps_<score>_<schedule>."""
    board: dict[str, dict[str, float]] = {}
    for score, schedule in _variants():
        board[f"tps_{score}_{schedule}"] = {
            name: float(tps(p, data.y, data.mask, score, schedule, gamma).mean())
            for name, p in families.items()}
    for metric, fn in CONTRASTS.items():
        board[metric] = {name: fn(p, data.y, data.mask) for name, p in families.items()}
    return board


@dataclass
class Evaluation:
    """The held-out split, the predictor families on it and what they are compared with."""

    calib: Trajectories
    test: Trajectories
    pooled_y: np.ndarray  # calibration outcomes, one per observed step
    real: bool  # an agent log: no exact trace, the logged forecast is the reference
    method: TPSConfig

    @property
    def reference(self) -> str:
        return "logged" if self.real else "oracle"

    def families(self, d: Trajectories, rng: np.random.Generator) -> dict[str, np.ndarray]:
        fams = predictor_families(d.q, d.mask, float(self.pooled_y.mean()),
                                  self.method.tempered_tau, self.method.noise_sigma, rng)
        if self.real:  # no exact q: the logged forecast takes the oracle's place
            fams["logged"] = fams.pop("oracle")
        return fams


def elicitation_experiment(ev: Evaluation, families: dict, board: dict, ctx: RunContext
                           ) -> dict[str, float]:
    """1. Which metrics rank the reference trace strictly first (paired bootstrap CIs)."""
    reference, test, method = ev.reference, ev.test, ev.method
    tps_rows, all_first = [], True
    for score, schedule in _variants():
        per_traj = {name: tps(p, test.y, test.mask, score, schedule, method.gamma)
                    for name, p in families.items()}
        for name in families:
            if name == reference:
                continue
            gaps = per_traj[name] - per_traj[reference]
            lo, hi = paired_bootstrap_ci(gaps, method.n_bootstrap,
                                         ctx.rng_for(f"bootstrap {score} {schedule} {name}"))
            tps_rows.append({"score": score, "schedule": schedule, "predictor": name,
                             "gap_vs_reference": float(np.mean(gaps)), "ci_low": lo,
                             "ci_high": hi, "strictly_worse": lo > 0})
            if schedule in PREDICTABLE_EVERY_STEP and not lo > 0:
                all_first = False
    ctx.save_table("tps_gaps_bootstrap", tps_rows)
    metrics = {f"ranks_{reference}_first_{k}": int(_ranks_first(vals, reference, k))
               for k, vals in board.items() if not k.startswith("tps_") or
               k.endswith("_uniform")}
    if not ev.real:
        metrics["tps_oracle_first_all"] = int(all_first)
        # 1/T_i weights put weight on every step but are not predictable (T_i is known only
        # at the end): reported separately, since propriety is not guaranteed for them
        metrics["tps_oracle_first_per_trajectory"] = int(all(
            r["strictly_worse"] for r in tps_rows if r["schedule"] == "per_trajectory"))

    def gap(metric: str, other: str) -> float:
        return board[metric][other] - board[metric][reference]

    metrics[f"last_step_{reference}_vs_final_only_gap"] = gap("tps_brier_last", "final_only")
    metrics["ece_constant_baserate"] = board["ece"]["constant"]
    metrics[f"ece_{reference}"] = board["ece"][reference]
    metrics[f"tps_gap_constant_vs_{reference}"] = gap("tps_brier_uniform", "constant")
    metrics[f"scalar_brier_gap_mean_matched_vs_{reference}"] = gap("scalar_brier",
                                                                   "mean_matched")
    metrics[f"tps_gap_mean_matched_vs_{reference}"] = gap("tps_brier_uniform", "mean_matched")
    return metrics


def recalibration_experiment(ev: Evaluation, families: dict, ctx: RunContext
                             ) -> dict[str, float]:
    """2. Recalibrating the overconfident predictor, fitted on the calibration split."""
    calib, test = ev.calib, ev.test
    calib_fams = ev.families(calib, ctx.rng_for("calibration predictors"))
    rows, metrics = [], {}
    for kind in ("temperature", "platt", "isotonic"):
        fmap = fit_recalibration(kind, calib_fams["tempered"][calib.mask], ev.pooled_y)
        before = families["tempered"]
        after = np.where(test.mask, fmap(before), 0.5)
        row = {"recalibration": kind}
        for metric in ("auroc", "auprc", "ece", "tps_brier_uniform", "tps_log_uniform"):
            row[f"{metric}_before"] = _metric(metric, before, test)
            row[f"{metric}_after"] = _metric(metric, after, test)
        rows.append(row)
        if kind == ev.method.recalibration.name:
            metrics["auroc_change_under_recalibration"] = row["auroc_after"] - row["auroc_before"]
            metrics["tps_change_under_recalibration"] = (row["tps_brier_uniform_after"]
                                                         - row["tps_brier_uniform_before"])
    ctx.save_table("recalibration", rows)
    return metrics


def censoring_experiment(ev: Evaluation, families: dict, design_cfg, ctx: RunContext
                         ) -> dict[str, float]:
    """3. Administrative censoring at Z: the exact reduced score vs complete data, and the
    verdicts of complete-only evaluation vs the tractable approximation (own p_Z for q_Z),
    on the main data and on a designed case (fixed horizon: most trajectories censor)."""
    designs = {"main": (ev.test, families)}
    if not ev.real:
        design_data = synthetic_trajectories(design_cfg, ctx.rng_for("censoring design"))
        designs["designed"] = (design_data, ev.families(design_data,
                                                        ctx.rng_for("censoring predictors")))
    rows, metrics = [], {}
    for design, (d, fams) in designs.items():
        rows_d, exact_diff = _censoring(d, fams, ev.reference, with_exact=not ev.real)
        rows += [{"design": design, **r} for r in rows_d]
        if design == "designed":
            ref_row, other_row = rows_d
            metrics["censored_approx_verdict_changed"] = int(
                (ref_row["complete_only"] < other_row["complete_only"])
                != (ref_row["approx_own_p_stop"] < other_row["approx_own_p_stop"]))
            metrics["censored_vs_complete_diff"] = float(exact_diff.mean())  # signed
            metrics["censored_vs_complete_stderr"] = float(exact_diff.std(ddof=1)
                                                           / np.sqrt(len(exact_diff)))
            metrics["censored_fraction_designed"] = rows_d[0]["censored_fraction"]
    ctx.save_table("censoring_verdicts", rows)
    return metrics


@register_paper("tps")
def run(cfg: RootConfig, ctx: RunContext) -> dict[str, float]:
    real = cfg.dataset.name == "agent_log"
    data = (load_agent_log(cfg.dataset.path) if real
            else synthetic_trajectories(cfg.dataset, ctx.rng_for("trajectories")))
    calib, test = data.split(cfg.protocol.calibration_fraction)
    pooled_y = np.broadcast_to(calib.y[:, None], calib.mask.shape)[calib.mask]
    ev = Evaluation(calib, test, pooled_y, real, cfg.method)
    ctx.info(f"{cfg.dataset.name}: {len(test.y)} test trajectories, mean length "
             f"{test.mask.sum(1).mean():.1f}, success rate {test.y.mean():.3f}")
    families = ev.families(test, ctx.rng_for("test predictors"))
    board = leaderboard(families, test, cfg.method.gamma)
    ctx.save_table("leaderboard", [{"metric": metric, **vals} for metric, vals in board.items()])
    metrics = elicitation_experiment(ev, families, board, ctx)
    metrics |= recalibration_experiment(ev, families, ctx)
    metrics |= censoring_experiment(ev, families, cfg.protocol.censoring_design, ctx)
    ctx.save_figure("leaderboard_ranks", _rank_figure(board, list(families)))
    return metrics


def _metric(metric: str, p: np.ndarray, d: Trajectories) -> float:
    """A contrast metric by name, or ``tps_<score>_<schedule>``."""
    if metric in CONTRASTS:
        return CONTRASTS[metric](p, d.y, d.mask)
    _, score, schedule = metric.split("_", 2)
    return float(tps(p, d.y, d.mask, score, schedule).mean())


def _censoring(d: Trajectories, fams: dict[str, np.ndarray], reference: str,
               with_exact: bool) -> tuple[list[dict], np.ndarray]:
    """Scores of the reference and the overconfident predictor under complete-only
    evaluation, the approximation with their own p_Z, and (with the exact trace) the exact
    q_Z-weighted reduced score; plus the per-trajectory difference between the exact reduced
    score and the complete-data score restricted to t <= Z (mean 0 in expectation)."""
    t = np.arange(d.mask.shape[1])
    observed = d.mask & (t[None, :] < d.censor[:, None])
    lengths = d.mask.sum(1)
    stop = np.minimum(d.censor, lengths) - 1
    complete = lengths <= d.censor
    rows, exact_diff = [], np.array([np.nan])
    for name in (reference, "tempered"):
        p = fams[name]
        row = {"predictor": name, "censored_fraction": float(1 - complete.mean()),
               "complete_only": float(tps(p[complete], d.y[complete],
                                          d.mask[complete]).mean()),
               "approx_own_p_stop": float(censored_reduced_score(
                   p, p[np.arange(len(stop)), stop], observed).mean())}
        if with_exact:
            q_stop = d.q[np.arange(len(stop)), stop]
            row["exact_q_stop"] = float(censored_reduced_score(p, q_stop, observed).mean())
            if name == reference:
                exact_diff = (censored_reduced_score(p, q_stop, observed)
                              - tps(p, d.y, observed))
        rows.append(row)
    return rows, exact_diff


def _ranks_first(values: dict[str, float], reference: str, metric: str) -> bool:
    """Is the reference strictly best under this metric (ties are not first)?"""
    sign = -1 if metric in HIGHER_IS_BETTER else 1
    ref = sign * values[reference]
    return all(sign * v > ref for k, v in values.items() if k != reference)


def _rank_figure(board: dict[str, dict[str, float]], predictors: list[str]):
    from scipy.stats import rankdata

    metrics = list(board)
    ranks = np.array([rankdata([(-1 if m in HIGHER_IS_BETTER else 1) * board[m][p]
                                for p in predictors], method="min") for m in metrics])
    fig, ax = subplots(panel=(1.1 * len(predictors) + 3, 0.32 * len(metrics) + 1.5))
    ax.imshow(ranks, cmap="RdYlGn_r", aspect="auto", vmin=1, vmax=len(predictors))
    for i, m in enumerate(metrics):
        for j, p in enumerate(predictors):
            ax.text(j, i, f"{board[m][p]:.3g}", ha="center", va="center", fontsize=6,
                    fontweight="bold" if ranks[i, j] == 1 else "normal")
    ax.set_xticks(range(len(predictors)), predictors, rotation=30, ha="right")
    ax.set_yticks(range(len(metrics)), metrics, fontsize=7)
    ax.set_title("rank of each predictor under each metric (green = best; value shown)")
    fig.tight_layout()
    return fig
