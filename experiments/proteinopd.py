"""proteinopd protocol: a character-level GPT-2 protein LM pretrained on a protein-like
corpus (or ProtGPT2 by name with a FASTA corpus), one teacher per objective (the base
finetuned on the corpus's top fraction by that objective), then a student (a copy of the
base) distilled on its own samples towards the teachers' weighted geometric consensus;
baselines: GRPO on the scalarized reward (RL alignment), a single teacher, the arithmetic
mixture, sequential finetuning. Reported: property gains (corpus standard deviations),
designability (NLL under the frozen base, validity, homopolymer runs), diversity, the Pareto
front over weights, the cost to equal gain against RL in every unit (methods/proteinopd/
distillation.py ``COST_UNITS``), and the designability front: RL along its KL weight against
OPD along the teacher weights, with RL matched to OPD's designability for the costs."""

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
from methods.proteinopd import DesignScore, cost_to_gain
from methods.proteinopd.front import DESIGNABILITY, matched_rl, no_worse_at_equal_gain
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
    # a tiny base and its teachers are the model's own (trained once, the same at every run
    # seed); a hub base's teachers are the run's
    seed = m.seed if local else ctx.streams.seed("teacher fine-tuning")
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
    with ctx.stage("base and teachers (cached)"):
        models = build_models(cfg, ctx, corpus)
    for model in (models.base, *models.teachers.values()):
        model.requires_grad_(False)
    weights = list(method.weights)
    design = DesignScore(objectives, weights, corpus, data.min_length, p.invalid_score)
    comparison = Comparison(cfg, ctx, models, design, corpus)
    with ctx.stage("variants (OPD, RL, baselines)"):
        results, opd, rl = comparison.variants(weights)
    with ctx.stage("teacher-weight front"):
        front = comparison.pareto_front() if len(objectives) == 2 else []
    ctx.save_table("variants", [{"variant": k, **v} for k, v in results.items()])
    if front:  # two objectives: the teacher-weight front
        ctx.save_table("pareto", front)
    start = results["base"]["design"]
    cost = cost_to_gain(opd.curve, rl.curve, start, p.gain_fraction)
    ctx.save_figure("proteinopd", _figure(results, front, opd.curve, rl.curve, objectives,
                                          cost))
    metrics = metrics_of(results, cost)
    if p.front_kl_betas:
        with ctx.stage("RL along its KL weight"):
            rows = comparison.designability_front(front, results)
        matched = matched_rl(rows)
        matched_cost = cost_to_gain(opd.curve, comparison.rl(matched["kl_beta"])[0].curve,
                                    start, p.gain_fraction)
        ctx.save_table("designability_front", rows)
        ctx.save_figure("designability_front", _front_figure(rows, matched, matched_cost))
        metrics |= front_metrics(rows, matched, matched_cost)
    return metrics


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
        self.rl_runs: dict = {}
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
                        self.cfg.protocol.eval_samples, data.max_length,
                        self.ctx.streams.seed("evaluation samples"))

    def student(self, weights: list[float], mixture: str = "geometric"):
        """(module, evaluation) of the student distilled with teacher ``weights``."""
        key = (tuple(weights), mixture)
        if key not in self.students:
            module = distill(self.models.base, self.teachers, list(weights),
                             self.design_reward, self.settings, self.models.alphabet,
                             self.cfg.dataset.max_length, self.ctx.streams.seed("distillation"),
                             self.ctx.compute,
                             mixture)
            self.students[key] = (module, self.evaluate(module.policy))
        return self.students[key]

    def rl(self, kl_beta: float):
        """(module, evaluation) of GRPO on the scalarized reward with KL weight ``kl_beta``."""
        if kl_beta not in self.rl_runs:
            p, data, ctx = self.cfg.protocol, self.cfg.dataset, self.ctx
            module = align_with_rl(self.models.base, self.design_reward,
                                   self.cfg.method.sequences_per_step, p.rl_group_size, p.rl_lr,
                                   kl_beta, p.rl_steps, self.models.alphabet, data.max_length,
                                   ctx.streams.seed("rl"), ctx.compute)
            self.rl_runs[kl_beta] = (module, self.evaluate(module.policy))
        return self.rl_runs[kl_beta]

    def designability_front(self, pareto: list[dict], results: dict) -> list[dict]:
        """Gain against designability for OPD (the student at the method's weights and along
        the teacher-weight front) and for RL at every ``front_kl_betas`` weight: gain and
        NLL under the base relative to the base; homopolymer run and pairwise identity as
        measured (lower is better for all three designability measures)."""
        base = results["base"]

        def point(method: str, setting: str, values: dict, **extra) -> dict:
            return {"method": method, "setting": setting, **extra,
                    "gain": values["design"] - base["design"],
                    "nll": values["nll_under_base"] - base["nll_under_base"],
                    "homopolymer": values["homopolymer"], "identity": values["identity"]}

        rows = [point("opd", "method weights", results["opd"], kl_beta=np.nan)]
        rows += [point("opd", f"w1={r['w1']:g}", r, kl_beta=np.nan) for r in pareto]
        for beta in self.ctx.progress(sorted(set(self.cfg.protocol.front_kl_betas)),
                                      "RL along the KL weight"):
            rows.append(point("rl", f"beta={beta:g}", self.rl(beta)[1], kl_beta=beta))
        return rows

    def variants(self, weights: list[float]):
        p, data, models, ctx = self.cfg.protocol, self.cfg.dataset, self.models, self.ctx
        results = {"base": self.evaluate(models.base)}
        for k in self.objectives:
            results[f"teacher_{k}"] = self.evaluate(models.teachers[k])
        opd, results["opd"] = self.student(weights)
        rl, results["rl"] = self.rl(p.rl_kl_beta)
        results["arithmetic"] = self.student(weights, "arithmetic")[1]
        one_hot = [float(i == int(np.argmax(weights))) for i in range(len(weights))]
        results["single"] = self.student(one_hot)[1]
        sequential = trainable_copy(models.base)
        for k in self.objectives:
            sequential = finetune(sequential, top_fraction(self.corpus, k,
                                                           p.teacher_top_fraction,
                                                           data.min_length),
                                  p.teacher_steps, p.teacher_lr, p.teacher_batch_size,
                                  data.max_length, ctx.streams.seed("sequential fine-tuning"),
                                  ctx.compute, models.alphabet)
        results["sequential"] = self.evaluate(sequential)
        return results, opd, rl

    def pareto_front(self) -> list[dict]:
        return [{"w1": w, **self.student([w, 1 - w])[1]}
                for w in self.ctx.progress(list(self.cfg.protocol.pareto_weights),
                                           "Pareto front")]


COUNTED_UNITS = ("sequences", "policy_tokens", "frozen_tokens")  # OPD spends some of each


def cost_metrics(cost: dict, prefix: str = "") -> dict[str, float]:
    """RL's cost over OPD's to the common target (``cost_to_gain(opd, rl)``): wall clock as
    ``time_speedup_opd_vs_<prefix>rl`` (a timing, so named: it moves between runs), the
    counted units as ``<prefix>cost_ratio_rl_over_opd_<unit>``; RL's reward calls (OPD
    makes none)."""
    opd, rl = cost["a"], cost["b"]
    out = {f"time_speedup_opd_vs_{prefix}rl": rl["seconds"] / max(opd["seconds"], 1e-9)}
    out |= {f"{prefix}cost_ratio_rl_over_opd_{u}": rl[u] / max(opd[u], 1e-9)
            for u in COUNTED_UNITS}
    out[f"{prefix}reward_calls_to_target_rl"] = rl["reward_calls"]
    out[f"{prefix}rl_reached_target"] = float(rl["reached"])
    return out


def metrics_of(results: dict, cost: dict) -> dict[str, float]:
    metrics = {"seconds_to_target_opd": cost["a"]["seconds"],
               "seconds_to_target_rl": cost["b"]["seconds"], **cost_metrics(cost)}
    base = results["base"]
    for name, values in results.items():
        if name == "base":
            continue
        metrics[f"property_gain_{name}"] = values["design"] - base["design"]
        metrics[f"designability_nll_{name}_minus_base"] = (values["nll_under_base"]
                                                           - base["nll_under_base"])
        for key in ("valid", "homopolymer", "unique", "identity"):
            metrics[f"{key}_{name}"] = values[key]
    # OPD's gain in standard deviations of the base's design scores (Cohen's d); undefined
    # where the base's samples all score alike (a tiny evaluation)
    spread = base["design_sd"]
    metrics["property_gain_opd_standardized"] = (metrics["property_gain_opd"] / spread
                                                 if spread > 0 else float("nan"))
    return metrics


def _figure(results, front, opd_curve, rl_curve, objectives, cost):
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
        axes[1].plot([row["seconds"] for row in curve], [row["reward"] for row in curve],
                     label=label, alpha=0.8)
    axes[1].axhline(cost["target"], color="0.4", ls=":", lw=1, label="target")
    speedup = cost["b"]["seconds"] / max(cost["a"]["seconds"], 1e-9)
    axes[1].set(xlabel="wall-clock seconds", ylabel="design reward of training samples",
                title=f"time to equal gain: {speedup:.1f}x")
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


# -- the designability front ------------------------------------------------------------------

def front_metrics(rows: list[dict], matched: dict, matched_cost: dict) -> dict[str, float]:
    """OPD against RL at equal gain (RL's designability interpolated along its KL weight at
    each OPD point's gain): the share of OPD points no worse on all three measures and on
    each alone. The best gains; the costs at matched designability."""
    opd = [r for r in rows if r["method"] == "opd"]
    rl = [r for r in rows if r["method"] == "rl"]
    out = {"front_opd_gain_max": max(r["gain"] for r in opd),
           "front_rl_gain_max": max(r["gain"] for r in rl),
           "front_matched_rl_kl_beta": matched["kl_beta"],
           "front_matched_gain_rl_minus_opd": matched["gain"] - opd[0]["gain"]}
    for suffix, measures in (("", DESIGNABILITY), *((f"_{m}", (m,)) for m in DESIGNABILITY)):
        share, compared = no_worse_at_equal_gain(opd, rl, measures)
        out[f"front_opd_no_worse_at_equal_gain_frac{suffix}"] = share
    out["front_opd_points_in_rl_range"] = float(compared)
    return out | cost_metrics(matched_cost, prefix="matched_")


def _front_figure(rows, matched, matched_cost):
    fig, axes = subplots(4, panel=(4.2, 3.6))
    labels = {"nll": "NLL per token under the base, minus the base's",
              "homopolymer": "longest homopolymer run", "identity": "mean pairwise identity"}
    for ax, m in zip(axes, DESIGNABILITY, strict=False):
        for method, style in (("opd", "o"), ("rl", "^-")):  # RL joined in gain order: the
            pts = sorted((r for r in rows if r["method"] == method),  # interpolation compared
                         key=lambda r: r["gain"])
            ax.plot([r[m] for r in pts], [r["gain"] for r in pts], style,
                    color="C0" if method == "opd" else "C3",
                    label="OPD (teacher weights)" if method == "opd" else "GRPO (KL weight)")
            for r in pts:
                ax.annotate(r["setting"].split("=")[-1] if "=" in r["setting"] else "w",
                            (r[m], r["gain"]), fontsize=6, xytext=(3, 2),
                            textcoords="offset points")
        ax.plot(matched[m], matched["gain"], "o", mfc="none", mec="k", ms=11,
                label="RL at matched designability")
        ax.set(xlabel=f"{labels[m]} (lower: more designable)", ylabel="property gain")
    axes[0].legend(fontsize=7)
    units = ["seconds", *COUNTED_UNITS]
    ratios = [matched_cost["b"][u] / max(matched_cost["a"][u], 1e-9) for u in units]
    axes[3].bar(range(len(units)), ratios, color="C2")
    axes[3].axhline(1, color="0.4", lw=1)
    axes[3].axhline(8, color="C3", ls=":", lw=1, label="claimed 8x")
    axes[3].set_xticks(range(len(units)), [u.replace("_", " ") for u in units], fontsize=7)
    axes[3].set(yscale="log", ylabel="RL cost / OPD cost to equal gain",
                title=f"at matched designability (beta={matched['kl_beta']:g})")
    axes[3].legend(fontsize=7)
    fig.tight_layout()
    return fig
