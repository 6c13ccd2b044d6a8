"""prohind protocol: a tiny LM SFT'd to state its confidence before answering graded
addition problems, then the base method (GRPO, OPD from a teacher, or both) with and
without Prospective Hindsight (lambda in the protocol's grid) on single-turn episodes and
multi-turn tool-use (or retry) episodes from the same start; held-out accuracy, ECE,
Brier, AUROC and the two miscalibration modes of each variant."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from common.errors import UserError
from data.confidence_tasks import ConfidenceAdditionTask, graded_prompts
from experiments.helpers.figures import subplots
from experiments.runner import register_paper
from experiments.runner.context import RunContext
from experiments.schemas.shared import RootConfig
from methods.prohind import (
    EpisodeFormat,
    TextConfidencePrompt,
    brier,
    episode_confidence,
    expected_calibration_error,
    miscalibration_modes,
    run_episodes,
    success_auroc,
    text_format,
    tiny_format,
)
from methods.prohind.episodes import CONFIDENCE_INSTRUCTION, PROBE_TEXT
from methods.prohind.training import PHConfig, PHModule
from models.lm.post_training import GRPOConfig, RolloutConfig, post_train


@dataclass
class Regime:
    """Single- or multi-turn: the episodes' format, held-out tasks and training tasks."""

    name: str
    turns: int
    fmt: EpisodeFormat
    held_out: list
    sample: Callable[[np.random.Generator], list]  # a step's training tasks


def evaluate(policy, regime: Regime, seed: int, predictor: str, head=None
             ) -> dict[str, float]:
    """One episode per held-out task: accuracy and the calibration of the prospective p."""
    tasks = regime.held_out
    rollouts = run_episodes(policy, tasks, regime.turns, regime.fmt,
                            torch.Generator().manual_seed(seed))
    y = np.array([t.correct(c) for t, c in zip(tasks, rollouts.completions(), strict=True)],
                 dtype=float)
    if predictor == "head" and head is None:  # before training: an untrained head says 0.5
        p = np.full(len(tasks), 0.5)
    else:
        p = episode_confidence(policy, tasks, rollouts, regime.fmt, predictor, head).numpy()
    over, under = miscalibration_modes(p, y)
    return {"acc": float(y.mean()), "ece": expected_calibration_error(p, y),
            "brier": brier(p, y), "auroc": success_auroc(p, y), "overconf_fail_rate": over,
            "underconf_success_rate": under, "mean_confidence": float(p.mean())}


def train_variant(policy, teacher, lam: float, regime: Regime, cfg: RootConfig,
                  ctx: RunContext) -> PHModule:
    method = cfg.method

    def prompts(step, generator):
        seed = int(torch.randint(0, 2**31, (1,), generator=generator))
        return regime.sample(np.random.default_rng(seed))

    module = PHModule(
        copy.deepcopy(policy), prompts,
        RolloutConfig(method.prompts_per_step, method.group_size,
                      regime.fmt.answer_length + 1, lr=method.lr),
        GRPOConfig(scale_rewards=method.scale_rewards.name, loss_type=method.loss_type),
        PHConfig(lam, method.weighting.name, method.surprise.name, method.predictor.name,
                 method.head_lr, method.base.name, method.distill_weight),
        regime.turns, regime.fmt, teacher, seed=ctx.streams.seed("training"))
    return post_train(module, cfg.protocol.steps, ctx.compute)


def sft_task(data, noise: float, calibrated: bool) -> ConfidenceAdditionTask:
    return ConfidenceAdditionTask(max(data.digits), data.train_examples, noise,
                                  (data.confidence_low, data.confidence_high),
                                  retry_fraction=data.retry_fraction,
                                  tool_fraction=data.tool_fraction,
                                  probe_fraction=data.probe_fraction, calibrated=calibrated)


def tiny_setting(cfg: RootConfig, ctx: RunContext):
    """tiny-lm SFT'd on confidence-first addition (and, for OPD, a teacher SFT'd on cleaner
    data with calibrated confidences); single-turn and tool (or retry) episodes."""
    from models.lm.loader import load_causal_lm

    data, protocol, method = cfg.dataset, cfg.protocol, cfg.method
    if data.name != "confidence_addition":
        raise UserError(f"tiny-lm policies run dataset=confidence_addition, not {data.name}")
    max_digits, digits = max(data.digits), list(data.digits)
    policy, _ = load_causal_lm(cfg.model, ctx.compute, ctx.cache_dir,
                               sft_task(data, data.noise, calibrated=False))
    teacher = None
    if method.base.name != "grpo":
        teacher_model = dataclasses.replace(cfg.model, steps=method.teacher_steps)
        teacher, _ = load_causal_lm(teacher_model, ctx.compute, ctx.cache_dir,
                                    sft_task(data, method.teacher_noise, calibrated=True))
    regimes = []
    for name, turns, tool in (("single", 1, False), ("multi", protocol.turns_multi,
                                                     protocol.episode_multi.name == "tool")):
        held_out = graded_prompts(digits, protocol.eval_prompts, max_digits,
                                  ctx.rng_for(f"held-out prompts ({name})"), tool)
        regimes.append(Regime(name, turns, tiny_format(max_digits, tool), held_out,
                              lambda rng, tool=tool: graded_prompts(
                                  digits, method.prompts_per_step, max_digits, rng, tool)))
    return policy, teacher, regimes


def hub_setting(cfg: RootConfig, ctx: RunContext):
    """A real model by name (``model.hub_id``; a teacher by ``model@teacher``) on the
    dataset's questions, asked to state "Confidence: k" first; multi-turn is the retry
    episode (the lookup tool is tiny-lm's)."""
    from data.lm_tasks import split_held_out, text_questions
    from models.lm.loader import load_causal_lm, load_with_shared_tokenizer
    from models.lm.prompting import encode_prompt

    protocol, method = cfg.protocol, cfg.method
    if cfg.dataset.name not in ("addition_text", "gsm8k", "math500"):
        raise UserError(f"model={cfg.model.name} needs a text dataset (dataset=addition_text, "
                        f"gsm8k or math500), not {cfg.dataset.name}")
    if method.predictor.name == "expected":
        raise UserError("method.predictor=expected reads tiny-lm's confidence token; a real "
                        "model takes token, yes_probability or head")
    teacher_cfg = cfg.teacher
    if method.base.name != "grpo" and teacher_cfg is None:
        raise UserError(f"method={method.name} distils from a teacher: add "
                        "+model@teacher=<a larger model with the same tokenizer>")
    if method.base.name == "grpo":
        policy, tokenizer = load_causal_lm(cfg.model, ctx.compute, ctx.cache_dir)
        teacher = None
    else:
        policy, tokenizer, teacher = load_with_shared_tokenizer(cfg.model, teacher_cfg,
                                                                ctx.compute, ctx.cache_dir)
    chat = bool(cfg.model.chat_template)

    def decode(ids):
        return tokenizer.decode(list(ids), skip_special_tokens=True)

    tasks = [TextConfidencePrompt(
        encode_prompt(tokenizer, f"{q.question}\n{CONFIDENCE_INSTRUCTION}", chat),
        encode_prompt(tokenizer, f"{q.question}\n{PROBE_TEXT}", chat), q.reference,
        q.extract, decode) for q in text_questions(cfg.dataset, ctx.rng_for("questions"))]
    held_out, train = split_held_out(tasks, protocol.eval_prompts, cfg.dataset.name)
    fmt = text_format(tokenizer, chat, cfg.dataset.max_new_tokens)

    def sample(rng):
        return [train[i] for i in rng.choice(len(train), method.prompts_per_step,
                                             replace=len(train) < method.prompts_per_step)]

    regimes = [Regime("single", 1, fmt, held_out, sample),
               Regime("multi", protocol.turns_multi, fmt, held_out, sample)]
    return policy, teacher, regimes


@register_paper("prohind")
def run(cfg: RootConfig, ctx: RunContext) -> dict[str, float]:
    protocol, method = cfg.protocol, cfg.method
    setting = tiny_setting if cfg.model.source == "tiny_lm" else hub_setting
    policy, teacher, regimes = setting(cfg, ctx)
    lambdas = sorted({0.0, *protocol.lambdas, method.lam})
    rows, results, zero_variance = [], {}, []
    eval_seed = ctx.streams.seed("evaluation episodes")  # the same for every variant: paired
    for regime in regimes:
        name = regime.name
        results[(name, "sft")] = evaluate(policy, regime, eval_seed, method.predictor.name)
        if teacher is not None:
            results[(name, "teacher")] = evaluate(teacher, regime, eval_seed,
                                                  method.predictor.name)
        for lam in ctx.progress(lambdas, f"{method.base.name} variants ({name}-turn)"):
            module = train_variant(policy, teacher, lam, regime, cfg, ctx)
            results[(name, lam)] = evaluate(module.policy, regime, eval_seed,
                                            method.predictor.name, module.head)
            zero_variance += [h["zero_variance_groups"] for h in module.history]
            ctx.log({f"train_reward_{name}_lambda{lam:g}": float(np.mean(
                [h["reward"] for h in module.history[-10:]]))})
        for variant in ("sft", "teacher", *lambdas):
            if (name, variant) in results:
                label = variant if isinstance(variant, str) else f"lambda={variant:g}"
                rows.append({"regime": name, "variant": label, "base": method.base.name,
                             **results[(name, variant)]})
        ctx.save_table("calibration", rows)  # after each regime: kept if a later one fails

    lam = method.lam  # the "_grpo" keys hold the base method's numbers (lambda = 0)
    metrics = {"zero_variance_group_frac": float(np.mean(zero_variance))}
    for regime, suffix in (("single", ""), ("multi", "_multi")):
        base, ph = results[(regime, 0.0)], results[(regime, lam)]
        metrics |= {f"ece_grpo{suffix}": base["ece"], f"ece_ph{suffix}": ph["ece"],
                    f"acc_grpo{suffix}": base["acc"], f"acc_ph{suffix}": ph["acc"],
                    f"brier_grpo{suffix}": base["brier"], f"brier_ph{suffix}": ph["brier"]}
        for mode in ("overconf_fail_rate", "underconf_success_rate"):
            metrics[f"{mode}_{regime}"] = base[mode]
    ctx.save_figure("calibration_vs_lambda", _figure(results, lambdas, method.base.name))
    return metrics


def _figure(results, lambdas, base: str):
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
    axes[0].set(xlabel=f"PH strength lambda (0 = {base})", ylabel="ECE (10 bins)",
                title="calibration (dotted: the SFT start)")
    axes[1].set(xlabel=f"PH strength lambda (0 = {base})", ylabel="accuracy", title="accuracy")
    axes[2].set(xlabel=f"PH strength lambda (0 = {base})", ylabel="rate",
                title="miscalibration modes")
    for ax in axes:
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
