"""proteinopd protocol: a character-level GPT-2 protein LM pretrained on a protein-like
corpus (or ProtGPT2 by name with a FASTA corpus), one teacher per objective (the base
finetuned on the corpus's top fraction by that objective), then a student (a copy of the
base) distilled on its own samples towards the teachers' weighted geometric consensus;
baselines: GRPO on the scalarized reward (RL alignment), a single teacher, the arithmetic
mixture, sequential finetuning. Reported: property gains (corpus standard deviations),
designability (NLL under the frozen base, validity, homopolymer runs), diversity, the Pareto
front over weights, wall-clock to equal gain against RL."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from common.errors import UserError
from data import proteins
from experiments.helpers.figures import subplots
from experiments.runner import register_paper
from experiments.runner.context import RunContext
from methods.proteinopd import (
    ConsensusOPDModule,
    DesignScore,
    ScalarizedRLModule,
    longest_homopolymer,
    mean_pairwise_identity,
    score,
    time_to_gain,
)
from models.lm.post_training import GRPOConfig, OPDConfig, RolloutConfig, post_train
from models.lm.rollout import sample_rollouts, teacher_forced_logprobs

# -- models -----------------------------------------------------------------------------------

@dataclass
class ProteinModels:
    base: Any
    teachers: dict[str, Any]
    alphabet: proteins.Alphabet


def _finetune(model, sequences: list[str], steps: int, lr: float, batch_size: int,
              max_length: int, seed: int, compute, alphabet: proteins.Alphabet):
    from models.lm.training import Optimization, train_causal_lm

    data = proteins.ProteinLMData(sequences, max_length, alphabet).dataset()
    return train_causal_lm(model, data, Optimization(steps, batch_size, lr, 0.05, 0.01), seed,
                           compute, progress_bar=True)


def top_fraction(corpus: list[str], objective: str, fraction: float, min_length: int
                 ) -> list[str]:
    """The corpus's sequences in the top ``fraction`` by ``objective``."""
    values = score(corpus, objective, min_length)
    cut = np.nanquantile(values, 1 - fraction)
    return [s for s, v in zip(corpus, values, strict=True) if v >= cut]


def build_models(cfg: DictConfig, ctx: RunContext, corpus: list[str]) -> ProteinModels:
    """The base (``model=protein-gpt2``: trained here on the corpus; a hub protein LM such
    as ``model=protgpt2``: loaded) and one teacher per objective, finetuned on the corpus's
    top fraction; what is trained here is cached by config and code."""
    from transformers import AutoModelForCausalLM

    from models.lm import tiny, training
    from models.lm.loader import load_causal_lm

    m, data, p = cfg.model, cfg.dataset, cfg.protocol
    objectives = list(p.objectives)
    local = m.source == "tiny_lm"
    if local:
        alphabet, hub_base = proteins.CHARACTERS, None
    else:
        hub_base, tokenizer = load_causal_lm(m, ctx.compute, ctx.cache_dir)
        alphabet = proteins.tokenizer_alphabet(tokenizer)
    seed = int(m.seed) if local else ctx.seed
    config = {"model": OmegaConf.to_container(m, resolve=True), "dataset": dict(data),
              "teachers": {"objectives": objectives, "top_fraction": p.teacher_top_fraction,
                           "steps": p.teacher_steps, "lr": p.teacher_lr}, "seed": seed}

    def build(folder: Path):
        if local:
            base = tiny.build_tiny_gpt2(m, proteins.VOCAB_SIZE, proteins.PAD, proteins.EOS,
                                        data.max_length + 2)
            base = _finetune(base, corpus, m.steps, m.lr, m.batch_size, data.max_length,
                             seed, ctx.compute, alphabet)
            base.save_pretrained(folder / "base")
        else:
            base = hub_base
        teachers = {}
        for k in objectives:
            top = top_fraction(corpus, k, p.teacher_top_fraction, data.min_length)
            teachers[k] = _finetune(copy.deepcopy(base).requires_grad_(True), top,
                                    p.teacher_steps, p.teacher_lr, p.teacher_batch_size,
                                    data.max_length, seed, ctx.compute, alphabet)
            teachers[k].save_pretrained(folder / f"teacher_{k}")
        return base, teachers

    def load(folder: Path):
        def read(name):
            return AutoModelForCausalLM.from_pretrained(folder / name).to(
                ctx.compute.device).eval()

        return (read("base") if local else hub_base,
                {k: read(f"teacher_{k}") for k in objectives})

    base, teachers = ctx.cached("protein-lm", config,
                                [__name__, tiny, training, proteins], build, load)
    return ProteinModels(base, teachers, alphabet)


# -- evaluation -------------------------------------------------------------------------------

def generate(model, count: int, max_length: int, seed: int, alphabet: proteins.Alphabet):
    """``count`` unconditional samples (prompt ``<eos>``), exact sampling."""
    return sample_rollouts(model, [[alphabet.eos]] * count, max_length + 1,
                           eos_id=alphabet.eos, pad_id=alphabet.pad,
                           generator=torch.Generator().manual_seed(seed))


def evaluate(model, models: ProteinModels, design: DesignScore, cfg: DictConfig,
             seed: int) -> dict:
    data, alphabet = cfg.dataset, models.alphabet
    rollouts = generate(model, cfg.protocol.eval_samples, data.max_length, seed, alphabet)
    sequences = [alphabet.decode(c) for c in rollouts.completions()]
    with torch.no_grad():
        nll = -teacher_forced_logprobs(models.base, rollouts)
    mask = rollouts.completion_mask.to(nll.device)
    z = design.standardized(sequences)
    finished = [alphabet.eos in c for c in rollouts.completions()]
    scores = design(sequences, finished)
    out = {"design": float(scores.mean()),
           "nll_under_base": float((nll * mask).sum() / mask.sum()),
           "valid": float(np.mean(scores != design.invalid)),
           "length": float(np.mean([len(s) for s in sequences])),
           "homopolymer": float(np.mean([longest_homopolymer(s) for s in sequences if s]
                                        or [0])),
           "unique": len(set(sequences)) / len(sequences),
           "identity": mean_pairwise_identity(sequences, 200, np.random.default_rng(seed))}
    for k, row in zip(design.objectives, z, strict=True):
        out[f"z_{k}"] = float(np.nanmean(row))
    return out


# -- training variants ------------------------------------------------------------------------

def _trainable_copy(model):
    return copy.deepcopy(model).requires_grad_(True)


def _prompts(count: int, alphabet: proteins.Alphabet):
    def prompts(step, generator):
        return [proteins.ProteinPrompt([alphabet.eos]) for _ in range(count)]

    return prompts


def distill(models: ProteinModels, teachers: list, weights: list[float], design_reward,
            cfg: DictConfig, ctx: RunContext, mixture: str = "geometric"
            ) -> ConsensusOPDModule:
    method, alphabet = cfg.method, models.alphabet
    module = ConsensusOPDModule(
        _trainable_copy(models.base), _prompts(method.sequences_per_step, alphabet), teachers,
        RolloutConfig(method.sequences_per_step, 1, cfg.dataset.max_length + 1,
                      eos_id=alphabet.eos, pad_id=alphabet.pad, lr=method.lr),
        OPDConfig(objective=method.objective, beta=method.jsd_beta), weights, design_reward,
        mixture, method.weighting, [method.teacher_temperature] * len(teachers),
        seed=ctx.seed)
    return post_train(module, cfg.protocol.opd_steps, ctx.compute)


def align_with_rl(models: ProteinModels, design_reward, cfg: DictConfig, ctx: RunContext
                  ) -> ScalarizedRLModule:
    p, alphabet = cfg.protocol, models.alphabet
    groups = max(1, cfg.method.sequences_per_step // p.rl_group_size)
    module = ScalarizedRLModule(
        _trainable_copy(models.base), _prompts(groups, alphabet),
        RolloutConfig(groups, p.rl_group_size, cfg.dataset.max_length + 1,
                      eos_id=alphabet.eos, pad_id=alphabet.pad, lr=p.rl_lr),
        GRPOConfig(loss_type="dapo", beta=p.rl_kl_beta), design_reward,
        reference=models.base, seed=ctx.seed)
    return post_train(module, p.rl_steps, ctx.compute)


@register_paper("proteinopd")
def run(cfg: DictConfig, ctx: RunContext) -> dict[str, float]:
    data, method, p = cfg.dataset, cfg.method, cfg.protocol
    objectives = list(p.objectives)
    if len(method.weights) != len(objectives):
        raise UserError(f"method.weights has {len(method.weights)} entries for "
                        f"{len(objectives)} objectives (protocol.objectives)")
    corpus = (proteins.synthetic_corpus(data.sequences, np.random.default_rng(data.seed),
                                        data.families, data.min_length, data.max_length,
                                        data.concentration)
              if data.name == "synthetic_proteins" else
              [s[: data.max_length] for s in proteins.read_fasta(data.path)])
    models = build_models(cfg, ctx, corpus)
    base, teachers, alphabet = models.base, models.teachers, models.alphabet
    teacher_list = [teachers[k] for k in objectives]
    for model in (base, *teacher_list):
        model.requires_grad_(False)
    weights = [float(w) for w in method.weights]
    design = DesignScore(objectives, weights, corpus, data.min_length, p.invalid_score)

    def design_reward(completions) -> float:
        return float(design([alphabet.decode(c) for c in completions],
                            [alphabet.eos in c for c in completions]).mean())

    distilled = {}

    def student(w: list[float], mixture: str = "geometric"):
        """(module, evaluation) of the student distilled with teacher weights ``w``."""
        key = (tuple(w), mixture)
        if key not in distilled:
            module = distill(models, teacher_list, list(w), design_reward, cfg, ctx, mixture)
            distilled[key] = (module, evaluate(module.policy, models, design, cfg, ctx.seed))
        return distilled[key]

    results = {"base": evaluate(base, models, design, cfg, ctx.seed)}
    for k in objectives:
        results[f"teacher_{k}"] = evaluate(teachers[k], models, design, cfg, ctx.seed)
    opd, results["opd"] = student(weights)
    rl = align_with_rl(models, design_reward, cfg, ctx)
    results["rl"] = evaluate(rl.policy, models, design, cfg, ctx.seed)
    results["arithmetic"] = student(weights, "arithmetic")[1]
    one_hot = [float(i == int(np.argmax(weights))) for i in range(len(weights))]
    results["single"] = student(one_hot)[1]
    sequential = _trainable_copy(base)
    for k in objectives:
        sequential = _finetune(sequential, top_fraction(corpus, k, p.teacher_top_fraction,
                                                        data.min_length),
                               p.teacher_steps, p.teacher_lr, p.teacher_batch_size,
                               data.max_length, ctx.seed, ctx.compute, alphabet)
    results["sequential"] = evaluate(sequential, models, design, cfg, ctx.seed)

    front = []
    if len(objectives) == 2:
        for w in ctx.progress(list(p.pareto_weights), "Pareto front"):
            front.append({"w1": float(w), **student([float(w), 1 - float(w)])[1]})
    ctx.save_table("variants", [{"variant": k, **v} for k, v in results.items()])
    ctx.save_table("pareto", front)
    timing = time_to_gain(opd.curve, rl.curve, results["base"]["design"], p.gain_fraction)
    ctx.save_figure("proteinopd", _figure(results, front, opd.curve, rl.curve, objectives,
                                          timing))
    metrics = {"time_speedup_opd_vs_rl": timing["speedup"],
               "rl_reached_target": float(timing["rl_reached"]),
               "seconds_to_target_opd": timing["opd_seconds"],
               "seconds_to_target_rl": timing["rl_seconds"]}
    for name, values in results.items():
        if name == "base":
            continue
        metrics[f"property_gain_{name}"] = values["design"] - results["base"]["design"]
        metrics[f"designability_nll_{name}_minus_base"] = (values["nll_under_base"]
                                                           - results["base"]["nll_under_base"])
        for key in ("valid", "homopolymer", "unique", "identity"):
            metrics[f"{key}_{name}"] = values[key]
    return metrics


def _figure(results, front, opd_curve, rl_curve, objectives, timing):
    fig, axes = subplots(4, panel=(4.6, 3.9))
    zx, zy = (f"z_{k}" for k in (objectives * 2)[:2])
    rows = sorted(front, key=lambda r: r["w1"])
    axes[0].plot([r[zx] for r in rows], [r[zy] for r in rows], "o-",
                 label="OPD to the geometric consensus (w from 0 to 1)")
    for name, marker in (("base", "k*"), ("arithmetic", "bs"), ("rl", "r^"),
                         ("sequential", "gD"), *((n, "kx") for n in results
                                                 if n.startswith("teacher_"))):
        axes[0].plot(results[name][zx], results[name][zy], marker, ms=8, label=name)
    axes[0].set(xlabel=f"{objectives[0]} (z)", ylabel=f"{objectives[1]} (z)",
                title="Pareto front over teacher weights")
    for curve, label in ((opd_curve, "OPD (consensus)"), (rl_curve, "GRPO (scalarized)")):
        t, r = np.array(curve).T
        axes[1].plot(t, r, label=label, alpha=0.8)
    axes[1].axhline(timing["target"], color="0.4", ls=":", lw=1, label="target")
    axes[1].set(xlabel="wall-clock seconds", ylabel="design reward of training samples",
                title=f"time to equal gain: {timing['speedup']:.1f}x")
    names = list(results)
    for ax, key, title in ((axes[2], "nll_under_base", "NLL per token under the frozen base"),
                           (axes[3], "homopolymer", "longest homopolymer run")):
        ax.bar(range(len(names)), [results[n][key] for n in names],
               color=["0.6" if n == "base" else "C0" for n in names])
        ax.set_xticks(range(len(names)), names, rotation=35, ha="right", fontsize=7)
        ax.set(title=f"designability proxy: {title}")
    axes[0].legend(fontsize=7)
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    return fig
