"""``make preregister``: freeze the claims, the analysis and the seed counts before the
confirmatory data exist.

    python -m experiments.report.preregister outputs/pilot      # writes docs/pilot.json
                                                                # and docs/preregistration.json

The pilot is a full ``make reproduce`` at the development seeds (the seeds every tuning run
used); it is kept in ``docs/pilot.json`` and never pooled with the confirmatory seeds. From
it, every paper gets its confirmatory seed count by a power analysis that simulates each
counted claim's own rule at the pilot's per-seed values (experiments/claims/power.py: a
conjunction with all its parts, an equivalence with both sides): the smallest count that
decides the claim (holds or contradicted) with :data:`POWER`; the paper takes the largest
of these within [:data:`MIN_SEEDS`, its cap] (a claim that needs more than the cap takes
the cap), and records, per claim, the power simulated at the count it gets and where the
cap overrules the count it needs. A claim no count up to 100 decides (a null effect) does
not raise its paper's count. The cap is :data:`MAX_SEEDS`, lowered by the default's cost so
the whole study stays within :data:`BUDGET_MINUTES` of wall time on two cores; where even
:data:`MIN_SEEDS` a paper costs more than the budget, the record says so. A rule that
cannot decide at the declared count (a sign test with fewer than :data:`MIN_SIGN_SEEDS`
seeds) is refused.

The confirmatory seeds start at :data:`FIRST_SEED`, disjoint from every seed a development
run, test or sweep used (0-999). Each claim is frozen as a hash of its definition (its
condition, rule, test, margin and its source, sanity and deterministic flags) and of the
paper's default configuration; the report shows a claim whose hash changed since as
exploratory, and does not count it.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from experiments.claims.papers import ROOT, all_papers, paper_info
from experiments.claims.power import POWER, power_at, seeds_for_power
from experiments.claims.verdicts import ALPHA
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
BUDGET_MINUTES = 240.0  # the whole confirmatory study, wall time on two cores (480 job-minutes)


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


def pilot_runs(judged: dict[str, Any]) -> list[dict[str, float]]:
    """A judged claim's per-seed metrics from the pilot's record (``values``: metric ->
    value at each seed)."""
    values = judged.get("values") or {}
    seeds = max((len(v) for v in values.values()), default=0)
    return [{name: v[i] for name, v in values.items()} for i in range(seeds)]


def plan(pilot: list[dict]) -> dict[str, dict[str, Any]]:
    """Per paper: its confirmatory seed count, and per counted claim the seeds it needs and
    the power its rule has at the count the paper gets (both simulated)."""
    caps = cost_caps(pilot)
    out = {}
    for paper in pilot:
        key, cap = paper["key"], caps[paper["key"]]
        claims = {c["id"]: c for c in paper_info(key).get("claims") or []}
        sized, runs, wanted = {}, {}, MIN_SEEDS
        for judged in paper["claims"]:
            claim = claims.get(judged["id"])
            if claim is None or claim.get("sanity") or claim.get("ablation") or \
                    claim.get("holds_if") is None:
                continue
            runs[judged["id"]] = pilot_runs(judged)
            sizing = seeds_for_power(claim, runs[judged["id"]])
            sized[judged["id"]] = (claim, sizing)
            if sizing.seeds is not None:  # beyond the cap: the cap, its power recorded
                wanted = max(wanted, min(sizing.seeds, cap))
            if claim.get("test") == "sign":
                if cap < MIN_SIGN_SEEDS:
                    raise ValueError(f"{key}.{judged['id']}: a sign test cannot decide below "
                                     f"{MIN_SIGN_SEEDS} seeds; this study allows {cap}")
                wanted = max(wanted, MIN_SIGN_SEEDS)  # the rule must be able to decide
        seeds = min(max(wanted, MIN_SEEDS), cap)
        needs = {}
        for claim_id, (claim, sizing) in sized.items():
            need = {"seeds": sizing.seeds, "why": sizing.why}
            if sizing.power is not None:  # an interval rule: its power at the study's count
                need["power_at_study"] = power_at(claim, runs[claim_id], seeds)
                if sizing.seeds is not None and sizing.seeds > cap:
                    need["why"] += f"; beyond this study: the cost cap is {cap} seeds"
                elif sizing.seeds is None:
                    need["why"] += "; beyond this study"
            needs[claim_id] = need
        out[key] = {"seeds": seeds, "cap": cap, "claims": needs,
                    "seed_range": seed_range(seeds)}
    return out


def budget_note(pilot: list[dict]) -> str | None:
    """Where the budget cannot buy :data:`MIN_SEEDS` seeds of every paper, what the floor
    costs against it (the plan keeps the floor and says so)."""
    minutes = sum((p.get("runtime_s") or 60.0) / 60 for p in pilot) * MIN_SEEDS
    if minutes <= 2 * BUDGET_MINUTES:
        return None
    return (f"{MIN_SEEDS} seeds of every paper cost {minutes:.0f} job-minutes, over the "
            f"budget's {2 * BUDGET_MINUTES:.0f}: every paper is held at the floor")


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
            "budget_minutes": BUDGET_MINUTES, "budget_note": budget_note(pilot),
            "planned_job_minutes": round(sum(p["seeds"] * minutes.get(key, 1.0)
                                             for key, p in papers.items()), 1),
            "papers": papers}


def main(argv: list[str] | None = None) -> int:
    from experiments.report.build import before_preregistration, summarize_folder

    parser = argparse.ArgumentParser(prog="python -m experiments.report.preregister",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("pilot", type=Path, help="the pilot's runs (make reproduce's folder)")
    parser.add_argument("--pilot-only", action="store_true",
                        help="write docs/pilot.json only: the pilot judged again, before the "
                             "study is preregistered")
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
    if args.pilot_only:
        print(f"{PILOT.relative_to(ROOT)}: the pilot's {sum(len(p['seeds']) for p in pilot)} "
              "jobs judged (no preregistration written)")
        return 0
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
