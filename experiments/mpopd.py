"""mpopd protocol: a teacher trained on clean addition and a smaller student pretrained on
a shifted, looping version of it; the same student is then distilled with each variant for
the same number of updates (OPD from its own rollouts; MPOPD from the lockstep geometric
mixture, fixed beta and trust region; MPOPD from a single-pass proposal head, RECON; SeqKD
from teacher rollouts; GKD's mix); held-out accuracy, length, repetition, teacher NLL."""

from __future__ import annotations

import copy

import numpy as np
import torch
from omegaconf import DictConfig

from data.arithmetic import EOS, PAD
from data.lm_tasks import AdditionTask, addition_prompts
from experiments.helpers.figures import subplots
from experiments.runner import register_paper
from experiments.runner.context import RunContext
from methods.mpopd import MPOPDModule, ProposalConfig, generation_metrics
from models.lm.post_training import OPDConfig, RolloutConfig, post_train
from models.lm.rollout import sample_rollouts

LABELS = {"opd": "OPD", "mpopd": "MPOPD (mixture)", "mpopd_trust_region": "MPOPD (trust region)",
          "mpopd_head": "MPOPD (single-pass head)", "seqkd": "SeqKD", "gkd": "GKD"}


def variant_settings(name: str, method) -> tuple[ProposalConfig, OPDConfig]:
    """The proposal and the student's objective of each variant."""
    opd = OPDConfig(objective=method.objective, importance_clip=method.importance_clip
                    if method.objective == "sampled" else None)
    head = {"head_refresh_every": method.head_refresh_every,
            "head_refresh_steps": method.head_refresh_steps}
    return {
        "opd": (ProposalConfig("student", None), opd),
        "mpopd": (ProposalConfig("mixture", method.beta), opd),
        "mpopd_trust_region": (ProposalConfig("mixture", None, method.epsilon), opd),
        "mpopd_head": (ProposalConfig("head", method.beta, **head), opd),
        "seqkd": (ProposalConfig("teacher", None), OPDConfig(objective="jsd", beta=0.0)),
        "gkd": (ProposalConfig("gkd", None), OPDConfig(objective="jsd", beta=0.5)),
    }[name]


def prompt_source(method, digits: list[int]):
    def prompts(step, generator):
        seed = int(torch.randint(0, 2**31, (1,), generator=generator))
        spec = type("Prompts", (), {"horizons": digits,
                                    "prompts_per_horizon": max(1, method.prompts_per_step
                                                               // len(digits))})
        return addition_prompts(spec, np.random.default_rng(seed))

    return prompts


def evaluate(student, teacher, tasks, max_new_tokens: int, seed: int) -> dict[str, float]:
    rollouts = sample_rollouts(student, [t.prompt_ids for t in tasks], max_new_tokens,
                               eos_id=EOS, pad_id=PAD,
                               generator=torch.Generator().manual_seed(seed))
    return generation_metrics(tasks, rollouts, teacher)


@register_paper("mpopd")
def run(cfg: DictConfig, ctx: RunContext) -> dict[str, float]:
    from models.lm.loader import load_causal_lm

    data, method = cfg.dataset, cfg.method
    digits = list(range(1, data.max_digits + 1))
    teacher_task = AdditionTask(data.max_digits, data.train_examples, 0.0, digits)
    student_task = AdditionTask(data.max_digits, data.train_examples, 0.0, digits,
                                loop_fraction=data.student_loop_fraction)
    teacher, _ = load_causal_lm(cfg.model, ctx.compute, ctx.cache_dir, teacher_task)
    student, _ = load_causal_lm(cfg.student, ctx.compute, ctx.cache_dir, student_task)
    teacher.requires_grad_(False)
    spec = type("Prompts", (), {"horizons": digits,
                                "prompts_per_horizon": cfg.protocol.eval_prompts // len(digits)})
    held_out = addition_prompts(spec, ctx.rng)
    results = {"teacher": evaluate(teacher, teacher, held_out, method.max_new_tokens, ctx.seed),
               "student_start": evaluate(student, teacher, held_out, method.max_new_tokens,
                                         ctx.seed)}
    for name in ctx.progress(list(cfg.protocol.variants), "distillation variants"):
        proposal, opd = variant_settings(name, method)
        module = MPOPDModule(copy.deepcopy(student), prompt_source(method, digits), teacher,
                             RolloutConfig(method.prompts_per_step, method.group_size,
                                           method.max_new_tokens, eos_id=EOS, pad_id=PAD,
                                           lr=method.lr), opd, proposal, seed=ctx.seed)
        post_train(module, cfg.protocol.steps, ctx.compute)
        results[name] = evaluate(module.policy, teacher, held_out, method.max_new_tokens,
                                 ctx.seed)
    ctx.save_table("variants", [{"variant": k, **v} for k, v in results.items()])
    metrics = {}
    for name, values in results.items():
        for key, value in values.items():
            metrics[f"{key}_{name}"] = value
    if "opd" in results and "mpopd" in results:
        metrics["len_mpopd_over_opd"] = results["mpopd"]["length"] / results["opd"]["length"]
    ctx.save_figure("variants", _figure(results))
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
