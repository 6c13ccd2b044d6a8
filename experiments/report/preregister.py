"""``make preregister``: freeze the claims, the analysis and the seed counts before the
confirmatory data exist.

    python -m experiments.report.preregister outputs/pilot      # writes docs/pilot.json
                                                                # and docs/preregistration.json

The pilot is a full ``make reproduce`` at the development seeds (the seeds every tuning run
used); it is kept in ``docs/pilot.json`` and never pooled with the confirmatory seeds. From
it, every paper gets its confirmatory seed count by a power analysis: for each counted
claim (not a sanity check, judged by an interval), the smallest number of seeds that gives
:data:`POWER` at the pilot's effect and spread (the noncentral t distribution, statsmodels'
``TTestPower``: two-sided 5% for a comparison, one-sided 5% against the margin for an
equivalence); the paper takes the largest of these within [:data:`MIN_SEEDS`, its cap], and
a claim that would need more is marked "needs ~N seeds: beyond this study". The cap is
:data:`MAX_SEEDS`, lowered by the default's cost so the whole study stays within
:data:`BUDGET_MINUTES` of wall time on two cores. A rule that cannot decide at the declared
count (a sign test with fewer than :data:`MIN_SIGN_SEEDS` seeds) is refused.

The confirmatory seeds start at :data:`FIRST_SEED`, disjoint from every seed a development
run, test or sweep used (0-999). Each claim is frozen as a hash of its definition (its
condition, rule, test, margin and its source, sanity and deterministic flags) and of the
paper's default configuration; the report shows a claim whose hash changed since as
exploratory, and does not count it.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from experiments.claims.papers import ROOT, all_papers, paper_info
from experiments.report.registration import (
    FIRST_SEED,
    PILOT,
    PREREGISTRATION,
    claim_hash,
    default_config_hash,
    definition,
    git_commit,
    seed_range,
)

MIN_SEEDS, MAX_SEEDS, MIN_SIGN_SEEDS = 5, 20, 6
POWER, ALPHA = 0.80, 0.05
BUDGET_MINUTES = 120.0  # the whole confirmatory study, wall time on two cores


def seeds_for_power(effect: dict, rule: str, margin: float | None) -> int | None:
    """The seeds an interval of this rule needs for :data:`POWER` at the pilot's effect (its
    mean and spread over seeds); None where the pilot has no spread to size it from."""
    from statsmodels.stats.power import TTestPower

    values = effect.get("per_seed") or []
    if len(values) < 2:
        return None
    mean = sum(values) / len(values)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    if sd == 0 or not math.isfinite(sd):
        return None
    if rule == "equivalence":  # the distance inside the margin, one-sided
        distance, alternative = ((margin or 0.0) - abs(mean)), "larger"
    else:
        distance, alternative = abs(mean), "two-sided"
    if distance <= 0:
        return 10**6  # at or beyond the margin, or no effect: no count gives the power
    power = TTestPower()
    if power.power(effect_size=distance / sd, nobs=2, alpha=ALPHA,
                   alternative=alternative) >= POWER:
        return 2  # two seeds already give the power (the solver would not go below)
    try:
        n = float(power.solve_power(effect_size=distance / sd, alpha=ALPHA, power=POWER,
                                    alternative=alternative))
    except (ValueError, RuntimeError):
        return 10**6
    return max(2, math.ceil(n)) if math.isfinite(n) and n < 10**6 else 10**6


def cost_caps(pilot: list[dict]) -> dict[str, int]:
    """Per paper, the most seeds the budget allows: every paper starts at MIN_SEEDS; the
    remaining budget is shared so that no paper's seeds cost more than the others' (two
    cores: half the budget's job-minutes each)."""
    minutes = {p["key"]: (p.get("runtime_s") or 60.0) / 60 for p in pilot}
    job_minutes = 2 * BUDGET_MINUTES
    caps = {key: MAX_SEEDS for key in minutes}
    while sum(caps[k] * minutes[k] for k in caps) > job_minutes:
        costliest = max((k for k in caps if caps[k] > MIN_SEEDS),
                        key=lambda k: caps[k] * minutes[k], default=None)
        if costliest is None:
            break
        caps[costliest] -= 1
    return caps


def plan(pilot: list[dict]) -> dict[str, dict[str, Any]]:
    """Per paper: its confirmatory seed count, and per counted claim the seeds it needs."""
    caps = cost_caps(pilot)
    out = {}
    for paper in pilot:
        key, cap = paper["key"], caps[paper["key"]]
        claims = {c["id"]: c for c in paper_info(key).get("claims") or []}
        needs, wanted = {}, MIN_SEEDS
        for judged in paper["claims"]:
            claim = claims.get(judged["id"])
            if claim is None or claim.get("sanity") or claim.get("holds_if") is None:
                continue
            rule = str(claim.get("rule") or "compare")
            if rule in ("exact", "exists") or not judged.get("effect"):
                needs[judged["id"]] = {"seeds": None, "why": f"{rule}: a count of seeds"
                                       if rule in ("exact", "exists") else "no pilot effect"}
                continue
            n = seeds_for_power(judged["effect"], rule, judged.get("margin"))
            if n is None:
                needs[judged["id"]] = {"seeds": None, "why": "no spread in the pilot"}
            elif n > cap:
                needs[judged["id"]] = {"seeds": n, "why": f"needs ~{n} seeds: beyond this "
                                       "study" if n < 10**6 else "no count gives the power "
                                       "at the pilot's effect"}
            else:
                needs[judged["id"]] = {"seeds": n, "why": "80% power at the pilot's effect"}
                wanted = max(wanted, n)
            if claim.get("test") == "sign":
                if cap < MIN_SIGN_SEEDS:
                    raise ValueError(f"{key}.{judged['id']}: a sign test cannot decide below "
                                     f"{MIN_SIGN_SEEDS} seeds; this study allows {cap}")
                wanted = max(wanted, MIN_SIGN_SEEDS)  # the rule must be able to decide
        seeds = min(max(wanted, MIN_SEEDS), cap)
        out[key] = {"seeds": seeds, "cap": cap, "claims": needs,
                    "seed_range": seed_range(seeds)}
    return out


def preregistration(pilot: list[dict]) -> dict[str, Any]:
    """The frozen record: the commit, the seed plan and every claim's hash."""
    seeds = plan(pilot)
    minutes = {p["key"]: (p.get("runtime_s") or 60.0) / 60 for p in pilot}
    papers = {}
    for key in all_papers():
        claims = paper_info(key).get("claims") or []
        papers[key] = {**seeds.get(key, {"seeds": MIN_SEEDS,
                                          "seed_range": seed_range(MIN_SEEDS), "claims": {}}),
                       "config_hash": default_config_hash(key),
                       "frozen": {c["id"]: {"hash": claim_hash(key, c),
                                            "definition": definition(c)} for c in claims}}
    return {"commit": git_commit(),
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "pilot": "docs/pilot.json", "first_seed": FIRST_SEED, "power": POWER,
            "alpha": ALPHA, "seed_bounds": [MIN_SEEDS, MAX_SEEDS],
            "budget_minutes": BUDGET_MINUTES,
            "planned_job_minutes": round(sum(p["seeds"] * minutes.get(key, 1.0)
                                             for key, p in papers.items()), 1),
            "papers": papers}


def main(argv: list[str] | None = None) -> int:
    from experiments.report.build import before_preregistration, summarize_folder

    parser = argparse.ArgumentParser(prog="python -m experiments.report.preregister",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("pilot", type=Path, help="the pilot's runs (make reproduce's folder)")
    args = parser.parse_args(argv)
    if not args.pilot.is_dir():
        print(f"error: {args.pilot} is not a folder of runs (run the pilot first: make "
              "reproduce REPRODUCE_DIR=outputs/pilot)", file=sys.stderr)
        return 1
    with before_preregistration():
        papers, _ = summarize_folder(args.pilot)
    missing = [p["key"] for p in papers if not p["seeds"]]
    if missing:
        print(f"error: the pilot has no finished run of {', '.join(missing)}", file=sys.stderr)
        return 1
    from experiments.report.build import _slim

    pilot = [_slim(p) for p in papers]
    PILOT.write_text(json.dumps({"papers": pilot}, indent=1, default=str) + "\n")
    record = preregistration(pilot)
    PREREGISTRATION.write_text(json.dumps(record, indent=1) + "\n")
    total = sum(p["seeds"] for p in record["papers"].values())
    print(f"{PILOT.relative_to(ROOT)} and {PREREGISTRATION.relative_to(ROOT)}: "
          f"{total} confirmatory jobs from seed {FIRST_SEED}, about "
          f"{record['planned_job_minutes']:.0f} job-minutes at the pilot's speed (the budget: "
          f"{2 * BUDGET_MINUTES:.0f}); commit them before the confirmatory run (make "
          "reproduce STUDY=confirmatory)")
    for key, p in record["papers"].items():
        beyond = [c for c, need in p["claims"].items() if "beyond" in need["why"]]
        print(f"  {key:<12} {p['seeds']:>2} seeds" + (f"; beyond this study: "
                                                     f"{', '.join(beyond)}" if beyond else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
