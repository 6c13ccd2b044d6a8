"""directsynth protocol: per planning domain, synthesize a heuristic with the
counterexample-guided directness loop and with sample-and-select by GBFS coverage (the same
proposer for both), then evaluate the two chosen programs and goal-count on held-out test
tasks: proven directness, hill climbing without search, GBFS. h* is checked to be direct on
the test tasks small enough to enumerate, and the hostile-program suite runs through the
sandbox."""

from __future__ import annotations

import random
import time

import numpy as np

from common.errors import UserError
from data.planning import planning_domains
from experiments.helpers.figures import subplots
from experiments.runner import register_paper
from experiments.runner.context import RunContext
from experiments.schemas.shared import RootConfig
from methods.directsynth import (
    GOAL_COUNT,
    GrammarProposer,
    LanguageModelProposer,
    Limits,
    check_sandbox,
    evaluate_on_test,
    ground,
    http_generator,
    perfect_is_direct,
    run_hostile_suite,
    sample_and_select,
    synthesize_direct,
    transformers_generator,
)


def make_proposer(cfg: RootConfig, ctx: RunContext, domain, first_task, generator):
    """One proposer per domain and loop; the same kind and seed for ours and the baseline."""
    method = cfg.method
    if method.proposer.name == "grammar":
        return GrammarProposer(first_task, method.max_terms, tuple(method.weights), ctx.seed,
                               method.search.name, method.max_weight)
    example = domain.training[0].read_text()
    return LanguageModelProposer(generator, domain.domain_file.read_text(), example)


def text_generator(cfg: RootConfig, ctx: RunContext):
    method = cfg.method
    if method.proposer.name == "grammar":
        return None
    if method.proposer.name == "endpoint":
        return http_generator(method.endpoint.base_url, method.endpoint.model,
                              method.max_new_tokens, method.temperature,
                              api_key=method.endpoint.api_key or "")
    if cfg.model.name == "none":  # method.proposer=model
        raise UserError("method.proposer=model needs a language model: add model=qwen3-4b "
                        "(GPU) or model=smollm2-135m (offline)")
    from models.lm.loader import load_causal_lm

    model, tokenizer = load_causal_lm(cfg.model, ctx.compute, ctx.cache_dir)
    return transformers_generator(model.eval(), tokenizer, method.max_new_tokens,
                                  method.temperature, ctx.compute.device)


def run_domain(cfg: RootConfig, ctx: RunContext, domain, generator) -> dict:
    method, protocol = cfg.method, cfg.protocol
    limits = Limits(protocol.max_states, protocol.max_expansions, protocol.timeout,
                    protocol.memory_mb, method.sandbox.name)
    training = [t for t in (ground(domain.domain_file, p) for p in domain.training)
                if not t.unsolvable]
    testing = [t for t in (ground(domain.domain_file, p) for p in domain.testing)
               if not t.unsolvable]
    ours_proposer = make_proposer(cfg, ctx, domain, training[0], generator)
    start = time.perf_counter()
    ours = synthesize_direct(ours_proposer.propose, training, method.max_programs, limits)
    ours.proposer_evaluations = getattr(ours_proposer, "feature_evaluations", 0)
    ours_seconds = time.perf_counter() - start
    start = time.perf_counter()
    best, sampled = sample_and_select(
        make_proposer(cfg, ctx, domain, training[0], generator).propose, training,
        protocol.baseline_programs, limits)
    baseline_seconds = time.perf_counter() - start
    final = ours.final.program if ours.final else GOAL_COUNT
    chosen = {"ours": final, "baseline": best.program if best else GOAL_COUNT,
              "goal_count": GOAL_COUNT}
    test = {name: evaluate_on_test(program, testing, limits, protocol.max_steps)
            for name, program in chosen.items()}
    return {"domain": domain.name, "training_tasks": len(training), "test_tasks": len(testing),
            "programs_ours": len(ours.checks), "accepted": ours.succeeded,
            "stopped": ("direct on every training task" if ours.succeeded else
                        "budget ended" if len(ours.checks) >= method.max_programs else
                        "proposer exhausted"),
            "evaluations_ours": ours.evaluations, "seconds_ours": ours_seconds,
            "programs_baseline": len(sampled),
            "evaluations_baseline": sum(c.evaluations for c in sampled),
            "seconds_baseline": baseline_seconds,
            "baseline_training_solved": best.solved if best else 0,
            "program_ours": final, "program_baseline": chosen["baseline"],
            "test": test,
            "perfect": perfect_is_direct(testing, protocol.perfect_max_states,
                                         protocol.max_steps, random.Random(ctx.seed))}


@register_paper("directsynth")
def run(cfg: RootConfig, ctx: RunContext) -> dict[str, float]:
    data = cfg.dataset
    check_sandbox(cfg.method.sandbox.name)  # refuse before any work when it cannot run
    domains = planning_domains(data.root, list(data.domains), data.training_level,
                               data.training_tasks, data.test_level, data.test_tasks)
    generator = text_generator(cfg, ctx)
    results = [run_domain(cfg, ctx, d, generator)
               for d in ctx.progress(domains, "domains")]
    for r in results:
        ctx.info(f"{r['domain']}: ours {r['programs_ours']} programs "
                 f"({r['stopped']}), "
                 f"{r['evaluations_ours']} evaluations; baseline {r['programs_baseline']} "
                 f"programs, {r['evaluations_baseline']} evaluations")
    ctx.save_table("domains", [{k: v for k, v in r.items() if k not in ("test", "perfect")}
                               for r in results])
    ctx.save_table("test_tasks", [{"domain": r["domain"], "heuristic": name, **row}
                                  for r in results for name, rows in r["test"].items()
                                  for row in rows])
    hostile = run_hostile_suite(ground(domains[0].domain_file, domains[0].training[0]),
                                sandbox=cfg.method.sandbox.name)
    ctx.save_table("hostile_programs", [vars(o) for o in hostile])
    ctx.save_figure("synthesis", _figure(results))
    return _metrics(results, hostile)


def _fraction(results, heuristic: str, key: str, value=True) -> float:
    rows = [row for r in results for row in r["test"][heuristic]]
    return float(np.mean([row[key] == value for row in rows])) if rows else float("nan")


def _metrics(results: list[dict], hostile) -> dict[str, float]:
    ours = sum(r["evaluations_ours"] for r in results)
    baseline = sum(r["evaluations_baseline"] for r in results)
    perfect = [row for r in results for row in r["perfect"]]
    metrics = {
        "programs_ours": float(np.mean([r["programs_ours"] for r in results])),
        "programs_baseline": float(np.mean([r["programs_baseline"] for r in results])),
        "eval_cost_ratio_baseline_over_ours": baseline / max(ours, 1),
        "eval_cost_ratio_median_over_domains": float(np.median(
            [r["evaluations_baseline"] / max(r["evaluations_ours"], 1) for r in results])),
        "programs_ours_where_direct_on_training": (
            float(np.mean([r["programs_ours"] for r in results if r["accepted"]]))
            if any(r["accepted"] for r in results) else float("nan")),
        "seconds_ratio_baseline_over_ours": (sum(r["seconds_baseline"] for r in results)
                                             / sum(r["seconds_ours"] for r in results)),
        "domains_direct_on_training": sum(r["accepted"] for r in results),
        "domains": len(results),
        "direct_test_frac_final": _fraction(results, "ours", "verdict", "direct"),
        "refuted_test_frac_final": _fraction(results, "ours", "verdict", "not direct"),
        "solved_by_hillclimb_frac": _fraction(results, "ours", "hill_climb_solved"),
        "gbfs_solved_frac": _fraction(results, "ours", "gbfs_solved"),
        "direct_test_frac_baseline": _fraction(results, "baseline", "verdict", "direct"),
        "solved_by_hillclimb_frac_baseline": _fraction(results, "baseline",
                                                       "hill_climb_solved"),
        "gbfs_solved_frac_baseline": _fraction(results, "baseline", "gbfs_solved"),
        "direct_test_frac_goal_count": _fraction(results, "goal_count", "verdict", "direct"),
        "solved_by_hillclimb_frac_goal_count": _fraction(results, "goal_count",
                                                         "hill_climb_solved"),
        "perfect_direct_frac": (float(np.mean([p["direct"] for p in perfect]))
                                if perfect else float("nan")),
        "perfect_tasks_checked": len(perfect),
        "perfect_optimal_climb_frac": (float(np.mean([p["optimal_climb"] for p in perfect]))
                                       if perfect else float("nan")),
        "sandbox_escapes": sum(o.escaped for o in hostile),
        "sandbox_hostile_programs": len(hostile),
    }
    for r in results:
        metrics[f"programs_ours_{r['domain']}"] = r["programs_ours"]
    return metrics


def _figure(results: list[dict]):
    fig, axes = subplots(3, panel=(5.0, 3.6))
    names = [r["domain"] + ("*" if r["accepted"] else "") for r in results]
    x = np.arange(len(names))
    axes[0].bar(x - 0.2, [r["programs_ours"] for r in results], 0.4, label="directness loop")
    axes[0].bar(x + 0.2, [r["programs_baseline"] for r in results], 0.4,
                label="sample and select")
    axes[0].set(title="programs generated per domain (* direct on every training task)",
                ylabel="programs")
    axes[1].bar(x - 0.2, [max(r["evaluations_ours"], 1) for r in results], 0.4,
                label="directness loop")
    axes[1].bar(x + 0.2, [max(r["evaluations_baseline"], 1) for r in results], 0.4,
                label="sample and select (GBFS)")
    axes[1].set(title="heuristic evaluations to select a program", yscale="log")
    labels = {"ours": "directness loop", "baseline": "sample and select",
              "goal_count": "goal count"}
    for k, (name, label) in enumerate(labels.items()):
        solved = [np.mean([row["hill_climb_solved"] for row in r["test"][name]] or [0])
                  for r in results]
        axes[2].bar(x + (k - 1) * 0.27, solved, 0.27, label=label)
    axes[2].set(title="test tasks solved by hill climbing alone", ylim=(0, 1.05))
    for ax in axes:
        ax.set_xticks(x, names, rotation=30, ha="right", fontsize=8)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
