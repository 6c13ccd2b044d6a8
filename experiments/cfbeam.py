"""cfbeam protocol: (1) the hard tree instance: minimum per-step budget for the optimal
response to survive vs coverage C (vanilla LL-beam vs CF-Beam) and Best-of-N vs the number
of hard steps, plus regret under a noisy reward; (2) a language model (tiny-lm by default)
on scratchpad addition: accuracy vs horizon L at equal token budget for Best-of-N,
majority, Best-of-Majority, LL-beam and CF-Beam, with coverage measured by teacher forcing."""

from __future__ import annotations

import re

import numpy as np
from omegaconf import DictConfig

from experiments.runner import UserError, register_paper
from experiments.runner.context import RunContext
from methods.cfbeam import (
    CausalLMPolicy,
    beam_search,
    best_of_majority,
    best_of_n,
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


def bon_min_samples(coverage_c: int, steps: int, success: float) -> float:
    """Best-of-N with an exact reward succeeds w.p. 1 - (1 - 1/C_seq)^N, C_seq = C^steps
    (checked against sampling in the tests): the smallest N reaching ``success``."""
    p = float(coverage_c) ** -steps
    return float(np.ceil(np.log(1 - success) / np.log1p(-p)))


def _slope(x, y, log_x=True) -> float:
    x, y = np.asarray(x, float), np.asarray(y, float)
    ok = np.isfinite(y)
    if ok.sum() < 2:
        return float("nan")
    return float(np.polyfit(np.log(x[ok]) if log_x else x[ok], np.log(y[ok]), 1)[0])


def tree_experiment(cfg, ctx, s) -> tuple[dict, list]:
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
    metrics = {"tree_budget_slope_vanilla": _slope(coverages, budgets["vanilla"]),
               "tree_budget_slope_cfbeam": _slope(coverages, budgets["cfbeam"]),
               "tree_budget_slope_bon": _slope(steps, bon, log_x=False)}
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


def _lm_tasks(cfg, tokenizer, rng):
    """(horizon, prompt ids, answer checker, teacher-forcing target or None, eos id)."""
    ds = cfg.dataset
    if ds.name == "addition":
        if cfg.model.source != "tiny_lm":
            raise UserError("dataset=addition is tiny-lm's token format; use "
                            "dataset=addition_text (or gsm8k/math500) with a real model")
        from data.arithmetic import EOS, addition_problems, answer_of, encode_problem, scratchpad

        for horizon in ds.horizons:
            for a, b in addition_problems(int(ds.prompts_per_horizon), int(horizon), rng):
                yield (int(horizon), encode_problem(a, b, int(horizon)),
                       (lambda y, s=a + b: answer_of(y) == s), scratchpad(a, b, int(horizon)),
                       EOS, 2 * int(horizon) + 1, answer_of)
        return
    if cfg.model.source == "tiny_lm":
        raise UserError(f"tiny-lm only knows dataset=addition, not '{ds.name}'")

    def to_ids(question):
        if cfg.model.get("chat_template", False):
            text = tokenizer.apply_chat_template([{"role": "user", "content": question}],
                                                 add_generation_prompt=True, tokenize=False)
            return tokenizer(text, add_special_tokens=False)["input_ids"]
        return tokenizer(question)["input_ids"]

    def last_number(y):
        found = re.findall(r"-?\d[\d,]*\.?\d*", tokenizer.decode(list(y)))
        return found[-1].replace(",", "").rstrip(".") if found else None

    if ds.name == "addition_text":
        for horizon in ds.horizons:
            for _ in range(int(ds.prompts_per_horizon)):
                a, b = (int(rng.integers(10 ** (horizon - 1), 10**horizon)) for _ in range(2))
                yield (int(horizon), to_ids(f"What is {a}+{b}? Answer with the number."),
                       (lambda y, s=str(a + b): last_number(y) == s), None,
                       tokenizer.eos_token_id, int(ds.max_new_tokens), last_number)
        return
    from datasets import load_dataset

    try:
        rows = load_dataset(ds.hub_id, ds.config, split=ds.split)
    except Exception as err:  # noqa: BLE001
        raise UserError(f"could not load dataset {ds.hub_id} ({type(err).__name__}); it needs "
                        "network access or a local Hugging Face cache") from None
    for row in rows.select(range(min(int(ds.limit), len(rows)))):
        gold = str(row.get("answer", "")).split("####")[-1].strip().replace(",", "")
        yield (1, to_ids(row.get("question", row.get("problem", ""))),
               (lambda y, g=gold: last_number(y) == g), None, tokenizer.eos_token_id,
               int(ds.max_new_tokens), last_number)


def lm_experiment(cfg, ctx, s, model, tokenizer) -> tuple[dict, list]:
    n_seq = s["B"] * s["N"]  # equal per-step budget: B beams x N samples = N sequences
    noise = float(cfg.method.get("reward_noise", 0.0))
    results, rows = {}, []
    tasks = list(_lm_tasks(cfg, tokenizer, ctx.rng))
    for horizon, prompt, correct, target, eos, steps, answer in ctx.progress(tasks, "prompts"):
        policy = CausalLMPolicy(model, prompt, eos, pad_id=getattr(tokenizer, "pad_token_id",
                                                                   None) or 0)

        def reward(y, correct=correct):
            return float(correct(y)) + noise * ctx.rng.standard_normal()

        runs = {
            "bon": best_of_n(policy, n_seq, steps, reward, ctx.rng),
            "majority": majority_vote(policy, n_seq, steps, answer, ctx.rng),
            "bomaj": best_of_majority(policy, n_seq, steps, reward, answer, ctx.rng,
                                      s["alpha"]),
            "beam": beam_search(policy, s["B"], s["N"], steps, reward, ctx.rng),
            "cfbeam": beam_search(policy, s["B"], s["N"], steps, reward, ctx.rng,
                                  filt=s["filt"], tau=s["tau"], rank=s["rank"]),
        }
        row = {"horizon": horizon}
        if target is not None:
            row["c_star"], row["c_seq"] = coverage(policy, target)
        for name, res in runs.items():
            ok = bool(correct(res.best))
            results.setdefault((name, horizon), []).append(ok)
            row[f"{name}_correct"] = ok
            row[f"{name}_tokens"] = res.budget.sampled_tokens
        rows.append(row)
    longest = max(h for _, h in results)
    metrics = {f"lm_accuracy_{name}_longest_L": float(np.mean(results[(name, longest)]))
               for name in ("cfbeam", "bon", "beam", "majority", "bomaj")}
    metrics["budget_tokens_per_prompt"] = float(np.mean([r["cfbeam_tokens"] for r in rows
                                                         if r["horizon"] == longest]))
    metrics["budget_tokens_per_prompt_bon"] = float(np.mean([r["bon_tokens"] for r in rows
                                                             if r["horizon"] == longest]))
    if rows and "c_star" in rows[0]:
        metrics["lm_c_star_median_longest_L"] = float(np.median(
            [r["c_star"] for r in rows if r["horizon"] == longest]))
        metrics["lm_c_seq_median_longest_L"] = float(np.median(
            [r["c_seq"] for r in rows if r["horizon"] == longest]))
    accuracy = {k: float(np.mean(v)) for k, v in results.items()}
    return metrics, rows, accuracy


@register_paper("cfbeam")
def run(cfg: DictConfig, ctx: RunContext) -> dict[str, float]:
    from models.loader import load_causal_lm

    s = _beam_settings(cfg.method)
    model, tokenizer = load_causal_lm(cfg.model, ctx.device, ctx.cache_dir)  # fail fast
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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    coverages, budgets, steps, bon = tree_curves
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.3))
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
