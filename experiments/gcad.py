"""gcad protocol: steering signals from a short contrastive extraction dialogue (each
persona's system prompt vs a neutral one), then a scripted multi-turn dialogue with one
KV cache carried over all turns, one batch row per (persona, variant): no steering, the
persona as a system prompt, residual steering (all positions / assistant tokens), ungated
attention-output steering and GCAD. Trait expression and coherence per turn are measured
with the frozen model (``methods/gcad/metrics.py``), KV-cache contamination while the
dialogue runs. With ``protocol.strengths``, residual steering and the method also run at
those multiples of their scales (more rows of the same batch); they are then compared at
equal turn-1 trait, and the residual rows' contamination is correlated with their drift."""

from __future__ import annotations

import dataclasses

import numpy as np

from common.errors import UserError
from experiments.helpers.figures import subplots
from experiments.runner import register_paper
from experiments.runner.context import RunContext
from experiments.schemas.gcad import SteeringConfig
from experiments.schemas.shared import RootConfig
from methods.gcad import (
    ChatFormat,
    Controller,
    Signals,
    Variant,
    extract_signals,
    run_dialogue,
    score_dialogue,
    summarize,
)
from methods.gcad.judge import COHERENCE, TRAIT, judge_scores
from methods.gcad.metrics import at_level, common_level, drift
from models.lm.prompting import pad_id
from models.lm.rollout import Sampling

LABELS = {"none": "no steering", "prompt": "system prompt", "residual": "residual (all tokens)",
          "residual_response": "residual (assistant tokens)",
          "attention": "attention output, ungated", "gcad": "GCAD"}


def chosen(names: list[str] | None, known: list[str], what: str) -> list[str]:
    """``names`` (all ``known`` when None), each checked."""
    unknown = sorted(set(names or []) - set(known))
    if unknown:
        raise UserError(f"unknown {what} {', '.join(unknown)}; known: {', '.join(known)}")
    return known if names is None else [k for k in known if k in names]


def variants(cfg: RootConfig) -> dict[str, Variant]:
    """The baselines to run, then the method under its own name."""
    def variant(s: SteeringConfig) -> Variant:
        return Variant(s.kind, s.scale, s.positions, s.gate)

    baselines = cfg.protocol.baselines
    out = {name: variant(baselines[name]) for name in chosen(
        cfg.protocol.run_baselines, list(baselines), "baselines in protocol.run_baselines")}
    out[cfg.method.name] = variant(cfg.method)
    return out


def extract(model, tokenizer, cfg: RootConfig, sampling: Sampling, generator, layer: int,
            ctx: RunContext) -> dict[str, Signals]:
    """Per persona: play the extraction dialogue under the persona prompt and under the
    neutral prompt (the model's own answers), then contrast the two."""
    data = cfg.dataset
    chat = ChatFormat(tokenizer)
    prompts = [*data.personas.values(), data.neutral]
    controller = Controller([Variant("prompt")] * len(prompts), [None] * len(prompts), layer,
                            ctx.device)
    played = run_dialogue(model, tokenizer, controller, prompts, list(data.extraction_turns),
                          cfg.protocol.max_new_tokens, sampling, generator)
    rows = [played.ids[b][played.mask[b].bool()].tolist() for b in range(len(prompts))]
    pad = pad_id(tokenizer)
    neutral_length = len(chat.system(data.neutral))
    signals = {}
    for b, (name, prompt) in enumerate(ctx.progress(list(data.personas.items()),
                                                     "steering signals")):
        system = chat.system(prompt)
        signals[name] = extract_signals(model, [rows[b]], [rows[-1]], len(system),
                                        neutral_length, system, pad)
    return signals


def judge_dialogue(cfg: RootConfig, ctx: RunContext, dialogue, rows) -> dict[str, np.ndarray]:
    """0-100 trait and coherence ratings of every (row, turn) response by the LLM judge
    ``+model@judge=<model>`` (rows x turns tables); ``rows``: (persona, group) pairs."""
    from models.lm.loader import load_causal_lm

    judge, tokenizer = load_causal_lm(cfg.judge, ctx.compute, ctx.cache_dir)
    turns = list(cfg.dataset.user_turns)
    items = [(b, t) for b in range(len(rows)) for t in range(len(turns))]
    out = {}
    for kind, template in (("trait", TRAIT), ("coherence", COHERENCE)):
        questions = [template.format(persona=cfg.dataset.personas[rows[b][0]], user=turns[t],
                                     response=dialogue.texts[b][t]) for b, t in items]
        scores = judge_scores(judge, tokenizer, questions)
        out[kind] = np.array(scores).reshape(len(rows), len(turns))
    return out


SCALED = "residual"  # the baseline run at every strength beside the method


def strength_name(variant: str, strength: float) -> str:
    """A row group's name: the variant, with its scale multiplier unless 1."""
    return variant if strength == 1.0 else f"{variant}_x{strength:g}"


@register_paper("gcad")
def run(cfg: RootConfig, ctx: RunContext) -> dict[str, float]:
    from models.lm.loader import load_causal_lm

    model, tokenizer = load_causal_lm(cfg.model, ctx.compute, ctx.cache_dir)
    model.requires_grad_(False)
    if not getattr(tokenizer, "chat_template", None):
        raise UserError(f"model={cfg.model.name} has no chat template; gcad plays chat "
                        "dialogues (use an instruct model)")
    n_layers = len(model.get_decoder().layers)
    layer = cfg.protocol.residual_layer % n_layers
    sampling = Sampling(temperature=cfg.protocol.temperature)
    generator = ctx.streams.torch("dialogue sampling")
    signals = extract(model, tokenizer, cfg, sampling, generator, layer, ctx)
    steering = variants(cfg)
    strengths = sorted({1.0, *cfg.protocol.strengths})
    scaled = [v for v in (SCALED, cfg.method.name) if v in steering]
    groups = {strength_name(v, x): (v, x) for v in steering
              for x in (strengths if v in scaled else [1.0])}
    personas = chosen(cfg.protocol.personas, list(cfg.dataset.personas),
                      "personas in protocol.personas")
    rows = [(p, g) for p in personas for g in groups]  # one batch row each
    row_variants = [dataclasses.replace(steering[groups[g][0]], scale=steering[
        groups[g][0]].scale * groups[g][1]) for _, g in rows]
    controller = Controller(row_variants,
                            [signals[p] if rv.kind in ("residual", "attention") else None
                             for (p, _), rv in zip(rows, row_variants, strict=True)],
                            layer, ctx.device)
    prompts = [cfg.dataset.personas[p] if rv.kind == "prompt" else None
               for (p, _), rv in zip(rows, row_variants, strict=True)]
    dialogue = run_dialogue(model, tokenizer, controller, prompts, list(cfg.dataset.user_turns),
                            cfg.protocol.max_new_tokens, sampling, generator, ctx.progress)
    chat = ChatFormat(tokenizer)
    pad = pad_id(tokenizer)
    scores = score_dialogue(model, dialogue, [chat.system(cfg.dataset.personas[p])
                                              for p, _ in rows], pad)
    judged = judge_dialogue(cfg, ctx, dialogue, rows) if cfg.judge is not None else None
    transcripts = [
        {"persona": p, "variant": groups[g][0], "strength": groups[g][1], "turn": t + 1,
         "user": cfg.dataset.user_turns[t], "response": dialogue.texts[b][t],
         "trait": scores[b].trait[t], "coherence": scores[b].coherence[t],
         "user_kv_contamination": float(dialogue.contamination[b, t])}
        for b, (p, g) in enumerate(rows) for t in range(len(cfg.dataset.user_turns))]
    ctx.save_table("transcripts", transcripts)
    results = {}
    members = {g: [b for b, (_, h) in enumerate(rows) if h == g] for g in groups}
    reference = [scores[b] for b in members["none"]] if "none" in members else None
    for g in groups:
        results[g] = summarize([scores[b] for b in members[g]], reference)
        results[g]["kv_contamination"] = float(dialogue.contamination[members[g]].mean())
        if judged is not None:
            for kind, table in judged.items():
                curve = np.nanmean(table[members[g]], axis=0)
                results[g][f"judge_{kind}_curve"] = curve.tolist()
                results[g][f"judge_{kind}_turn_last"] = float(curve[-1])
                results[g][f"judge_{kind}_drift"] = drift(curve)
    turns = len(cfg.dataset.user_turns)
    ctx.save_table("turns", [{"variant": g, "turn": t + 1, "trait": r["trait_curve"][t],
                              "coherence": r["coherence_curve"][t]}
                             for g, r in results.items() for t in range(turns)])
    metrics = {}
    if SCALED in steering:  # the mechanism: does the contamination go with lost coherence?
        metrics["contamination_coherence_spearman_residual"] = contamination_coherence(
            [t for t in transcripts if t["variant"] == SCALED])
    for name in steering:
        r = results[name]
        metrics.update({f"coherence_drift_{name}": r["coherence_drift"],
                        f"coherence_mean_{name}": r["coherence_mean"],
                        f"trait_turn1_{name}": r["trait_turn1"],
                        f"trait_turn{turns}_{name}": r["trait_turn_last"],
                        f"trait_mean_{name}": r["trait_mean"],
                        f"repetition_{name}": r["repetition"],
                        f"distinct2_{name}": r["distinct2"],
                        f"kv_contamination_{name}": r["kv_contamination"]})
        if judged is not None:
            metrics.update({f"judge_trait_turn{turns}_{name}": r["judge_trait_turn_last"],
                            f"judge_coherence_drift_{name}": r["judge_coherence_drift"]})
    ctx.save_figure("dialogue", _figure({n: results[n] for n in steering}, turns))
    if len(strengths) > 1 and len(scaled) == 2 and "none" in results:
        curves = {v: strength_curve(results, v, strengths) for v in scaled}
        ctx.save_table("strengths", [{"variant": v, **point} for v, points in curves.items()
                                     for point in points])
        matched = matched_comparison(curves, turns)
        metrics.update(matched)
        ctx.save_figure("strengths", _strengths_figure(curves, results, matched, turns))
    return metrics


def contamination_coherence(turns: list[dict]) -> float:
    """Spearman's rho between the KV contamination the user turns carry and the coherence
    of the replies, over one variant's (persona, turn) rows (NaN when either is constant)."""
    from scipy.stats import spearmanr

    kv = [t["user_kv_contamination"] for t in turns]
    coherence = [t["coherence"] for t in turns]
    if len(set(kv)) < 2 or len(set(coherence)) < 2:
        return float("nan")
    return float(spearmanr(kv, coherence).statistic)


def strength_curve(results: dict, variant: str, strengths: list[float]) -> list[dict]:
    """One variant's headline numbers at each strength, from strength 0 (no steering)."""
    points = []
    for x in [0.0, *strengths]:
        r = results["none" if x == 0 else strength_name(variant, x)]
        points.append({"strength": x, "trait_turn1": r["trait_turn1"],
                       "trait_turn_last": r["trait_turn_last"],
                       "coherence_drift": r["coherence_drift"],
                       "kv_contamination": r["kv_contamination"],
                       "group": "none" if x == 0 else strength_name(variant, x)})
    return points


def matched_comparison(curves: dict[str, list[dict]], turns: int) -> dict[str, float]:
    """The methods at the highest turn-1 trait both reach (interpolated along their
    strengths), and the correlation of KV contamination with coherence drift over the
    residual baseline's strengths (the paper's causal story)."""
    from scipy.stats import spearmanr

    levels = {v: [p["trait_turn1"] for p in points] for v, points in curves.items()}
    target = common_level(list(levels.values()))
    out = {"matched_trait_turn1": target}
    for v, points in curves.items():
        for key, name in (("strength", "strength"), ("coherence_drift", "coherence_drift"),
                          ("trait_turn_last", f"trait_turn{turns}")):
            out[f"matched_{name}_{v}"] = at_level(levels[v], [p[key] for p in points], target)
    residual = curves[SCALED][1:]
    rho = spearmanr([p["kv_contamination"] for p in residual],
                    [p["coherence_drift"] for p in residual]).statistic
    out["kv_drift_spearman_residual"] = float(rho) if len(residual) >= 3 else float("nan")
    return out


def _figure(results, turns: int):
    fig, axes = subplots(3, panel=(5, 3.6))
    x = np.arange(1, turns + 1)
    for name, r in results.items():
        style = {"lw": 2.5} if name == "gcad" else {"lw": 1.2}
        axes[0].plot(x, r["trait_curve"], marker="o", ms=3, label=LABELS.get(name, name), **style)
        axes[1].plot(x, r["coherence_curve"], marker="o", ms=3, **style)
    axes[0].set(xlabel="turn", ylabel="trait expression (nats/token)",
                title="persona log-likelihood ratio")
    axes[1].set(xlabel="turn", ylabel="mean log p, minus the unsteered answer's",
                title="coherence gap to no steering (higher = more fluent)")
    axes[0].legend(fontsize=7)
    names = list(results)
    axes[2].bar(range(len(names)), [results[n]["kv_contamination"] for n in names])
    axes[2].set_xticks(range(len(names)), [LABELS.get(n, n) for n in names], rotation=35,
                       ha="right", fontsize=7)
    axes[2].set(title="KV-cache contamination of user tokens", ylabel="relative K/V change")
    fig.tight_layout()
    return fig


def _strengths_figure(curves: dict[str, list[dict]], results: dict, matched: dict,
                      turns: int):
    """Trait at the last turn against coherence drift for every (method, strength); the
    per-turn curves of the strength nearest the matched turn-1 trait; KV contamination
    against drift over the residual strengths."""
    fig, axes = subplots(4, panel=(4.6, 3.6))
    for v, points in curves.items():
        label = LABELS.get(v, v)
        axes[0].plot([p["coherence_drift"] for p in points],
                     [p["trait_turn_last"] for p in points], marker="o", label=label)
        for p in points:
            axes[0].annotate(f"{p['strength']:g}", (p["coherence_drift"], p["trait_turn_last"]),
                             fontsize=6)
        at = matched[f"matched_strength_{v}"]
        nearest = min(points[1:], key=lambda p: abs(p["strength"] - (
            at if np.isfinite(at) else 1.0)))
        r = results[nearest["group"]]
        x = np.arange(1, turns + 1)
        axes[1].plot(x, r["trait_curve"], marker="o", ms=3,
                     label=f"{label} x{nearest['strength']:g}")
        axes[2].plot(x, r["coherence_curve"], marker="o", ms=3)
    axes[0].set(xlabel="coherence drift (last turn minus first; higher = keeps coherence)",
                ylabel=f"trait at turn {turns}", title="every strength (labels: multiplier)")
    axes[0].legend(fontsize=7)
    axes[1].set(xlabel="turn", ylabel="trait expression",
                title=f"near the matched turn-1 trait {matched['matched_trait_turn1']:.3g}")
    axes[1].legend(fontsize=7)
    axes[2].set(xlabel="turn", ylabel="coherence gap to no steering", title="the same rows")
    residual = curves[SCALED][1:]
    axes[3].scatter([p["kv_contamination"] for p in residual],
                    [p["coherence_drift"] for p in residual])
    axes[3].set(xlabel="KV-cache contamination of user tokens", ylabel="coherence drift",
                title="residual steering over strengths (Spearman "
                      f"{matched['kv_drift_spearman_residual']:.2f})")
    fig.tight_layout()
    return fig
