"""gcad protocol: steering signals from a short contrastive extraction dialogue (each
persona's system prompt vs a neutral one), then a scripted multi-turn dialogue with one
KV cache carried over all turns, one batch row per (persona, variant): no steering, the
persona as a system prompt, residual steering (all positions / assistant tokens), ungated
attention-output steering and GCAD. Trait expression and coherence per turn are measured
with the frozen model (``methods/gcad/metrics.py``), KV-cache contamination while the
dialogue runs."""

from __future__ import annotations

import numpy as np
import torch

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
from methods.gcad.metrics import drift
from models.lm.prompting import pad_id
from models.lm.rollout import Sampling

LABELS = {"none": "no steering", "prompt": "system prompt", "residual": "residual (all tokens)",
          "residual_response": "residual (assistant tokens)",
          "attention": "attention output, ungated", "gcad": "GCAD"}


def variants(cfg: RootConfig) -> dict[str, Variant]:
    """The baselines, then the method under its own name."""
    def variant(s: SteeringConfig) -> Variant:
        return Variant(s.kind, s.scale, s.positions, s.gate)

    out = {name: variant(v) for name, v in cfg.protocol.baselines.items()}
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
    ``+model@judge=<model>`` (rows x turns tables)."""
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
    generator = torch.Generator().manual_seed(ctx.seed)
    signals = extract(model, tokenizer, cfg, sampling, generator, layer, ctx)
    steering = variants(cfg)
    personas = list(cfg.dataset.personas)
    rows = [(p, v) for p in personas for v in steering]
    controller = Controller([steering[v] for _, v in rows],
                            [signals[p] if steering[v].kind in ("residual", "attention")
                             else None for p, v in rows], layer, ctx.device)
    prompts = [cfg.dataset.personas[p] if steering[v].kind == "prompt" else None
               for p, v in rows]
    dialogue = run_dialogue(model, tokenizer, controller, prompts, list(cfg.dataset.user_turns),
                            cfg.protocol.max_new_tokens, sampling, generator, ctx.progress)
    chat = ChatFormat(tokenizer)
    pad = pad_id(tokenizer)
    scores = score_dialogue(model, dialogue, [chat.system(cfg.dataset.personas[p])
                                              for p, _ in rows], pad)
    judged = judge_dialogue(cfg, ctx, dialogue, rows) if cfg.judge is not None else None
    ctx.save_table("transcripts", [
        {"persona": p, "variant": v, "turn": t + 1, "user": cfg.dataset.user_turns[t],
         "response": dialogue.texts[b][t], "trait": scores[b].trait[t],
         "coherence": scores[b].coherence[t], "user_kv_contamination":
         float(dialogue.contamination[b, t])}
        for b, (p, v) in enumerate(rows) for t in range(len(cfg.dataset.user_turns))])
    results = {}
    members = {name: [b for b, (_, v) in enumerate(rows) if v == name] for name in steering}
    reference = [scores[b] for b in members["none"]] if "none" in members else None
    for name in steering:
        results[name] = summarize([scores[b] for b in members[name]], reference)
        results[name]["kv_contamination"] = float(dialogue.contamination[members[name]].mean())
        if judged is not None:
            for kind, table in judged.items():
                curve = np.nanmean(table[members[name]], axis=0)
                results[name][f"judge_{kind}_curve"] = curve.tolist()
                results[name][f"judge_{kind}_turn_last"] = float(curve[-1])
                results[name][f"judge_{kind}_drift"] = drift(curve)
    turns = len(cfg.dataset.user_turns)
    ctx.save_table("turns", [{"variant": name, "turn": t + 1, "trait": r["trait_curve"][t],
                              "coherence": r["coherence_curve"][t]}
                             for name, r in results.items() for t in range(turns)])
    ctx.save_figure("dialogue", _figure(results, turns))
    metrics = {}
    for name, r in results.items():
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
    return metrics


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
