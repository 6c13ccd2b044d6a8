"""rankcomp protocol: axiom satisfaction of each algorithm and baseline on sampled
profiles, the largest instances, the search for a pairwise impossibility, and runtimes."""

from __future__ import annotations

import time

import numpy as np

from data.profiles import load_preflib, sample_profile
from experiments.helpers.figures import subplots
from experiments.runner import register_paper
from experiments.runner.context import RunContext
from experiments.schemas.shared import RootConfig
from methods.rankcomp import ALGORITHMS, BASELINES, compress, pairwise_ok, positional_ok, psc_ok
from methods.rankcomp.algorithms import kendall_tau, single_crossing_order, single_peaked_axis
from methods.rankcomp.bruteforce import find_pairwise_impossibility

AXIOMS = ("positional", "pairwise", "psc")
DOMAIN_ALGORITHMS = {"pairwise_single_crossing": "single_crossing",
                     "pairwise_single_peaked": "single_peaked"}


def domain_of(profile: np.ndarray) -> set[str]:
    """Domains recognised by preflibtools."""
    found = set()
    for name, recognise in (("single_crossing", single_crossing_order),
                            ("single_peaked", single_peaked_axis)):
        try:
            recognise(profile)
            found.add(name)
        except ValueError:
            pass
    return found


def evaluate(profile: np.ndarray, outputs: np.ndarray, method_cfg) -> dict[str, float]:
    return {
        "positional": positional_ok(profile, outputs),
        "pairwise": pairwise_ok(profile, outputs),
        "psc": psc_ok(profile, outputs, method_cfg.psc_quota.name,
                      method_cfg.psc_reading.name),
        "kendall_cost": float(kendall_tau(profile, outputs).min(axis=1).mean()),
    }


def _methods_for(domains: set[str], candidates: int) -> list[str]:
    names = ["positional", "psc_ear"]
    names += [a for a, dom in DOMAIN_ALGORITHMS.items() if dom in domains]
    return names + [b for b in BASELINES if not (b == "kemeny" and candidates > 8)]


def sample_instances(data_cfg, stress, rng: np.random.Generator) -> list[tuple[str, np.ndarray]]:
    """(group, profile): a PrefLib file, or profiles of every culture plus the largest ones."""
    if data_cfg.name == "preflib":
        return [("preflib", load_preflib(data_cfg.path))]
    instances = []
    for culture in data_cfg.cultures:
        for _ in range(data_cfg.instances):
            seed = int(rng.integers(2**31))
            instances.append((culture, sample_profile(culture, data_cfg.n_voters,
                                                      data_cfg.n_candidates, seed,
                                                      data_cfg.mallows_phi,
                                                      data_cfg.urn_alpha)))
    for culture in ("impartial", "single_peaked_walsh", "single_crossing"):
        for _ in range(stress.instances):
            seed = int(rng.integers(2**31))
            instances.append((f"stress_{culture}", sample_profile(
                culture, stress.n_voters, stress.n_candidates, seed)))
    return instances


def axiom_records(instances, method_cfg, ctx: RunContext) -> list[dict]:
    """Every applicable algorithm and baseline on every profile, with its axiom checks."""
    records = []
    rng = ctx.rng_for("randomised algorithms")
    for group, profile in ctx.progress(instances, "profiles"):
        domains = domain_of(profile)
        for name in _methods_for(domains, profile.shape[1]):
            outputs = compress(name, profile, method_cfg.k, rng=rng)
            records.append({"group": group, "method": name, "n": len(profile),
                            "m": profile.shape[1], "domains": "+".join(sorted(domains)),
                            **evaluate(profile, outputs, method_cfg)})
    return records


def _fraction(records, method: str, axiom: str, groups=None) -> float:
    vals = [r[axiom] for r in records if r["method"] == method
            and (groups is None or r["group"] in groups)]
    return float(np.mean(vals)) if vals else float("nan")


def axiom_metrics(records: list[dict], instances) -> dict[str, float]:
    """Satisfaction of each algorithm's axiom, baseline violation rates, Kendall costs and
    how often the domain recognisers found the sampled domain."""
    metrics = {
        "positional_satisfied_frac": _fraction(records, "positional", "positional"),
        "psc_satisfied_frac": _fraction(records, "psc_ear", "psc"),
        "pairwise_single_crossing_satisfied_frac": _fraction(
            records, "pairwise_single_crossing", "pairwise"),
        "pairwise_single_peaked_satisfied_frac": _fraction(
            records, "pairwise_single_peaked", "pairwise"),
        "psc_ear_positional_frac": _fraction(records, "psc_ear", "positional"),
        "positional_pairwise_frac": _fraction(records, "positional", "pairwise"),
    }
    for name in BASELINES:
        for axiom in AXIOMS:
            rate = 1 - _fraction(records, name, axiom)
            if np.isfinite(rate):
                metrics[f"{name}_violation_rate_{axiom}"] = rate
    for name in [*ALGORITHMS, *BASELINES]:
        cost = _fraction(records, name, "kendall_cost")
        if np.isfinite(cost):
            metrics[f"{name}_kendall_cost"] = cost
    domain_groups = [g for g, _ in instances if "single_peaked" in g or "single_crossing" in g]
    recognised = [r for r in records if r["method"] == "positional"
                  and r["group"] in domain_groups]
    metrics["domain_recognized_frac"] = float(np.mean([
        ("single_peaked" in r["domains"]) if "peaked" in r["group"] else
        ("single_crossing" in r["domains"]) for r in recognised])) if recognised else 1.0
    return metrics


def impossibility_experiment(search_cfg, ctx: RunContext) -> dict[str, float]:
    """Exhaustive search for a profile without any pairwise-proportional output."""
    found = find_pairwise_impossibility(ctx.rng_for("impossibility search"), search_cfg.max_n,
                                        [tuple(s) for s in search_cfg.sizes], search_cfg.tries)
    if found is not None:
        ctx.info(f"no pairwise-proportional output exists for m={found['m']}, k={found['k']}, "
                 f"n={found['n']}: profile {found['profile'].tolist()}")
        ctx.save_table("pairwise_impossibility", [{"voter": i, "k": found["k"],
                                                    "ranking": " > ".join(map(str, row))}
                                                   for i, row in enumerate(found["profile"])])
    else:
        ctx.info("no profile without a pairwise-proportional output was found within the "
                 f"search budget (sizes {list(search_cfg.sizes)}, n <= {search_cfg.max_n})")
    return {"pairwise_impossibility_found": int(found is not None)}


@register_paper("rankcomp")
def run(cfg: RootConfig, ctx: RunContext) -> dict[str, float]:
    instances = sample_instances(cfg.dataset, cfg.protocol.stress, ctx.rng_for("profiles"))
    records = axiom_records(instances, cfg.method, ctx)
    ctx.save_table("axioms_by_instance", records)
    metrics = axiom_metrics(records, instances)
    ctx.save_table("axioms_by_culture", [
        {"group": g, "method": name, **{a: _fraction(records, name, a, [g])
                                        for a in (*AXIOMS, "kendall_cost")}}
        for g in dict.fromkeys(g for g, _ in instances)
        for name in dict.fromkeys(r["method"] for r in records if r["group"] == g)])
    metrics |= impossibility_experiment(cfg.protocol.impossibility, ctx)
    timing = _timings(cfg.protocol.timing, cfg.method.k, ctx)
    ctx.save_table("runtime", timing)
    ctx.save_figure("axioms_and_runtime", _figure(metrics, timing))
    return metrics


def _timings(timing_cfg, k: int, ctx: RunContext) -> list[dict]:
    """Seconds per compression against the voters n (fixed m) and candidates m (fixed n)."""
    culture_of = {"positional": "impartial", "psc_ear": "impartial",
                  "pairwise_single_crossing": "single_crossing",
                  "pairwise_single_peaked": "single_peaked_walsh", "kmedoids": "impartial"}
    rows = []
    profiles = ctx.streams.fixed("timing profiles")  # the same profiles at every run seed
    rng = ctx.rng_for("timing")
    grid = [("n", voters, timing_cfg.m_fixed) for voters in timing_cfg.n_values]
    grid += [("m", timing_cfg.n_fixed, candidates) for candidates in timing_cfg.m_values]
    for axis, voters, candidates in ctx.progress(grid, "timing"):
        for name, culture in culture_of.items():
            profile = sample_profile(culture, voters, candidates,
                                     seed=profiles.seed(f"{culture} n={voters} m={candidates}"))
            start = time.perf_counter()
            compress(name, profile, k, rng=rng)
            rows.append({"axis": axis, "method": name, "n": voters, "m": candidates,
                         "seconds": time.perf_counter() - start})
    return rows


def _figure(metrics: dict, timing: list[dict]):

    fig, axes = subplots(3, panel=(5.33, 4.3))
    ax = axes[0]
    sat = {"positional": metrics["positional_satisfied_frac"],
           "psc_ear": metrics["psc_satisfied_frac"],
           "pairwise SC": metrics["pairwise_single_crossing_satisfied_frac"],
           "pairwise SP": metrics["pairwise_single_peaked_satisfied_frac"]}
    ax.bar(range(len(sat)), list(sat.values()), color="C2")
    ax.set_xticks(range(len(sat)), list(sat), rotation=20)
    ax.set(ylim=(0, 1.05), title="algorithms: fraction satisfying their axiom")
    ax = axes[1]
    names = sorted({k.split("_violation_rate_")[0] for k in metrics if "_violation_rate_" in k})
    width = 0.8 / len(AXIOMS)
    for i, axiom in enumerate(AXIOMS):
        ax.bar(np.arange(len(names)) + i * width,
               [metrics.get(f"{b}_violation_rate_{axiom}", np.nan) for b in names], width,
               label=axiom)
    ax.set_xticks(np.arange(len(names)) + width, names, rotation=20)
    ax.set(ylim=(0, 1.05), title="baselines: violation rate per axiom")
    ax.legend(fontsize=8)
    ax = axes[2]
    for i, name in enumerate(dict.fromkeys(r["method"] for r in timing)):
        for axis, style in (("n", "-"), ("m", "--")):
            pts = [(r[axis], r["seconds"]) for r in timing if r["method"] == name
                   and r["axis"] == axis]
            ax.loglog(*zip(*pts, strict=True), style, marker="o", color=f"C{i}",
                      label=f"{name} vs {axis}")
    ax.set(title="runtime (solid: vs n at fixed m; dashed: vs m at fixed n)",
           xlabel="n or m", ylabel="seconds")
    ax.legend(fontsize=6)
    fig.tight_layout()
    return fig
