"""proteinopd protocol: a character-level GPT-2 protein LM pretrained on a protein-like
corpus (or ProtGPT2 by name with a FASTA corpus), one teacher per objective (the base
finetuned on the corpus's top fraction by that objective), then a student (a copy of the
base) distilled on its own samples towards the teachers' weighted geometric consensus;
baselines: GRPO on the scalarized reward (RL alignment), a single teacher, the arithmetic
mixture, sequential finetuning. Reported: property gains (corpus standard deviations),
designability (NLL under the frozen base, validity, homopolymer runs), diversity, the Pareto
front over weights, wall-clock to equal gain against RL."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from common.errors import UserError
from data import proteins
from experiments.helpers.figures import subplots
from experiments.runner import register_paper
from experiments.runner.context import RunContext
from experiments.schemas.shared import RootConfig
from methods.proteinopd import DesignScore, time_to_gain
from methods.proteinopd.training import (
    StudentSettings,
    align_with_rl,
    distill,
    evaluate,
    finetune,
    top_fraction,
    trainable_copy,
)

# -- models -----------------------------------------------------------------------------------

@dataclass
class ProteinModels:
    base: Any
    teachers: dict[str, Any]
    alphabet: proteins.Alphabet


def build_models(cfg: RootConfig, ctx: RunContext, corpus: list[str]) -> ProteinModels:
    """The base (``model=protein-gpt2``: trained here on the corpus; a hub protein LM such
    as ``model=protgpt2``: loaded) and one teacher per objective, finetuned on the corpus's
    top fraction; what is trained here is cached by config and code."""
    from transformers import AutoModelForCausalLM

    from methods.proteinopd import training as protein_training
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
    seed = m.seed if local else ctx.seed
    config = {"model": asdict(m), "dataset": asdict(data),
              "teachers": {"objectives": objectives, "top_fraction": p.teacher_top_fraction,
                           "steps": p.teacher_steps, "lr": p.teacher_lr}, "seed": seed}

    def build(folder: Path):
        if local:
            base = tiny.build_tiny_gpt2(m, proteins.VOCAB_SIZE, proteins.PAD, proteins.EOS,
                                        data.max_length + 2)
            base = finetune(base, corpus, m.steps, m.lr, m.batch_size, data.max_length,
                            seed, ctx.compute, alphabet)
            base.save_pretrained(folder / "base")
        else:
            base = hub_base
        teachers = {}
        for k in objectives:
            top = top_fraction(corpus, k, p.teacher_top_fraction, data.min_length)
            teachers[k] = finetune(trainable_copy(base), top, p.teacher_steps, p.teacher_lr,
                                   p.teacher_batch_size, data.max_length, seed, ctx.compute,
                                   alphabet)
            teachers[k].save_pretrained(folder / f"teacher_{k}")
        return base, teachers

    def load(folder: Path):
        def read(name):
            return AutoModelForCausalLM.from_pretrained(folder / name).to(
                ctx.compute.device).eval()

        return (read("base") if local else hub_base,
                {k: read(f"teacher_{k}") for k in objectives})

    base, teachers = ctx.cached("protein-lm", config,
                                [__name__, protein_training, tiny, training, proteins], build,
                                load)
    return ProteinModels(base, teachers, alphabet)


def corpus_of(data) -> list[str]:
    """The synthetic protein-like corpus, or a FASTA file's sequences (cut to max_length)."""
    if data.name == "synthetic_proteins":
        return proteins.synthetic_corpus(data.sequences, np.random.default_rng(data.seed),
                                         data.families, data.min_length, data.max_length,
                                         data.concentration)
    return [s[: data.max_length] for s in proteins.read_fasta(data.path)]


# -- the comparison ---------------------------------------------------------------------------

@register_paper("proteinopd")
def run(cfg: RootConfig, ctx: RunContext) -> dict[str, float]:
    data, method, p = cfg.dataset, cfg.method, cfg.protocol
    objectives = list(p.objectives)
    if len(method.weights) != len(objectives):
        raise UserError(f"method.weights has {len(method.weights)} entries for "
                        f"{len(objectives)} objectives (protocol.objectives)")
    corpus = corpus_of(data)
    models = build_models(cfg, ctx, corpus)
    for model in (models.base, *models.teachers.values()):
        model.requires_grad_(False)
    weights = list(method.weights)
    design = DesignScore(objectives, weights, corpus, data.min_length, p.invalid_score)
    comparison = Comparison(cfg, ctx, models, design, corpus)
    results, opd, rl = comparison.variants(weights)
    front = comparison.pareto_front() if len(objectives) == 2 else []
    ctx.save_table("variants", [{"variant": k, **v} for k, v in results.items()])
    ctx.save_table("pareto", front)
    timing = time_to_gain(opd.curve, rl.curve, results["base"]["design"], p.gain_fraction)
    ctx.save_figure("proteinopd", _figure(results, front, opd.curve, rl.curve, objectives,
                                          timing))
    return metrics_of(results, timing)


class Comparison:
    """The base, the teachers, the distilled students (cached by weights and mixture), the
    RL baseline and sequential finetuning, each evaluated alike."""

    def __init__(self, cfg: RootConfig, ctx: RunContext, models: ProteinModels,
                 design: DesignScore, corpus: list[str]):
        self.cfg, self.ctx, self.models, self.design = cfg, ctx, models, design
        self.corpus = corpus
        self.objectives = list(cfg.protocol.objectives)
        self.teachers = [models.teachers[k] for k in self.objectives]
        self.students: dict = {}
        m = cfg.method
        self.settings = StudentSettings(m.sequences_per_step, m.lr, m.objective.name,
                                        m.jsd_beta, m.weighting.name, m.teacher_temperature,
                                        cfg.protocol.opd_steps)

    def design_reward(self, completions) -> float:
        alphabet = self.models.alphabet
        return float(self.design([alphabet.decode(c) for c in completions],
                                 [alphabet.eos in c for c in completions]).mean())

    def evaluate(self, model) -> dict:
        data = self.cfg.dataset
        return evaluate(model, self.models.base, self.design, self.models.alphabet,
                        self.cfg.protocol.eval_samples, data.max_length, self.ctx.seed)

    def student(self, weights: list[float], mixture: str = "geometric"):
        """(module, evaluation) of the student distilled with teacher ``weights``."""
        key = (tuple(weights), mixture)
        if key not in self.students:
            module = distill(self.models.base, self.teachers, list(weights),
                             self.design_reward, self.settings, self.models.alphabet,
                             self.cfg.dataset.max_length, self.ctx.seed, self.ctx.compute,
                             mixture)
            self.students[key] = (module, self.evaluate(module.policy))
        return self.students[key]

    def variants(self, weights: list[float]):
        p, data, models, ctx = self.cfg.protocol, self.cfg.dataset, self.models, self.ctx
        results = {"base": self.evaluate(models.base)}
        for k in self.objectives:
            results[f"teacher_{k}"] = self.evaluate(models.teachers[k])
        opd, results["opd"] = self.student(weights)
        rl = align_with_rl(models.base, self.design_reward, self.cfg.method.sequences_per_step,
                           p.rl_group_size, p.rl_lr, p.rl_kl_beta, p.rl_steps,
                           models.alphabet, data.max_length, ctx.seed, ctx.compute)
        results["rl"] = self.evaluate(rl.policy)
        results["arithmetic"] = self.student(weights, "arithmetic")[1]
        one_hot = [float(i == int(np.argmax(weights))) for i in range(len(weights))]
        results["single"] = self.student(one_hot)[1]
        sequential = trainable_copy(models.base)
        for k in self.objectives:
            sequential = finetune(sequential, top_fraction(self.corpus, k,
                                                           p.teacher_top_fraction,
                                                           data.min_length),
                                  p.teacher_steps, p.teacher_lr, p.teacher_batch_size,
                                  data.max_length, ctx.seed, ctx.compute, models.alphabet)
        results["sequential"] = self.evaluate(sequential)
        return results, opd, rl

    def pareto_front(self) -> list[dict]:
        return [{"w1": w, **self.student([w, 1 - w])[1]}
                for w in self.ctx.progress(list(self.cfg.protocol.pareto_weights),
                                           "Pareto front")]


def metrics_of(results: dict, timing: dict) -> dict[str, float]:
    metrics = {"time_speedup_opd_vs_rl": timing["speedup"],
               "rl_reached_target": float(timing["rl_reached"]),
               "seconds_to_target_opd": timing["opd_seconds"],
               "seconds_to_target_rl": timing["rl_seconds"]}
    base = results["base"]
    for name, values in results.items():
        if name == "base":
            continue
        metrics[f"property_gain_{name}"] = values["design"] - base["design"]
        metrics[f"designability_nll_{name}_minus_base"] = (values["nll_under_base"]
                                                           - base["nll_under_base"])
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
