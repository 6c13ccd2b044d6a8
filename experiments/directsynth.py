"""directsynth protocol: per planning domain, synthesize a heuristic with the
counterexample-guided directness loop and with sample-and-select by GBFS coverage (the same
proposer for both), then evaluate the two chosen programs (and goal count on the easy set)
on held-out test tasks: proven directness, hill climbing without search, GBFS on the easy
set and the reference planner's plan length on the larger set. The baseline's programs at
equal quality: the smallest sample whose selected program reaches the loop's test coverage.
h* is checked to be direct on the test tasks small enough to enumerate, and the
hostile-program suite runs through the sandbox."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np

from common.errors import UserError
from common.streams import Streams
from data.planning import generated_training, larger_tasks, planning_domains
from experiments.helpers.figures import subplots
from experiments.helpers.parallel import map_jobs
from experiments.runner import register_paper
from experiments.runner.context import RunContext
from experiments.runner.seeding import seed_everything
from experiments.schemas.shared import RootConfig
from methods.directsynth import (
    GOAL_COUNT,
    GrammarProposer,
    LanguageModelProposer,
    Limits,
    PotentialProposer,
    baseline_at_equal_quality,
    check_sandbox,
    direct_or_climbs,
    evaluate_on_test,
    ground,
    http_generator,
    perfect_is_direct,
    reference_plan_length,
    run_hostile_suite,
    sample_and_select,
    synthesize_direct,
    transformers_generator,
)


def make_proposer(cfg: RootConfig, seed: int, domain, training, generator):
    """One proposer per domain and loop; the same kind and seed for ours and the baseline."""
    method = cfg.method
    if method.proposer.name == "potential":
        return PotentialProposer(training, method.max_concept_complexity, method.sample_states,
                                 method.max_features, method.max_weight, seed,
                                 method.milp_seconds, method.max_terms, tuple(method.weights),
                                 method.relaxed_features, method.milp_nodes)
    if method.proposer.name == "grammar":
        return GrammarProposer(training[0], method.max_terms, tuple(method.weights), seed,
                               method.search.name, method.max_weight)
    example = domain.training[0].read_text()
    return LanguageModelProposer(generator, domain.domain_file.read_text(), example)


def text_generator(cfg: RootConfig, ctx: RunContext):
    method = cfg.method
    if method.proposer.name in ("potential", "grammar"):
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


def _tasks(domain_file, paths) -> list:
    return [t for t in (ground(domain_file, p) for p in paths) if not t.unsolvable]


def test_sets(cfg: RootConfig, streams: Streams, output_dir: Path, domain) -> dict[str, list]:
    chosen = cfg.dataset.test_set.name
    out = {}
    if chosen in ("easy", "both"):
        out["easy"] = _tasks(domain.domain_file, domain.testing)
    if chosen in ("larger", "both"):
        out["larger"] = _tasks(domain.domain_file, larger_tasks(
            domain, streams.seed("larger tasks"), output_dir / "tasks" / "larger"))
    return out


def run_domain(cfg: RootConfig, seed: int, output_dir: Path, domain, generator=None) -> dict:
    """Both loops and the test evaluation on one domain. Depends on the run ``seed`` and the
    domain only (its streams are named by the domain), so the domains may run in worker
    processes in any order; the result names the streams drawn."""
    streams = Streams(seed).child(domain.name)
    seed_everything(streams.seed("global generators"))
    method, protocol, data = cfg.method, cfg.protocol, cfg.dataset
    limits = Limits(protocol.max_states, protocol.max_expansions, protocol.timeout,
                    protocol.memory_mb, method.sandbox.name, protocol.task_budget,
                    protocol.run_budget)
    larger_limits = dataclasses.replace(limits, max_states=protocol.larger_max_states)
    training_paths = (domain.training if data.training_set.name == "ipc" else
                      generated_training(domain, data.training_size, data.training_tasks,
                                         streams.seed("training tasks"),
                                         output_dir / "tasks" / "training"))
    training = _tasks(domain.domain_file, training_paths)
    testing = test_sets(cfg, streams, output_dir, domain)
    proposer_seed = streams.seed("proposer")  # the same for ours and the baseline
    start = time.perf_counter()
    ours_proposer = make_proposer(cfg, proposer_seed, domain, training, generator)
    ours = synthesize_direct(ours_proposer.propose, training, method.max_programs, limits)
    ours.proposer_evaluations = getattr(ours_proposer, "feature_evaluations", 0)
    ours_seconds = time.perf_counter() - start
    start = time.perf_counter()
    baseline_proposer = (ours_proposer.fresh() if isinstance(ours_proposer, PotentialProposer)
                         else make_proposer(cfg, proposer_seed, domain, training, generator))
    best, sampled = sample_and_select(baseline_proposer.propose, training,
                                      protocol.baseline_programs, limits)
    baseline_seconds = time.perf_counter() - start
    final = ours.final.program if ours.final else GOAL_COUNT
    chosen = {"ours": final, "baseline": best.program if best else GOAL_COUNT,
              "goal_count": GOAL_COUNT}
    start = time.perf_counter()
    test: dict[str, dict[str, list]] = {}
    if "easy" in testing:
        test["easy"] = {name: evaluate_on_test(program, testing["easy"], limits,
                                               protocol.max_steps, search=name != "goal_count")
                        for name, program in chosen.items()}
    if "larger" in testing:
        test["larger"] = {name: evaluate_on_test(chosen[name], testing["larger"],
                                                 larger_limits, protocol.max_steps,
                                                 search=False)
                          for name in ("ours", "baseline")}
        for task, row in zip(testing["larger"], test["larger"]["ours"], strict=True):
            row["reference_plan"] = reference_plan_length(task, protocol.reference_expansions)
            row["objects"] = sum(len(v) for v in task.objects.values())
    quality_set = "larger" if "larger" in test else "easy"
    quality_limits = larger_limits if quality_set == "larger" else limits
    programs_equal = baseline_at_equal_quality(
        sampled, direct_or_climbs(test[quality_set]["ours"]),
        lambda program: direct_or_climbs(evaluate_on_test(
            program, testing[quality_set], quality_limits, protocol.max_steps, search=False)))
    return {"domain": domain.name, "training_tasks": len(training),
            "programs_ours": len(ours.checks), "accepted": ours.succeeded,
            "stopped": ("direct on every training task" if ours.succeeded else
                        "budget ended" if len(ours.checks) >= method.max_programs else
                        "proposer exhausted"),
            "evaluations_ours": ours.evaluations, "seconds_ours": ours_seconds,
            "programs_baseline": len(sampled),
            "programs_baseline_equal_quality": programs_equal,
            "evaluations_baseline": sum(c.evaluations for c in sampled),
            "seconds_baseline": baseline_seconds,
            "seconds_test": time.perf_counter() - start,
            "baseline_training_solved": best.solved if best else 0,
            "program_ours": final, "program_baseline": chosen["baseline"],
            "programs": [{"domain": domain.name, "loop": loop, "index": i,
                          "outcome": c.outcome, "evaluations": c.evaluations,
                          "seconds": round(c.seconds, 3)}
                         for loop, checks in (("ours", ours.checks), ("baseline", sampled))
                         for i, c in enumerate(checks)],
            "test": test,
            "perfect": perfect_is_direct(testing.get("easy", []), protocol.perfect_max_states,
                                         protocol.max_steps,
                                         streams.python("randomised hill climbing")),
            "streams": streams.used}


@register_paper("directsynth")
def run(cfg: RootConfig, ctx: RunContext) -> dict[str, float]:
    data = cfg.dataset
    check_sandbox(cfg.method.sandbox.name)  # refuse before any work when it cannot run
    domains = planning_domains(data.root, list(data.domains), data.training_level,
                               data.training_tasks, data.test_level, data.test_tasks)
    generator = text_generator(cfg, ctx)
    jobs = [(cfg, ctx.seed, ctx.output_dir, d) for d in domains]
    with ctx.stage("domains (synthesis, baseline, test tasks)"):
        if generator is None:  # the offline proposers: one domain per worker process
            results = map_jobs(run_domain, jobs, cfg.protocol.workers,
                               lambda items, total: ctx.progress(items, "domains", total))
        else:  # a language model (or its endpoint) lives in this process
            results = [run_domain(*job, generator) for job in ctx.progress(jobs, "domains")]
    for r in results:
        ctx.streams.used.update(r.pop("streams"))  # drawn in the worker processes
        ctx.info(f"{r['domain']}: ours {r['programs_ours']} programs ({r['stopped']}), "
                 f"{r['evaluations_ours']} evaluations; baseline {r['programs_baseline']} "
                 f"programs ({r['programs_baseline_equal_quality'] or 'never'} at equal "
                 f"quality), {r['evaluations_baseline']} evaluations")
        for name, rows in r["test"].items():
            ctx.info(f"  {name} test tasks: " + ", ".join(
                f"{label} {_share(rows[label], 'verdict', 'direct'):.2f} direct / "
                f"{_share(rows[label], 'hill_climb_solved'):.2f} hill climbing"
                for label in ("ours", "baseline")))
    ctx.save_table("domains", [{k: v for k, v in r.items()
                                if k not in ("test", "perfect", "programs")} for r in results])
    # every candidate program: accepted, its counterexample, a crash, or an invalid value
    ctx.save_table("programs", [row for r in results for row in r["programs"]])
    ctx.save_table("test_tasks", [{"domain": r["domain"], "test_set": test_set,
                                   "heuristic": name, **row}
                                  for r in results for test_set, by in r["test"].items()
                                  for name, rows in by.items() for row in rows])
    if any("larger" in r["test"] for r in results):
        ctx.save_table("larger", [_larger_row(r) for r in results])
        for label, suffix in (("ours", ""), ("baseline", "_baseline")):  # paired by task
            ctx.save_instances(f"larger_hillclimb_frac{suffix}", {
                f"{r['domain']}/{row['task']}": float(row["hill_climb_solved"])
                for r in results for row in r["test"]["larger"][label]})
    with ctx.stage("hostile programs against the sandbox"):
        hostile = run_hostile_suite(ground(domains[0].domain_file, domains[0].training[0]),
                                    sandbox=cfg.method.sandbox.name)
    ctx.save_table("hostile_programs", [vars(o) for o in hostile])
    ctx.save_figure("synthesis", _figure(results))
    return _metrics(results, hostile, cfg.protocol.baseline_programs)


def _share(rows: list[dict], key: str, value=True) -> float:
    return float(np.mean([row[key] == value for row in rows])) if rows else float("nan")


def _fraction(results, test_set: str, heuristic: str, key: str, value=True) -> float:
    return _share([row for r in results if test_set in r["test"]
                   for row in r["test"][test_set][heuristic]], key, value)


def _larger_row(r: dict) -> dict:
    """Per domain on the larger test tasks: verdicts, hill climbing and the reference."""
    rows = r["test"]["larger"]["ours"]
    climbs = [row["hill_climb_plan"] / row["reference_plan"] for row in rows
              if row["hill_climb_solved"] and row["reference_plan"]]
    return {"domain": r["domain"], "tasks": len(rows),
            "objects": "-".join(str(row["objects"]) for row in rows),
            "direct": _share(rows, "verdict", "direct"),
            "refuted": _share(rows, "verdict", "not direct"),
            "unknown": _share(rows, "verdict", "unknown"),
            "hill_climbing": _share(rows, "hill_climb_solved"),
            "direct_or_hill_climbing": direct_or_climbs(rows),
            "baseline_direct_or_hill_climbing": direct_or_climbs(r["test"]["larger"]["baseline"]),
            "climb_over_reference_plan": float(np.median(climbs)) if climbs else float("nan"),
            "reference_solved": float(np.mean([row["reference_plan"] is not None for row in rows]))}


def _metrics(results: list[dict], hostile, sample_size: int) -> dict[str, float]:
    ours = sum(r["evaluations_ours"] for r in results)
    baseline = sum(r["evaluations_baseline"] for r in results)
    perfect = [row for r in results for row in r["perfect"]]
    equal = [r["programs_baseline_equal_quality"] for r in results]
    metrics = {
        "programs_ours": float(np.mean([r["programs_ours"] for r in results])),
        "programs_baseline": float(np.mean([r["programs_baseline"] for r in results])),
        # never reached: counted as the whole sample, so the ratio is a lower bound there
        "programs_ratio_baseline_over_ours": (sum(m or sample_size for m in equal)
                                              / sum(r["programs_ours"] for r in results)),
        "domains_baseline_never_matched": sum(m is None for m in equal),
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
        "sandbox_escapes": sum(o.escaped for o in hostile),
        "sandbox_hostile_programs": len(hostile),
    }
    if any("easy" in r["test"] for r in results):
        metrics.update({
            "direct_test_frac_final": _fraction(results, "easy", "ours", "verdict", "direct"),
            "refuted_test_frac_final": _fraction(results, "easy", "ours", "verdict",
                                                 "not direct"),
            "solved_by_hillclimb_frac": _fraction(results, "easy", "ours",
                                                  "hill_climb_solved"),
            "gbfs_solved_frac": _fraction(results, "easy", "ours", "gbfs_solved"),
            "direct_test_frac_baseline": _fraction(results, "easy", "baseline", "verdict",
                                                   "direct"),
            "solved_by_hillclimb_frac_baseline": _fraction(results, "easy", "baseline",
                                                           "hill_climb_solved"),
            "gbfs_solved_frac_baseline": _fraction(results, "easy", "baseline",
                                                   "gbfs_solved"),
            "direct_test_frac_goal_count": _fraction(results, "easy", "goal_count", "verdict",
                                                     "direct"),
            "solved_by_hillclimb_frac_goal_count": _fraction(results, "easy", "goal_count",
                                                             "hill_climb_solved"),
            "perfect_direct_frac": (float(np.mean([p["direct"] for p in perfect]))
                                    if perfect else float("nan")),
            "perfect_tasks_checked": len(perfect),
            "perfect_optimal_climb_frac": (float(np.mean([p["optimal_climb"]
                                                          for p in perfect]))
                                           if perfect else float("nan")),
        })
    larger = [_larger_row(r) for r in results if "larger" in r["test"]]
    if larger:
        rows = [row for r in results for row in r["test"]["larger"]["ours"]]
        baseline_rows = [row for r in results for row in r["test"]["larger"]["baseline"]]
        climbs = [row["hill_climb_plan"] / row["reference_plan"] for row in rows
                  if row["hill_climb_solved"] and row["reference_plan"]]
        metrics.update({
            "larger_direct_or_hillclimb_frac": direct_or_climbs(rows),
            "domains_80pct_larger": sum(d["direct_or_hill_climbing"] >= 0.8 for d in larger),
            "larger_direct_frac": _share(rows, "verdict", "direct"),
            "larger_refuted_frac": _share(rows, "verdict", "not direct"),
            "larger_unknown_frac": _share(rows, "verdict", "unknown"),
            "larger_hillclimb_frac": _share(rows, "hill_climb_solved"),
            "larger_direct_or_hillclimb_frac_baseline": direct_or_climbs(baseline_rows),
            "larger_hillclimb_frac_baseline": _share(baseline_rows, "hill_climb_solved"),
            "larger_climb_over_reference_plan": (float(np.median(climbs)) if climbs
                                                 else float("nan")),
        })
        for d in larger:
            metrics[f"larger_direct_or_hillclimb_frac_{d['domain']}"] = \
                d["direct_or_hill_climbing"]
    for r in results:
        metrics[f"programs_ours_{r['domain']}"] = r["programs_ours"]
    return metrics


def _figure(results: list[dict]):
    fig, axes = subplots(4, panel=(5.0, 3.6))
    names = [r["domain"] + ("*" if r["accepted"] else "") for r in results]
    x = np.arange(len(names))
    equal = [r["programs_baseline_equal_quality"] or np.nan for r in results]
    axes[0].bar(x - 0.27, [r["programs_ours"] for r in results], 0.27,
                label="directness loop")
    axes[0].bar(x, equal, 0.27, label="sample and select, at equal test quality")
    axes[0].bar(x + 0.27, [r["programs_baseline"] for r in results], 0.27,
                label="sample and select, whole sample")
    axes[0].set(title="programs per domain (* direct on every training task)",
                ylabel="programs")
    axes[1].bar(x - 0.2, [max(r["evaluations_ours"], 1) for r in results], 0.4,
                label="directness loop")
    axes[1].bar(x + 0.2, [max(r["evaluations_baseline"], 1) for r in results], 0.4,
                label="sample and select (GBFS)")
    axes[1].set(title="heuristic evaluations to select a program", yscale="log")
    labels = {"ours": "directness loop", "baseline": "sample and select",
              "goal_count": "goal count"}
    for panel, test_set in ((2, "easy"), (3, "larger")):
        shown = [name for name in labels
                 if all(test_set in r["test"] and name in r["test"][test_set]
                        for r in results)]
        for k, name in enumerate(shown):
            values = [direct_or_climbs(r["test"][test_set][name]) for r in results]
            axes[panel].bar(x + (k - (len(shown) - 1) / 2) * 0.27, values, 0.27,
                            label=labels[name])
        axes[panel].set(title=f"{test_set} test tasks direct or solved by hill climbing",
                        ylim=(0, 1.05))
    for ax in axes:
        ax.set_xticks(x, names, rotation=30, ha="right", fontsize=8)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
