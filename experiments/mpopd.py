"""mpopd protocol: a teacher trained on clean addition and a same-size student pretrained on
a shifted, looping version of it; the same student is then distilled with each variant for
the same number of updates (OPD from its own rollouts; MPOPD from the lockstep geometric
mixture, fixed beta and trust region; MPOPD from a single-pass proposal head, RECON; SeqKD
from teacher rollouts; GKD's mix); held-out accuracy, length, repetition, teacher NLL, at
the end and along learning curves (against updates and the teacher's token positions)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import lightning as L
import numpy as np
import torch

from common.errors import UserError
from data import arithmetic
from data.arithmetic import EOS, PAD
from data.lm_tasks import AdditionTask, LMPrompt, lm_prompts, scratchpad_prompts, split_held_out
from experiments.helpers.figures import subplots
from experiments.runner import register_paper
from experiments.runner.context import RunContext
from experiments.schemas.shared import RootConfig
from methods.mpopd import MPOPDModule, ProposalConfig, generation_metrics
from models.lm.post_training import OPDConfig, RolloutConfig, post_train
from models.lm.prompting import pad_id
from models.lm.rollout import sample_rollouts

LABELS = {"opd": "OPD", "mpopd": "MPOPD (mixture)", "mpopd_trust_region": "MPOPD (trust region)",
          "mpopd_head": "MPOPD (single-pass head)", "seqkd": "SeqKD", "gkd": "GKD"}


def variant_settings(name: str, method, steps: int) -> tuple[ProposalConfig, OPDConfig]:
    """The proposal and the student's objective of each variant."""
    opd = OPDConfig(objective=method.objective.name, importance_clip=method.importance_clip
                    if method.objective.name == "sampled" else None)
    anneal = steps if method.anneal else None
    head = {"head_refresh_every": method.head_refresh_every,
            "head_refresh_steps": method.head_refresh_steps}
    return {
        "opd": (ProposalConfig("student", None), opd),
        "mpopd": (ProposalConfig("mixture", method.beta, anneal_steps=anneal), opd),
        "mpopd_trust_region": (ProposalConfig("mixture", None, method.epsilon,
                                              anneal_steps=anneal), opd),
        "mpopd_head": (ProposalConfig("head", method.beta, anneal_steps=anneal, **head), opd),
        "seqkd": (ProposalConfig("teacher", None), OPDConfig(objective="jsd", beta=0.0)),
        "gkd": (ProposalConfig("gkd", None), OPDConfig(objective="jsd", beta=0.5)),
    }[name]


@dataclass
class Setting:
    """Teacher, student, prompts and decoding of one run (tiny addition or real models)."""

    teacher: Any
    student: Any
    train_prompts: Callable[[np.random.Generator], list[LMPrompt]]
    held_out: list[LMPrompt]
    max_new_tokens: int
    eos_id: int
    pad_id: int


def tiny_setting(cfg: RootConfig, ctx: RunContext) -> Setting:
    """A teacher trained on clean addition and a student pretrained on its looping shift."""
    from models.lm.loader import load_causal_lm

    data, method = cfg.dataset, cfg.method
    if data.name != "looping_addition":
        raise UserError(f"tiny-lm teachers train on dataset=looping_addition, not "
                        f"'{data.name}'; real models take dataset=addition_text, gsm8k or "
                        "math500")
    if not 1 <= data.min_digits <= data.max_digits:
        raise UserError(f"dataset.min_digits={data.min_digits} must be in 1..max_digits="
                        f"{data.max_digits}")
    longest = arithmetic.step_width(data.verbose) * data.max_digits + 1
    if method.max_new_tokens < longest:
        raise UserError(f"method.max_new_tokens={method.max_new_tokens} cannot hold the "
                        f"longest answer ({longest} tokens at {data.max_digits} digits)")
    everything = list(range(1, data.max_digits + 1))
    teacher, _ = load_causal_lm(cfg.model, ctx.compute, ctx.cache_dir, AdditionTask(
        data.max_digits, data.train_examples, 0.0, everything, verbose=data.verbose))
    student, _ = load_causal_lm(cfg.student, ctx.compute, ctx.cache_dir, AdditionTask(
        data.max_digits, data.train_examples, 0.0, everything, verbose=data.verbose,
        loop_fraction=data.student_loop_fraction,
        loop_until=method.max_new_tokens if data.student_loops_to_limit else None))
    digits = list(range(data.min_digits, data.max_digits + 1))
    per_step = max(1, method.prompts_per_step // len(digits))
    return Setting(teacher, student,
                   lambda rng: scratchpad_prompts(digits, per_step, rng, data.verbose),
                   scratchpad_prompts(digits, cfg.protocol.eval_prompts // len(digits),
                                      ctx.rng_for("held-out prompts"), data.verbose),
                   method.max_new_tokens, EOS, PAD)


def hub_setting(cfg: RootConfig, ctx: RunContext) -> Setting:
    """Real teacher and student by name (they must share a tokenizer); the dataset's prompts
    split into held-out (``protocol.eval_prompts``) and training prompts."""
    from models.lm.loader import load_with_shared_tokenizer

    if cfg.student.source == "tiny_lm":
        raise UserError(f"model={cfg.model.name} needs a real student too, e.g. "
                        "model@student=qwen3-0.6b")
    teacher, tokenizer, student = load_with_shared_tokenizer(cfg.model, cfg.student,
                                                             ctx.compute, ctx.cache_dir)
    prompts = lm_prompts(cfg.dataset, cfg.model, tokenizer, ctx.rng_for("prompts"))
    held_out, train = split_held_out(prompts, cfg.protocol.eval_prompts, cfg.dataset.name)
    per_step = cfg.method.prompts_per_step

    def sample(rng: np.random.Generator) -> list[LMPrompt]:
        return [train[i] for i in rng.choice(len(train), per_step, replace=len(train) < per_step)]

    eos = tokenizer.eos_token_id
    pad = pad_id(tokenizer)
    return Setting(teacher, student, sample, held_out, prompts[0].max_new_tokens, eos, pad)


def evaluate(student, setting: Setting, seed: int, prompts: list[LMPrompt] | None = None
             ) -> dict[str, float]:
    prompts = setting.held_out if prompts is None else prompts
    rollouts = sample_rollouts(student, [t.prompt_ids for t in prompts],
                               setting.max_new_tokens, eos_id=setting.eos_id,
                               pad_id=setting.pad_id,
                               generator=torch.Generator().manual_seed(seed))
    return generation_metrics(prompts, rollouts, setting.teacher)


def spread(prompts: list[LMPrompt], n: int) -> list[LMPrompt]:
    """``n`` prompts evenly spaced over ``prompts`` (which are grouped by digit count)."""
    return [prompts[i] for i in np.linspace(0, len(prompts) - 1, min(n, len(prompts)),
                                            dtype=int)]


class LearningCurve(L.Callback):
    """Every ``every`` updates: the student's held-out metrics on ``prompts`` (the same
    prompts and sampling seed at every point) and the cost so far."""

    def __init__(self, setting: Setting, prompts: list[LMPrompt], every: int, seed: int
                 ) -> None:
        self.setting, self.prompts, self.every, self.seed = setting, prompts, every, seed
        self.points: list[dict[str, float]] = []

    def record(self, module: MPOPDModule, step: int) -> None:
        was_training = module.policy.training
        module.policy.eval()
        with torch.no_grad():
            scores = evaluate(module.policy, self.setting, self.seed, self.prompts)
        module.policy.train(was_training)
        self.points.append({"step": step, **module.cost, **scores})

    def on_train_start(self, trainer, module) -> None:
        self.record(module, 0)

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        if (batch_idx + 1) % self.every == 0:
            self.record(module, batch_idx + 1)

    def on_train_end(self, trainer, module) -> None:
        if self.points[-1]["step"] != trainer.global_step:  # the last point: the end
            self.record(module, trainer.global_step)


@register_paper("mpopd")
def run(cfg: RootConfig, ctx: RunContext) -> dict[str, float]:
    setting = (tiny_setting if cfg.model.source == "tiny_lm" else hub_setting)(cfg, ctx)
    setting.teacher.requires_grad_(False)
    method = cfg.method

    def prompts(step: int, generator: torch.Generator) -> list[LMPrompt]:
        seed = int(torch.randint(0, 2**31, (1,), generator=generator))
        return setting.train_prompts(np.random.default_rng(seed))

    protocol = cfg.protocol
    # every variant trains and is evaluated on the same streams: paired comparisons
    train_seed = ctx.streams.seed("training")
    eval_seed = ctx.streams.seed("evaluation sampling")
    results = {"teacher": evaluate(setting.teacher, setting, eval_seed),
               "student_start": evaluate(setting.student, setting, eval_seed)}
    curves: dict[str, list[dict]] = {}
    for name in ctx.progress(list(protocol.variants), "distillation variants"):
        proposal, opd = variant_settings(name, method, protocol.steps)
        module = MPOPDModule(copy.deepcopy(setting.student), prompts, setting.teacher,
                             RolloutConfig(method.prompts_per_step, method.group_size,
                                           setting.max_new_tokens, eos_id=setting.eos_id,
                                           pad_id=setting.pad_id, lr=method.lr),
                             opd, proposal, seed=train_seed)
        curve = (LearningCurve(setting, spread(setting.held_out, protocol.curve_prompts),
                               protocol.eval_every, eval_seed)
                 if protocol.eval_every > 0 else None)
        post_train(module, protocol.steps, ctx.compute, callbacks=[curve] if curve else ())
        results[name] = evaluate(module.policy, setting, eval_seed)
        results[name].update(module.cost)
        ctx.log({f"{key}_{name}": value for key, value in results[name].items()})
        if curve:
            curves[name] = curve.points
            for key in ("acc", "length"):  # the mean over the curve: equal updates, all along
                results[name][f"{key}_curve_mean"] = float(np.mean(
                    [p[key] for p in curve.points[1:]]))
    ctx.save_table("variants", [{"variant": k, **v} for k, v in results.items()])
    metrics = {f"{key}_{name}": value for name, values in results.items()
               for key, value in values.items()}
    if "opd" in results and "mpopd" in results:
        metrics["len_mpopd_over_opd"] = results["mpopd"]["length"] / results["opd"]["length"]
    ctx.save_figure("variants", _figure(results))
    if curves:
        ctx.save_table("curves", [{"variant": name, **point} for name, points in
                                  curves.items() for point in points])
        ctx.save_figure("curves", _curves_figure(curves, results))
    return metrics


def _figure(results):
    names = list(results)
    fig, axes = subplots(3, panel=(5, 3.8))
    for ax, key, title in zip(axes, ("acc", "length", "repetition"),
                              ("accuracy", "generated tokens", "repeated 4-grams"),
                              strict=True):
        ax.bar(range(len(names)), [results[n][key] for n in names],
               color=["0.6" if n in ("teacher", "student_start") else "C0" for n in names])
        ax.set_xticks(range(len(names)), [LABELS.get(n, n) for n in names], rotation=35,
                      ha="right", fontsize=7)
        ax.set(title=f"{title} (held-out prompts)")
    fig.tight_layout()
    return fig


def _curves_figure(curves: dict[str, list[dict]], results: dict[str, dict]):
    """Accuracy, length and repetition against student updates, and accuracy against the
    teacher's token positions (the exact mixture runs the teacher at every sampled token)."""
    panels = (("step", "acc", "accuracy"), ("step", "length", "generated tokens"),
              ("step", "repetition", "repeated 4-grams"),
              ("teacher_tokens", "acc", "accuracy"))
    fig, axes = subplots(len(panels), panel=(4.4, 3.4))
    for name, points in curves.items():
        style = {"lw": 2.2} if name.startswith("mpopd") else {"lw": 1.2}
        for ax, (x, y, _) in zip(axes, panels, strict=True):
            ax.plot([p[x] for p in points], [p[y] for p in points], marker="o", ms=3,
                    label=LABELS.get(name, name), **style)
    for ax, (x, y, title) in zip(axes, panels, strict=True):
        for ref, ls in (("teacher", "--"), ("student_start", ":")):
            if ref in results:
                ax.axhline(results[ref][y], color="0.5", ls=ls, lw=1)
        ax.set(xlabel={"step": "student updates",
                       "teacher_tokens": "teacher token positions (cumulative)"}[x],
               title=f"{title} (held-out)")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return fig
