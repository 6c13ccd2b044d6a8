"""prohind protocol: a tiny LM SFT'd to state its confidence before answering graded
addition problems, then GRPO with and without Prospective Hindsight (lambda in the
protocol's grid) on single-turn and multi-turn episodes from the same start; held-out
accuracy, ECE, Brier, AUROC and the two miscalibration modes of each variant."""

from __future__ import annotations

import copy

import numpy as np
import torch
from omegaconf import DictConfig

from common.errors import UserError
from data.confidence_tasks import ConfidenceAdditionTask, graded_prompts
from experiments.helpers.figures import subplots
from experiments.runner import register_paper
from experiments.runner.context import RunContext
from methods.prohind import (
    brier,
    episode_confidence,
    expected_calibration_error,
    miscalibration_modes,
    run_episodes,
    success_auroc,
)
from methods.prohind.training import PHConfig, PHGRPOModule
from models.lm.post_training import GRPOConfig, RolloutConfig, post_train


def evaluate(policy, tasks, turns: int, max_digits: int, seed: int, predictor: str,
             head=None) -> dict[str, float]:
    """One episode per held-out task: accuracy and the calibration of the prospective p."""
    rollouts = run_episodes(policy, tasks, turns, max_digits,
                            torch.Generator().manual_seed(seed))
    y = np.array([t.correct(c) for t, c in zip(tasks, rollouts.completions(), strict=True)],
                 dtype=float)
    if predictor == "head" and head is None:  # before GRPO: an untrained head says 0.5
        p = np.full(len(tasks), 0.5)
    else:
        p = episode_confidence(policy, rollouts, predictor, head).numpy()
    over, under = miscalibration_modes(p, y)
    return {"acc": float(y.mean()), "ece": expected_calibration_error(p, y),
            "brier": brier(p, y), "auroc": success_auroc(p, y), "overconf_fail_rate": over,
            "underconf_success_rate": under, "mean_confidence": float(p.mean())}


def train_variant(policy, lam: float, turns: int, cfg: DictConfig, ctx: RunContext,
                  max_digits: int) -> PHGRPOModule:
    method, digits = cfg.method, list(cfg.dataset.digits)

    def prompts(step, generator):
        seed = int(torch.randint(0, 2**31, (1,), generator=generator))
        return graded_prompts(digits, method.prompts_per_step, max_digits,
                              np.random.default_rng(seed))

    module = PHGRPOModule(
        copy.deepcopy(policy), prompts,
        RolloutConfig(method.prompts_per_step, method.group_size, 2 * max_digits + 2,
                      lr=method.lr),
        GRPOConfig(scale_rewards=method.scale_rewards, loss_type=method.loss_type),
        PHConfig(lam, method.weighting.name, method.surprise.name, method.predictor.name,
                 method.head_lr),
        turns, max_digits, seed=ctx.seed)
    return post_train(module, cfg.protocol.steps, ctx.compute)


@register_paper("prohind")
def run(cfg: DictConfig, ctx: RunContext) -> dict[str, float]:
    from models.lm.loader import load_causal_lm

    if cfg.model.source != "tiny_lm":
        raise UserError(f"model={cfg.model.name}: prohind's confidence-token episodes are in "
                        "tiny-lm's token format; a real-model path is not built yet")
    data = cfg.dataset
    max_digits = max(data.digits)
    task = ConfidenceAdditionTask(max_digits, data.train_examples, data.noise,
                                  (data.confidence_low, data.confidence_high),
                                  retry_fraction=data.retry_fraction)
    policy, _ = load_causal_lm(cfg.model, ctx.compute, ctx.cache_dir, task)
    held_out = graded_prompts(list(data.digits), cfg.protocol.eval_prompts, max_digits,
                              ctx.rng)
    lambdas = sorted({0.0, *cfg.protocol.lambdas, cfg.method.lam})
    rows, results, zero_variance = [], {}, []
    for regime, turns in (("single", 1), ("multi", cfg.protocol.turns_multi)):
        results[(regime, "sft")] = evaluate(policy, held_out, turns, max_digits, ctx.seed,
                                            cfg.method.predictor.name)
        for lam in ctx.progress(lambdas, f"GRPO variants ({regime}-turn)"):
            module = train_variant(policy, lam, turns, cfg, ctx, max_digits)
            results[(regime, lam)] = evaluate(module.policy, held_out, turns, max_digits,
                                              ctx.seed, cfg.method.predictor.name, module.head)
            zero_variance += [h["zero_variance_groups"] for h in module.history]
            ctx.log({f"train_reward_{regime}_lambda{lam:g}": float(np.mean(
                [h["reward"] for h in module.history[-10:]]))})
        for variant in ("sft", *lambdas):
            rows.append({"regime": regime, "variant": "sft" if variant == "sft" else
                         f"lambda={variant:g}", **results[(regime, variant)]})
    ctx.save_table("calibration", rows)

    lam = cfg.method.lam
    metrics = {"zero_variance_group_frac": float(np.mean(zero_variance))}
    for regime, suffix in (("single", ""), ("multi", "_multi")):
        base, ph = results[(regime, 0.0)], results[(regime, lam)]
        metrics |= {f"ece_grpo{suffix}": base["ece"], f"ece_ph{suffix}": ph["ece"],
                    f"acc_grpo{suffix}": base["acc"], f"acc_ph{suffix}": ph["acc"],
                    f"brier_grpo{suffix}": base["brier"], f"brier_ph{suffix}": ph["brier"]}
        for mode in ("overconf_fail_rate", "underconf_success_rate"):
            metrics[f"{mode}_{regime}"] = base[mode]
    ctx.save_figure("calibration_vs_lambda", _figure(results, lambdas))
    return metrics


def _figure(results, lambdas):
    fig, axes = subplots(3, panel=(4.6, 3.8))
    for regime, color in (("single", "C0"), ("multi", "C3")):
        ece = [results[(regime, lam)]["ece"] for lam in lambdas]
        acc = [results[(regime, lam)]["acc"] for lam in lambdas]
        axes[0].plot(lambdas, ece, "o-", color=color, label=f"{regime}-turn")
        axes[0].axhline(results[(regime, "sft")]["ece"], color=color, ls=":", lw=1)
        axes[1].plot(lambdas, acc, "o-", color=color, label=f"{regime}-turn")
        axes[1].axhline(results[(regime, "sft")]["acc"], color=color, ls=":", lw=1)
        over = [results[(regime, lam)]["overconf_fail_rate"] for lam in lambdas]
        under = [results[(regime, lam)]["underconf_success_rate"] for lam in lambdas]
        axes[2].plot(lambdas, over, "o-", color=color, label=f"{regime}: overconfident failures")
        axes[2].plot(lambdas, under, "s--", color=color,
                     label=f"{regime}: underconfident successes")
    axes[0].set(xlabel="PH strength lambda (0 = GRPO)", ylabel="ECE (10 bins)",
                title="calibration (dotted: before GRPO)")
    axes[1].set(xlabel="PH strength lambda (0 = GRPO)", ylabel="accuracy", title="accuracy")
    axes[2].set(xlabel="PH strength lambda (0 = GRPO)", ylabel="rate",
                title="miscalibration modes")
    for ax in axes:
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
