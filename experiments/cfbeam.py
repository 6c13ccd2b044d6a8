"""cfbeam protocol: (1) the hard tree instance: minimum per-step budget for the optimal
response to survive vs coverage C (vanilla LL-beam vs CF-Beam) and Best-of-N vs the number
of hard steps, plus regret under a noisy reward; (2) a language model (tiny-lm by default)
on scratchpad addition: accuracy vs horizon L at equal token budget for Best-of-N,
majority, Best-of-Majority, LL-beam and CF-Beam, with coverage measured by teacher forcing."""

from __future__ import annotations

import numpy as np
from omegaconf import DictConfig

from data.lm_tasks import lm_prompts, training_task
from experiments.helpers.figures import subplots
from experiments.helpers.fits import fit_loglog_slope, fit_semilog_slope
from experiments.runner import register_paper
from experiments.runner.context import RunContext
from methods.cfbeam import (
    CausalLMPolicy,
    beam_search,
    best_of_majority,
    best_of_n,
    bon_min_samples,
    coverage,
    hard_instance,
    majority_vote,
)


def _beam_settings(m) -> dict:
    """Beam width / samples and the CF filter from the method config (defaults for the
    sampling-only methods, which fix the total per-step budget as n)."""
    if "beam_width" in m:
        return {"B": int(m.beam_width), "N": int(m.samples_per_beam), "filt": m.filter.name,
                "tau": float(m.tau), "rank": m.rank.name, "alpha": float(m.bomaj_alpha)}
    width = max(1, int(round(np.sqrt(int(m.n)))))
    return {"B": width, "N": max(1, int(m.n) // width), "filt": "freq", "tau": 0.25,
            "rank": "global_ll", "alpha": float(m.alpha)}


def tree_min_width(coverage_c, steps, search_kwargs, tree_cfg, rng) -> float:
    """Smallest beam width B (with N = B samples per beam) whose survival rate of y* is at
    least ``survival``; returns the per-step budget B * N (nan if none in the grid)."""
    policy, ystar = hard_instance(coverage_c, steps)

    def reward(y):
        return float(y == ystar)

    for width in tree_cfg.widths:
        hits = sum(any(b.tokens == ystar for b in beam_search(
            policy, int(width), int(width), steps, reward, rng, **search_kwargs).finals)
            for _ in range(int(tree_cfg.trials)))
        if hits / int(tree_cfg.trials) >= float(tree_cfg.survival):
            return float(width) ** 2
    return float("nan")


def tree_experiment(cfg, ctx, s) -> tuple[dict, list, tuple]:
    t = cfg.protocol.tree
    coverages = [int(c) for c in t.coverages]
    cf_kwargs = {"filt": s["filt"], "rank": s["rank"]}
    rows, budgets = [], {"vanilla": [], "cfbeam": []}
    for c in ctx.progress(coverages, "tree coverage"):
        # the filter threshold scales with 1/C (RECON: tau = 0.5 / C on the tree)
        kwargs = {"vanilla": {}, "cfbeam": {**cf_kwargs, "tau": 0.5 / c}}
        for name in budgets:
            budgets[name].append(tree_min_width(c, int(t.hard_steps), kwargs[name], t,
                                                ctx.rng))
            rows.append({"experiment": "tree_survival", "method": name, "coverage": c,
                         "hard_steps": int(t.hard_steps), "min_budget_per_step":
                         budgets[name][-1]})
    steps = [int(h) for h in t.bon_hard_steps]
    bon = [bon_min_samples(int(t.bon_coverage), h, float(t.survival)) for h in steps]
    rows += [{"experiment": "tree_bon", "method": "bon", "coverage": int(t.bon_coverage),
              "hard_steps": h, "min_budget_per_step": b} for h, b in zip(steps, bon,
                                                                        strict=True)]
    metrics = {"tree_budget_slope_vanilla": fit_loglog_slope(coverages, budgets["vanilla"]),
               "tree_budget_slope_cfbeam": fit_loglog_slope(coverages, budgets["cfbeam"]),
               "tree_budget_slope_bon": fit_semilog_slope(steps, bon)}
    # regret of the final choice among the beams when the outcome reward is noisy
    policy, ystar = hard_instance(4, int(t.hard_steps))
    for sigma in t.reward_noise:
        regret = []
        for _ in range(int(t.trials)):
            noise = {}

            def noisy(y, sigma=float(sigma), noise=noise):
                noise.setdefault(y, float(y == ystar) + sigma * ctx.rng.standard_normal())
                return noise[y]

            res = beam_search(policy, 8, 8, int(t.hard_steps), noisy, ctx.rng)
            regret.append(1.0 - float(res.best == ystar))
        metrics[f"tree_regret_reward_noise_{sigma:g}"] = float(np.mean(regret))
        rows.append({"experiment": "tree_noisy_reward", "method": "ll_beam",
                     "reward_noise": float(sigma), "regret": float(np.mean(regret))})
    return metrics, rows, (coverages, budgets, steps, bon)


def lm_experiment(cfg, ctx, s, model, tokenizer) -> tuple[dict, list, dict]:
    n_seq = s["B"] * s["N"]  # equal per-step budget: B beams x N samples = N sequences
    noise = float(cfg.method.reward_noise)
    results, rows = {}, []
    prompts = lm_prompts(cfg.dataset, cfg.model, tokenizer, ctx.rng)
    pad_id = getattr(tokenizer, "pad_token_id", None) or 0
    for task in ctx.progress(prompts, "prompts"):
        policy = CausalLMPolicy(model, task.prompt_ids, task.eos_id, pad_id=pad_id)
        steps = task.max_new_tokens

        def reward(y, task=task):
            return float(task.correct(y)) + noise * ctx.rng.standard_normal()

        runs = {
            "bon": best_of_n(policy, n_seq, steps, reward, ctx.rng),
            "majority": majority_vote(policy, n_seq, steps, task.extract, ctx.rng),
            "bomaj": best_of_majority(policy, n_seq, steps, reward, task.extract, ctx.rng,
                                      s["alpha"]),
            "beam": beam_search(policy, s["B"], s["N"], steps, reward, ctx.rng),
            "cfbeam": beam_search(policy, s["B"], s["N"], steps, reward, ctx.rng,
                                  filt=s["filt"], tau=s["tau"], rank=s["rank"]),
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
    metrics = {f"lm_accuracy_{name}_longest_L": float(np.mean(results[(name, longest)]))
               for name in ("cfbeam", "bon", "beam", "majority", "bomaj")}
    metrics["budget_tokens_per_prompt"] = float(np.mean([r["cfbeam_tokens"] for r in at_longest]))
    metrics["budget_tokens_per_prompt_bon"] = float(np.mean([r["bon_tokens"]
                                                             for r in at_longest]))
    if "c_star" in at_longest[0]:
        metrics["lm_c_star_median_longest_L"] = float(np.median([r["c_star"]
                                                                 for r in at_longest]))
        metrics["lm_c_seq_median_longest_L"] = float(np.median([r["c_seq"] for r in at_longest]))
    accuracy = {k: float(np.mean(v)) for k, v in results.items()}
    return metrics, rows, accuracy


@register_paper("cfbeam")
def run(cfg: DictConfig, ctx: RunContext) -> dict[str, float]:
    from models.lm.loader import load_causal_lm

    s = _beam_settings(cfg.method)
    model, tokenizer = load_causal_lm(cfg.model, ctx.compute, ctx.cache_dir,
                                      training_task(cfg.dataset))  # fail fast
    metrics, tree_rows, tree_curves = tree_experiment(cfg, ctx, s)
    ctx.save_table("tree", tree_rows)
    lm_metrics, lm_rows, accuracy = lm_experiment(cfg, ctx, s, model, tokenizer)
    metrics.update(lm_metrics)
    ctx.save_table("lm_prompts", lm_rows)
    ctx.save_table("lm_accuracy", [{"method": k[0], "horizon": k[1], "accuracy": v}
                                   for k, v in sorted(accuracy.items())])
    ctx.save_figure("budget_and_horizon", _figure(tree_curves, accuracy))
    return metrics


def _figure(tree_curves, accuracy):
    coverages, budgets, steps, bon = tree_curves
    fig, axes = subplots(3, panel=(5, 4.3))
    ax = axes[0]
    for name, marker in (("vanilla", "o-"), ("cfbeam", "s-")):
        ax.loglog(coverages, budgets[name], marker, base=2, label=name)
    c = np.array(coverages, float)
    ax.loglog(c, budgets["vanilla"][0] * (c / c[0]) ** 2, "k:", base=2, label="C^2")
    ax.loglog(c, budgets["vanilla"][0] * (c / c[0]), "k--", base=2, label="C")
    ax.set(xlabel="token-level coverage C*", ylabel="min samples per step (B x N)",
           title="hard instance: survival of y* >= 90%")
    ax.legend(fontsize=8)
    ax = axes[1]
    ax.semilogy(steps, bon, "o-", color="C2")
    ax.set(xlabel="hard steps", ylabel="min N", title="Best-of-N (C=4): exponential in steps")
    ax = axes[2]
    for name in ("bon", "majority", "bomaj", "beam", "cfbeam"):
        pts = sorted((h, v) for (m, h), v in accuracy.items() if m == name)
        ax.plot(*zip(*pts, strict=True), "o-", label=name)
    ax.set(xlabel="horizon L (digits)", ylabel="accuracy", ylim=(-0.05, 1.05),
           title="LM at equal token budget")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
