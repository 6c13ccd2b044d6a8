"""cfbeam protocol.

1. Tree: the minimum sampling budget (sampled tokens of one search) for the optimal response
   to survive in >= ``survival`` of the trials, against the coverage C, for LL-beam, CF-Beam
   with the frequency filter and CF-Beam with adaptive per-node sampling (both RECON), on
   the hard instance (deterministic lures) and on stochastic lures; fitted log-log slopes
   with bootstrap intervals, never through a coverage that no grid point reached. Best-of-N
   simulated against the number of hard steps (closed form as reference). Regret under a
   noisy outcome reward.
2. LM: tiny-lm (or a real model) on addition: accuracy vs horizon L at equal token budget
   for Best-of-N, majority, Best-of-Majority, LL-beam and CF-Beam, coverage C* measured by
   teacher forcing.
"""

from __future__ import annotations

import numpy as np

from data.lm_tasks import lm_prompts, training_task
from experiments.helpers.figures import subplots
from experiments.helpers.fits import fit_semilog_slope, min_budget_slope
from experiments.runner import register_paper
from experiments.runner.context import RunContext
from experiments.schemas.shared import RootConfig
from methods.cfbeam import (
    AdaptiveSampling,
    CausalLMPolicy,
    beam_search,
    best_of_majority,
    best_of_n,
    bon_min_samples,
    coverage,
    hard_instance,
    majority_vote,
)
from methods.cfbeam.search import square_beam
from methods.cfbeam.tree import Arm, bon_success_budget, survival_frontier

LABELS = {"vanilla": "LL-beam", "cfbeam": "CF-Beam (frequency filter)",
          "cfbeam_adaptive": "CF-Beam (adaptive sampling)", "beam": "LL-beam",
          "bon": "Best-of-N", "majority": "majority vote", "bomaj": "Best-of-Majority"}
LM_METHODS = ("bon", "majority", "bomaj", "beam", "cfbeam", "cfbeam_adaptive")
# method=<option>: the method under test, whose accuracy is also lm_accuracy_longest_L (every
# method runs, at the budget the option sets)
CHOSEN = {"best_of_n": "bon", "majority_vote": "majority", "best_of_majority": "bomaj",
          "ll_beam": "beam", "cf_beam": "cfbeam"}


def _beam_settings(method) -> dict:
    """Beam width / samples and the CF filter from the method config (defaults for the
    sampling-only methods, which fix the total per-step budget as n)."""
    if hasattr(method, "beam_width"):
        return {"B": method.beam_width, "N": method.samples_per_beam,
                "filt": method.filter.name, "tau": method.tau, "rank": method.rank.name,
                "alpha": method.bomaj_alpha}
    width, per_beam = square_beam(method.n)
    return {"B": width, "N": per_beam, "filt": "freq", "tau": 0.25, "rank": "global_ll",
            "alpha": method.alpha}


def tree_arms(tree) -> dict[str, Arm]:
    adaptive = AdaptiveSampling(stop_mass=tree.stop_mass, alpha=tree.stop_alpha)
    return {"vanilla": Arm("vanilla"),
            "cfbeam": Arm("cfbeam", filt=tree.filter.name, tau=tree.tau, rank=tree.rank.name),
            "cfbeam_adaptive": Arm("cfbeam_adaptive", adaptive=adaptive)}


def tree_experiment(cfg, ctx) -> tuple[dict, dict]:
    tree = cfg.protocol.tree
    arms = tree_arms(tree)
    instances = {"hard": (1, list(arms)),
                 "stochastic_lures": (tree.stochastic_branching, ["vanilla", "cfbeam_adaptive"])}
    metrics, rows, curves = {}, [], {}
    rng = ctx.rng_for("tree")
    for instance, (branching, arm_names) in instances.items():
        for name in arm_names:
            frontiers = []
            for c in ctx.progress(tree.coverages, f"tree {instance}: {LABELS[name]}"):
                policy, ystar = hard_instance(c, tree.hard_steps, branching)
                frontier = survival_frontier(policy, ystar, arms[name], list(tree.widths),
                                             list(tree.samples), tree.hard_steps, tree.trials,
                                             tree.survival, rng)
                frontiers.append(frontier)
                budget = frontier.min_budget(tree.survival)
                rows.append({"instance": instance, "method": name, "coverage": c,
                             "min_budget_tokens": budget, "reached": bool(np.isfinite(budget)),
                             "grid_points": len(frontier.points)})
            budgets = [f.min_budget(tree.survival) for f in frontiers]
            curves[(instance, name)] = budgets
            slope, low, high = min_budget_slope(tree.coverages, frontiers, tree.survival,
                                                    rng, tree.bootstrap)
            key = {("hard", "vanilla"): "vanilla", ("hard", "cfbeam"): "cfbeam",
                   ("hard", "cfbeam_adaptive"): "cfbeam_adaptive",
                   ("stochastic_lures", "vanilla"): "vanilla_stochastic_lures",
                   ("stochastic_lures", "cfbeam_adaptive"): "cfbeam_stochastic_lures"}[
                (instance, name)]
            metrics[f"tree_budget_slope_{key}"] = slope
            metrics[f"tree_budget_slope_{key}_ci_low"] = low
            metrics[f"tree_budget_slope_{key}_ci_high"] = high
            for c, b in zip(tree.coverages, budgets, strict=True):
                if not np.isfinite(b):
                    ctx.info(f"tree ({instance}): {LABELS[name]} did not reach survival "
                             f"{tree.survival} at C={c} within the grid")
    metrics["tree_budget_reached_all"] = int(all(r["reached"] for r in rows))
    metrics.update(_best_of_n_on_the_tree(tree, ctx, rows, curves))
    metrics.update(_noisy_reward_regret(tree, ctx, rows))
    ctx.save_table("tree", rows)
    return metrics, curves


def _best_of_n_on_the_tree(tree, ctx, rows, curves) -> dict[str, float]:
    """Best-of-N simulated: the smallest N whose success rate reaches the target, against the
    number of hard steps at C = bon_coverage (closed form 1 - (1 - C^-L)^N as reference)."""
    simulated, closed = [], []
    rng = ctx.rng_for("best-of-n on the tree")
    for steps in tree.bon_hard_steps:
        policy, ystar = hard_instance(tree.bon_coverage, steps)
        tokens = bon_success_budget(policy, ystar, steps, list(tree.samples), tree.trials,
                                    tree.survival, rng)
        simulated.append(tokens / steps)  # samples N (every sample has `steps` tokens)
        closed.append(bon_min_samples(tree.bon_coverage, steps, tree.survival))
        rows.append({"instance": "hard", "method": "bon", "coverage": tree.bon_coverage,
                     "hard_steps": steps, "min_samples": simulated[-1],
                     "min_samples_closed_form": closed[-1], "min_budget_tokens": tokens,
                     "reached": bool(np.isfinite(tokens))})
    curves["bon"] = (list(tree.bon_hard_steps), simulated, closed)
    return {"tree_budget_slope_bon": fit_semilog_slope(tree.bon_hard_steps, simulated),
            "tree_budget_slope_bon_closed_form": fit_semilog_slope(tree.bon_hard_steps, closed)}


def _noisy_reward_regret(tree, ctx, rows) -> dict[str, float]:
    """Regret of the final choice among LL-beam's finished beams under r + N(0, sigma^2)."""
    policy, ystar = hard_instance(4, tree.hard_steps)
    metrics = {}
    rng = ctx.rng_for("noisy reward")
    for sigma in tree.reward_noise:
        regret = []
        for _ in range(tree.trials):
            noise = {}

            def noisy(y, sigma=sigma, noise=noise):
                noise.setdefault(y, float(y == ystar) + sigma * rng.standard_normal())
                return noise[y]

            res = beam_search(policy, 8, 8, tree.hard_steps, noisy, rng)
            regret.append(1.0 - float(res.best == ystar))
        metrics[f"tree_regret_reward_noise_{sigma:g}"] = float(np.mean(regret))
        rows.append({"instance": "hard", "method": "vanilla", "reward_noise": sigma,
                     "regret": float(np.mean(regret))})
    return metrics


def lm_experiment(cfg, ctx, model, tokenizer) -> tuple[dict, list, dict]:
    s = _beam_settings(cfg.method)
    n_seq = s["B"] * s["N"]  # equal per-step budget: B beams x N samples = N sequences
    noise = cfg.method.reward_noise
    adaptive = AdaptiveSampling(max_samples=s["N"], stop_mass=cfg.protocol.tree.stop_mass,
                                alpha=cfg.protocol.tree.stop_alpha)
    results, rows = {}, []
    prompts = lm_prompts(cfg.dataset, cfg.model, tokenizer, ctx.rng_for("lm prompts"))
    rng, reward_noise = ctx.rng_for("lm sampling"), ctx.rng_for("lm reward noise")
    pad_id = getattr(tokenizer, "pad_token_id", None) or 0
    for task in ctx.progress(prompts, "prompts"):
        policy = CausalLMPolicy(model, task.prompt_ids, task.eos_id, pad_id=pad_id)
        steps = task.max_new_tokens

        def reward(y, task=task):
            return float(task.correct(y)) + noise * reward_noise.standard_normal()

        runs = {
            "bon": best_of_n(policy, n_seq, steps, reward, rng),
            "majority": majority_vote(policy, n_seq, steps, task.extract, rng),
            "bomaj": best_of_majority(policy, n_seq, steps, reward, task.extract, rng,
                                      s["alpha"]),
            "beam": beam_search(policy, s["B"], s["N"], steps, reward, rng),
            "cfbeam": beam_search(policy, s["B"], s["N"], steps, reward, rng,
                                  filt=s["filt"], tau=s["tau"], rank=s["rank"]),
            "cfbeam_adaptive": beam_search(policy, s["B"], None, steps, reward, rng,
                                           adaptive=adaptive),
        }
        row = {"horizon": task.horizon}
        if task.target_ids is not None:
            row["c_star"], row["c_seq"] = coverage(policy, task.target_ids)
        for name, res in runs.items():
            ok = task.correct(res.best)
            results.setdefault((name, task.horizon), []).append(ok)
            row[f"{name}_correct"] = ok
            row[f"{name}_tokens"] = res.budget.sampled_tokens
        rows.append(row)
    longest = max(h for _, h in results)
    at_longest = [r for r in rows if r["horizon"] == longest]
    for name in LM_METHODS:  # each prompt of the longest horizon, paired across methods
        ctx.save_instances(f"lm_accuracy_{name}_longest_L", {
            f"prompt {i}": float(r[f"{name}_correct"]) for i, r in enumerate(at_longest)})
    metrics = {f"lm_accuracy_{name}_longest_L": float(np.mean(results[(name, longest)]))
               for name in LM_METHODS}
    metrics[f"lm_accuracy_cfbeam_longest_L_seed{ctx.seed}"] = metrics[
        "lm_accuracy_cfbeam_longest_L"]
    metrics["lm_accuracy_longest_L"] = metrics[
        f"lm_accuracy_{CHOSEN[str(cfg.method.name)]}_longest_L"]
    for name in ("cfbeam", "bon", "cfbeam_adaptive"):
        suffix = "" if name == "cfbeam" else f"_{name}"
        metrics[f"budget_tokens_per_prompt{suffix}"] = float(np.mean(
            [r[f"{name}_tokens"] for r in at_longest]))
    if "c_star" in at_longest[0]:
        metrics["lm_c_star_median_longest_L"] = float(np.median([r["c_star"]
                                                                 for r in at_longest]))
        metrics["lm_c_seq_median_longest_L"] = float(np.median([r["c_seq"] for r in at_longest]))
    accuracy = {k: float(np.mean(v)) for k, v in results.items()}
    horizons = sorted({h for _, h in results})
    if len(horizons) > 1:  # the trend over horizons: beam search's lead over Best-of-N
        gaps = [accuracy[("cfbeam", h)] - accuracy[("bon", h)] for h in horizons]
        metrics["lm_gap_cfbeam_minus_bon_slope_over_horizon"] = float(
            np.polyfit(horizons, gaps, 1)[0])
    return metrics, rows, accuracy


@register_paper("cfbeam")
def run(cfg: RootConfig, ctx: RunContext) -> dict[str, float]:
    from models.lm.loader import load_causal_lm

    with ctx.stage("the LM (trained once, then cached)"):
        model, tokenizer = load_causal_lm(cfg.model, ctx.compute, ctx.cache_dir,
                                          training_task(cfg.dataset))  # fail fast
    with ctx.stage("tree instances"):
        metrics, curves = tree_experiment(cfg, ctx)
    with ctx.stage("LM search"):
        lm_metrics, lm_rows, accuracy = lm_experiment(cfg, ctx, model, tokenizer)
    metrics.update(lm_metrics)
    ctx.save_table("lm_prompts", lm_rows)
    ctx.save_table("lm_accuracy", [{"method": k[0], "horizon": k[1], "accuracy": v}
                                   for k, v in sorted(accuracy.items())])
    ctx.save_figure("budget_and_horizon", _figure(cfg.protocol.tree, curves, accuracy))
    return metrics


def _budget_panel(ax, coverages, curves, instance, names, title) -> None:
    c = np.array(coverages, dtype=float)
    top = max((b for n in names for b in curves[(instance, n)] if np.isfinite(b)), default=1.0)
    for i, name in enumerate(names):
        budgets = np.array(curves[(instance, name)], dtype=float)
        reached = np.isfinite(budgets)
        ax.loglog(c[reached], budgets[reached], "o-", base=2, color=f"C{i}", label=LABELS[name])
        if (~reached).any():  # not reached within the grid: marked, never drawn as a value
            ax.loglog(c[~reached], np.full((~reached).sum(), 2 * top), "x", base=2,
                      color=f"C{i}", ms=9, label=f"{LABELS[name]}: not reached")
    first = next(b for b in curves[(instance, "vanilla")] if np.isfinite(b))
    ax.loglog(c, first * (c / c[0]) ** 2, "k:", base=2, lw=1, label="slope 2 (C^2)")
    ax.loglog(c, first * (c / c[0]), "k--", base=2, lw=1, label="slope 1 (C)")
    ax.set(xlabel="token-level coverage C*", ylabel="min sampled tokens per search",
           title=title)
    ax.legend(fontsize=7)


def _figure(tree, curves, accuracy):
    fig, axes = subplots(4, panel=(5, 4.3))
    _budget_panel(axes[0], tree.coverages, curves, "hard", list(tree_arms(tree)),
                  f"hard instance: survival of y* >= {tree.survival:g}")
    _budget_panel(axes[1], tree.coverages, curves, "stochastic_lures",
                  ["vanilla", "cfbeam_adaptive"],
                  f"stochastic lures ({tree.stochastic_branching} tokens per dead node)")
    steps, simulated, closed = curves["bon"]
    axes[2].semilogy(steps, simulated, "o-", color="C3", label="Best-of-N (simulated)")
    axes[2].semilogy(steps, closed, "k--", lw=1, label="closed form")
    axes[2].set_xticks(steps)
    axes[2].set(xlabel="hard steps L", ylabel="min samples N",
                title=f"Best-of-N at C={tree.bon_coverage}: exponential in L")
    axes[2].legend(fontsize=7)
    for name in LM_METHODS:
        pts = sorted((h, v) for (m, h), v in accuracy.items() if m == name)
        axes[3].plot(*zip(*pts, strict=True), "o-", label=LABELS[name])
    axes[3].set_xticks(sorted({h for _, h in accuracy}))
    axes[3].set(xlabel="horizon L (digits)", ylabel="accuracy", ylim=(-0.05, 1.05),
                title="LM at equal token budget")
    axes[3].legend(fontsize=7)
    fig.tight_layout()
    return fig
