"""sparseshap protocol: relative error vs budget for Kernel SHAP, Leverage SHAP and Sparse
Leverage SHAP on a sparse game and a real-data explanation game; budget needed for error
1e-2 vs n and s."""

from __future__ import annotations

import numpy as np

from common.errors import UserError
from common.streams import Streams
from data.tabular import load_tabular
from experiments.helpers.figures import subplots
from experiments.helpers.fits import fit_loglog_slope, slope_with_interval
from experiments.runner import register_paper
from experiments.runner.context import RunContext
from experiments.schemas.shared import RootConfig
from methods.sparseshap import ESTIMATORS, CountingValueFunction
from methods.sparseshap.games import explanation_game, random_sparse_game

SPARSE_OPTIONS = ("sparsity", "decoder", "size_distribution", "mixture", "penalty", "cv_folds")


class Evaluator:
    """Runs estimators on games and keeps the evaluation count honest."""

    def __init__(self, cfg: RootConfig, streams: Streams) -> None:
        self.streams = streams  # the run's estimator sampling
        self.games = streams.fixed("scaling games")  # the same games at every run seed
        self.total_evaluations = 0
        method = cfg.method
        self.sparse_kwargs = {k: getattr(method, k) for k in SPARSE_OPTIONS if hasattr(method, k)}

    def relerr(self, estimator: str, game, phi: np.ndarray, n: int, budget: int,
               *draw: int) -> float:
        """Relative error of one estimate; the sampling seed depends on ``draw`` (the game's
        index, and a stream number where several are wanted), n and the budget only, so
        every estimator sees the same random stream (Leverage SHAP and Sparse Leverage SHAP
        with its default sizes: the same coalitions) and their errors are compared on the
        same draws."""
        value = CountingValueFunction(game, n)
        kwargs = self.sparse_kwargs if estimator == "sparse_leverage_shap" else {}
        rng = self.streams.numpy(f"n={n} budget={int(budget)} draw={draw}")
        est = ESTIMATORS[estimator](value, int(budget), rng, **kwargs)
        if value.evaluations > budget:
            raise RuntimeError(f"{estimator} used {value.evaluations} > {budget} evaluations")
        self.total_evaluations += value.evaluations
        if not np.all(np.isfinite(est)):
            return float("nan")
        return float(np.sum((est - phi) ** 2) / np.sum(phi**2))


def _sparse_game(cfg_sparse, n: int, s: int, rng):
    game = random_sparse_game(n, s, rng, cfg_sparse.n_pairs, cfg_sparse.n_higher,
                              interaction_scale=cfg_sparse.interaction_scale)
    return game, game.shapley()


def _real_games(cfg_real, rng):
    """(game, exact phi, n) for random explicands of a gradient-boosted tree model; exact
    interventional Shapley values (one baseline row: the feature means) by shap.TreeExplainer."""
    import shap
    from sklearn.ensemble import GradientBoostingRegressor

    X, y = load_tabular(cfg_real.source, cfg_real.target)
    model = GradientBoostingRegressor(n_estimators=100, max_depth=4, random_state=0).fit(X, y)
    baseline = X.mean(axis=0)
    explainer = shap.TreeExplainer(model, data=baseline[None, :],
                                   feature_perturbation="interventional")
    games = []
    for row in rng.permutation(len(X)):
        phi = np.asarray(explainer.shap_values(X[row][None, :])[0], dtype=float)
        if np.sum(phi**2) > 1e-12:
            games.append((explanation_game(model.predict, X[row], baseline), phi, X.shape[1]))
        if len(games) == cfg_real.explicands:
            break
    return games


def budget_to_target(ev: Evaluator, estimator: str, cfg_sparse, n: int, s: int, reps: int,
                     budgets, target: float, stream: int = 0) -> float:
    """Budget at which the median relative error first reaches ``target``: the first grid
    budget at or below it, interpolated on log-log axes with the grid point before (the grid
    alone would quantize the fitted exponents); inf if the grid never gets there.
    Games of repetition r come from a fixed stream named by r and s alone, so every n (and
    every run seed) sees the same coefficients; ``stream`` numbers an independent sampling
    stream."""
    games = [_sparse_game(cfg_sparse, n, s, ev.games.numpy(f"repetition {r} s={s}"))
             for r in range(reps)]
    previous = None
    for budget in budgets:
        err = float(np.nanmedian([ev.relerr(estimator, g, phi, n, budget, r, stream)
                                  for r, (g, phi) in enumerate(games)]))
        if err <= target:
            if previous is None or not previous[1] > err > 0:
                return float(budget)
            (b0, e0), (b1, e1) = np.log(previous), np.log([budget, err])
            return float(np.exp(b0 + (np.log(target) - e0) * (b1 - b0) / (e1 - e0)))
        previous = (budget, err)
    return float("inf")


def real_game_experiment(ev: Evaluator, estimators, real, source: str, protocol, rows: list
                         ) -> dict[str, float]:
    """Median relative error of every estimator on the real explanation games ``real`` at
    budgets ``real_budget_multiples`` x n; the sparse / Leverage SHAP ratio at each."""
    n_real = real[0][2]
    metrics = {}
    for multiple in protocol.real_budget_multiples:
        budget = multiple * n_real
        median = {}
        for est in estimators:
            median[est] = float(np.nanmedian([ev.relerr(est, g, phi, nr, budget, r)
                                              for r, (g, phi, nr) in enumerate(real)]))
            rows.append({"game": f"real_{source}", "estimator": est,
                         "budget": budget, "relerr_median": median[est]})
            metrics[f"real_game_relerr_median_{est.removesuffix('_shap')}_{multiple}n"] = (
                median[est])
        metrics[f"real_game_relerr_ratio_sparse_vs_leverage_{multiple}n"] = (
            median["sparse_leverage_shap"] / median["leverage_shap"])
    headline = protocol.real_budget_multiples[len(protocol.real_budget_multiples) // 2]
    metrics["real_game_relerr_ratio_sparse_vs_leverage"] = metrics[
        f"real_game_relerr_ratio_sparse_vs_leverage_{headline}n"]
    return metrics


def scaling_experiment(ev: Evaluator, sparse_cfg, n: int, s: int, protocol, ctx: RunContext
                       ) -> tuple[dict[str, float], list[dict]]:
    """Budget for median error ``target_error`` against n (Sparse Leverage SHAP over
    ``scaling.seeds`` sampling seeds: the exponent is fitted on the geometric mean, its
    interval from the per-seed exponents; Leverage SHAP as the dense contrast) and s."""
    scaling = protocol.scaling
    rows = []
    runs = [("sparse_leverage_shap", "n", seed) for seed in range(scaling.seeds)]
    runs += [("sparse_leverage_shap", "s", 0), ("leverage_shap", "n", 0)]
    for est, axis, seed in runs:
        for val in ctx.progress(list(getattr(scaling, f"{axis}_values")),
                                f"{est} budget vs {axis} (seed {seed})"):
            nn, ss = (val, s) if axis == "n" else (n, val)
            need = budget_to_target(ev, est, sparse_cfg, nn, ss, scaling.repetitions,
                                    list(scaling.budgets), protocol.target_error, seed)
            rows.append({"estimator": est, "axis": axis, "seed": seed, "n": nn, "s": ss,
                         "budget_to_target": need})
    metrics = {}
    xs = list(scaling.n_values)
    per_seed = np.array([[r["budget_to_target"] for r in rows if r["estimator"] ==
                          "sparse_leverage_shap" and r["axis"] == "n" and r["seed"] == seed]
                         for seed in range(scaling.seeds)])
    reached = np.all(np.isfinite(per_seed), axis=0)
    if not reached.all():
        ctx.info(f"budget for error {protocol.target_error} not reached within the grid at "
                 f"n = {[x for x, ok in zip(xs, reached, strict=True) if not ok]}")
    mean_curve = np.exp(np.log(per_seed).mean(axis=0))
    metrics["budget_exponent_n"] = fit_loglog_slope(np.array(xs)[reached], mean_curve[reached])
    _, low, high = slope_with_interval(np.array(xs)[reached], per_seed[:, reached])
    metrics["budget_exponent_n_ci_low"], metrics["budget_exponent_n_ci_high"] = low, high
    metrics["budget_exponent_n_reached_all"] = int(reached.all())
    # "no power of n" up to the tilde's logarithmic factor: the exponent that one factor
    # log(n / s) (sparse recovery's s log(n / s) measurements) shows over the same n grid
    grid = np.array(xs, dtype=float)
    metrics["budget_exponent_n_log_factor"] = fit_loglog_slope(grid, np.log(grid / s))
    for est, axis, key in (("sparse_leverage_shap", "s", "budget_exponent_s"),
                           ("leverage_shap", "n", "budget_exponent_n_leverage")):
        metrics[key] = fit_loglog_slope(*zip(*_budget_curve(rows, est, axis), strict=True))
    ctx.save_table("budget_to_target", rows)
    return metrics, rows


@register_paper("sparseshap")
def run(cfg: RootConfig, ctx: RunContext) -> dict[str, float]:
    protocol, data_cfg = cfg.protocol, cfg.dataset
    chosen = str(cfg.method.name)
    if chosen not in ESTIMATORS:
        raise UserError(f"sparseshap needs method={'|'.join(ESTIMATORS)}, not '{chosen}'")
    n, s = data_cfg.sparse.n, data_cfg.sparse.s
    default_budget = (protocol.budget if protocol.budget is not None
                      else int(round(4 * s * s * np.log(n))))
    ev = Evaluator(cfg, ctx.streams.child("estimator sampling"))
    metrics: dict[str, float] = {"budget": default_budget}
    estimators = list(ESTIMATORS) if protocol.compare else [chosen]
    # the real data first: a source that cannot be read fails before any work
    real = _real_games(data_cfg.real, ctx.rng_for("real games")) if protocol.compare else None

    game_rng = ctx.rng_for("games")
    games = [_sparse_game(data_cfg.sparse, n, s, game_rng) for _ in range(protocol.repetitions)]
    budgets = sorted({int(max(8, round(f * n))) for f in protocol.budget_multipliers}
                     | {default_budget}) if protocol.compare else [default_budget]
    rows, curves = [], {}
    for est in ctx.progress(estimators, "estimators (sparse game)"):
        curves[est] = []
        for budget in budgets:
            errs = np.array([ev.relerr(est, g, phi, n, budget, r)
                             for r, (g, phi) in enumerate(games)])
            q1, med, q3 = np.nanpercentile(errs, [25, 50, 75])
            curves[est].append((budget, q1, med, q3))
            rows.append({"game": f"sparse_n{n}_s{s}", "estimator": est, "budget": budget,
                         "relerr_q1": q1, "relerr_median": med, "relerr_q3": q3,
                         "n_nan": int(np.isnan(errs).sum())})
            if budget == default_budget:
                key = est.removesuffix("_shap")
                metrics[f"relerr_median_{key}"] = float(med)
                if est == chosen:
                    metrics["relerr_median"] = float(med)
    metrics["smallest_budget_nan_count"] = int(sum(r["n_nan"] for r in rows))
    for est in estimators:  # at the smallest budget: failed estimates, and how far errors go
        smallest = [r for r in rows if r["estimator"] == est and r["budget"] == budgets[0]]
        metrics[f"smallest_budget_nan_count_{est.removesuffix('_shap')}"] = int(sum(
            r["n_nan"] for r in smallest))
        metrics[f"smallest_budget_relerr_q3_{est.removesuffix('_shap')}"] = float(
            smallest[0]["relerr_q3"])

    if protocol.compare:
        metrics |= real_game_experiment(ev, estimators, real, data_cfg.real.source, protocol,
                                        rows)
        scale_metrics, scale_rows = scaling_experiment(ev, data_cfg.sparse, n, s, protocol, ctx)
        metrics |= scale_metrics
        ctx.save_figure("relerr_vs_budget", _figure(curves, n, s, default_budget, scale_rows))
    else:
        metrics["budget_to_target"] = budget_to_target(
            ev, chosen, data_cfg.sparse, n, s, protocol.scaling.repetitions,
            list(protocol.scaling.budgets), protocol.target_error)
    ctx.save_table("relerr", rows)
    metrics["evaluations_counted"] = ev.total_evaluations
    return metrics


def _budget_curve(scale_rows, estimator: str, axis: str) -> list[tuple[int, float]]:
    """(n or s, budget to target) points of one estimator along one axis (first seed)."""
    return [(r[axis], r["budget_to_target"]) for r in scale_rows
            if r["estimator"] == estimator and r["axis"] == axis and r["seed"] == 0]


def _figure(curves, n, s, default_budget, scale_rows):

    fig, (left, right) = subplots(2, panel=(5.5, 4.2))
    for i, (est, pts) in enumerate(curves.items()):
        b, q1, med, q3 = map(np.array, zip(*pts, strict=True))
        left.loglog(b, med, "o-", color=f"C{i}", label=est)
        left.fill_between(b, q1, q3, color=f"C{i}", alpha=0.2)
    left.axvline(default_budget, color="k", ls=":", label="4 s^2 log n")
    left.set(xlabel="budget m (evaluations)", ylabel="relative error (median, IQR)",
             title=f"sparse game n={n}, s={s}")
    left.legend(fontsize=8)
    color = {est: f"C{i}" for i, est in enumerate(curves)}  # as in the left panel
    for est, axis, style in (("sparse_leverage_shap", "n", "o-"),
                             ("sparse_leverage_shap", "s", "s:"), ("leverage_shap", "n", "o--")):
        pts = _budget_curve(scale_rows, est, axis)
        fixed = f"s={s}" if axis == "n" else f"n={n}"
        right.loglog(*zip(*pts, strict=True), style, base=2, color=color.get(est),
                     label=f"{est} vs {axis} ({fixed})")
        finite = [(x, b) for x, b in pts if np.isfinite(b)]
        if est == "sparse_leverage_shap" and axis == "s" and finite:  # the claimed s^2 rate
            xs = np.array([x for x, _ in pts], dtype=float)
            right.loglog(xs, finite[0][1] * (xs / finite[0][0]) ** 2, color="0.6", lw=0.8,
                         label="reference slope 2 (s^2)")
    right.set(xlabel="n or s", ylabel="budget for median error 1e-2",
              title="budget needed for median error 1e-2")
    right.legend(fontsize=8)
    fig.tight_layout()
    return fig
