"""rankcomp protocol: axiom satisfaction of each algorithm and baseline on sampled
profiles, the largest instances, the search for a pairwise impossibility, and runtimes."""

from __future__ import annotations

import time

import numpy as np
from omegaconf import DictConfig

from data.profiles import load_preflib, sample_profile
from experiments.helpers.figures import subplots
from experiments.runner import register_paper
from experiments.runner.context import RunContext
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


def evaluate(profile: np.ndarray, outputs: np.ndarray, m_cfg) -> dict[str, float]:
    return {
        "positional": positional_ok(profile, outputs),
        "pairwise": pairwise_ok(profile, outputs),
        "psc": psc_ok(profile, outputs, m_cfg.psc_quota.name, m_cfg.psc_reading.name),
        "kendall_cost": float(kendall_tau(profile, outputs).min(axis=1).mean()),
    }


def _methods_for(domains: set[str], m: int) -> list[str]:
    names = ["positional", "psc_ear"]
    names += [a for a, dom in DOMAIN_ALGORITHMS.items() if dom in domains]
    return names + [b for b in BASELINES if not (b == "kemeny" and m > 8)]


@register_paper("rankcomp")
def run(cfg: DictConfig, ctx: RunContext) -> dict[str, float]:
    mc, ds, p = cfg.method, cfg.dataset, cfg.protocol
    k = int(mc.k)
    instances = []  # (group, profile)
    if ds.name == "preflib":
        instances.append(("preflib", load_preflib(ds.path)))
    else:
        for culture in ds.cultures:
            for _ in range(int(ds.instances)):
                seed = int(ctx.rng.integers(2**31))
                instances.append((culture, sample_profile(culture, ds.n_voters, ds.n_candidates,
                                                          seed, ds.mallows_phi, ds.urn_alpha)))
        for culture in ("impartial", "single_peaked_walsh", "single_crossing"):
            for _ in range(int(p.stress.instances)):
                seed = int(ctx.rng.integers(2**31))
                instances.append((f"stress_{culture}", sample_profile(
                    culture, p.stress.n_voters, p.stress.n_candidates, seed)))

    records = []
    for group, profile in ctx.progress(instances, "profiles"):
        domains = domain_of(profile)
        for name in _methods_for(domains, profile.shape[1]):
            outputs = compress(name, profile, k, rng=ctx.rng)
            records.append({"group": group, "method": name, "n": len(profile),
                            "m": profile.shape[1], "domains": "+".join(sorted(domains)),
                            **evaluate(profile, outputs, mc)})
    ctx.save_table("axioms_by_instance", records)

    def frac(method, axiom, groups=None):
        vals = [r[axiom] for r in records if r["method"] == method
                and (groups is None or r["group"] in groups)]
        return float(np.mean(vals)) if vals else float("nan")

    metrics = {
        "positional_satisfied_frac": frac("positional", "positional"),
        "psc_satisfied_frac": frac("psc_ear", "psc"),
        "pairwise_single_crossing_satisfied_frac": frac("pairwise_single_crossing",
                                                        "pairwise"),
        "pairwise_single_peaked_satisfied_frac": frac("pairwise_single_peaked", "pairwise"),
        "psc_ear_positional_frac": frac("psc_ear", "positional"),
        "positional_pairwise_frac": frac("positional", "pairwise"),
    }
    for name in BASELINES:
        for axiom in AXIOMS:
            rate = 1 - frac(name, axiom)
            if np.isfinite(rate):
                metrics[f"{name}_violation_rate_{axiom}"] = rate
    for name in [*ALGORITHMS, *BASELINES]:
        cost = frac(name, "kendall_cost")
        if np.isfinite(cost):
            metrics[f"{name}_kendall_cost"] = cost
    sp_groups = [g for g, _ in instances if "single_peaked" in g]
    sc_groups = [g for g, _ in instances if "single_crossing" in g]
    recognised = [r for r in records if r["method"] == "positional"
                  and r["group"] in sp_groups + sc_groups]
    metrics["domain_recognized_frac"] = float(np.mean([
        ("single_peaked" in r["domains"]) if "peaked" in r["group"] else
        ("single_crossing" in r["domains"]) for r in recognised])) if recognised else 1.0

    summary = [{"group": g, "method": meth, **{a: frac(meth, a, [g]) for a in
                                               (*AXIOMS, "kendall_cost")}}
               for g in dict.fromkeys(g for g, _ in instances)
               for meth in dict.fromkeys(r["method"] for r in records if r["group"] == g)]
    ctx.save_table("axioms_by_culture", summary)

    imp = p.impossibility
    found = find_pairwise_impossibility(ctx.rng, int(imp.max_n),
                                        [tuple(s) for s in imp.sizes], int(imp.tries))
    metrics["pairwise_impossibility_found"] = int(found is not None)
    if found is not None:
        ctx.info(f"no pairwise-proportional output exists for m={found['m']}, k={found['k']}, "
                 f"n={found['n']}: profile {found['profile'].tolist()}")
        ctx.save_table("pairwise_impossibility", [{"voter": i, "ranking": " > ".join(
            map(str, row))} for i, row in enumerate(found["profile"])])
    else:
        ctx.info("no profile without a pairwise-proportional output was found within the "
                 f"search budget (sizes {list(imp.sizes)}, n <= {imp.max_n})")

    timing = _timings(p.timing, k, ctx)
    ctx.save_table("runtime", timing)
    ctx.save_figure("axioms_and_runtime", _figure(metrics, timing))
    return metrics


def _timings(t_cfg, k: int, ctx: RunContext) -> list[dict]:
    culture_of = {"positional": "impartial", "psc_ear": "impartial",
                  "pairwise_single_crossing": "single_crossing",
                  "pairwise_single_peaked": "single_peaked_walsh", "kmedoids": "impartial"}
    rows = []
    grid = [("n", int(n), int(t_cfg.m_fixed)) for n in t_cfg.n_values]
    grid += [("m", int(t_cfg.n_fixed), int(m)) for m in t_cfg.m_values]
    for axis, n, m in ctx.progress(grid, "timing"):
        for name, culture in culture_of.items():
            profile = sample_profile(culture, n, m, seed=n * 100 + m)
            start = time.perf_counter()
            compress(name, profile, k, rng=ctx.rng)
            rows.append({"axis": axis, "method": name, "n": n, "m": m,
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
