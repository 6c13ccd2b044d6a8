"""The study layer: what freezes, sizes and admits the evidence of a preregistered study.

- the preregistration (docs/preregistration.json, written by ``make preregister``): every
  claim frozen as a hash of its definition and of its paper's default configuration
  (:func:`claim_hash`), a claim's status against it (:func:`status`), and the fresh seeds
  the confirmatory study runs, from :data:`FIRST_SEED` (stated here only);
- each paper's seed count (:func:`plan`): the smallest count that decides each counted claim
  (holds or contradicted) with :data:`~experiments.claims.power.POWER`, simulated by its own
  rule at the pilot's per-seed values (experiments/claims/power.py), between
  :data:`MIN_SEEDS` and the paper's cost cap (:func:`cost_caps`: :data:`MAX_SEEDS`, lowered
  so the study fits :data:`BUDGET_MINUTES` on two cores); a claim that needs more than the
  cap takes the cap with its realised power recorded, a null one (no count up to 100
  decides it) raises nothing, and a sign test gets the :data:`MIN_SIGN_SEEDS` it needs to
  decide;
- which confirmatory records are evidence (:func:`frozen_code_refusal`: the preregistered
  code only), and what publishing the study adds (:func:`confirmatory_record`);
- a claim judged on a published sweep (:func:`sweep_verdict`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import subprocess
from datetime import datetime, timezone
from typing import Any

from common.errors import UserError
from experiments.claims.decide import rule_of
from experiments.claims.ledger import definition
from experiments.claims.papers import ROOT, find_paper, papers
from experiments.claims.power import POWER, power_at, seeds_for_power
from experiments.claims.verdicts import (
    ALPHA,
    CONTRADICTED,
    HOLDS,
    INCONCLUSIVE,
    NOT_RUN,
    Verdict,
)
from experiments.runner.results import changed_files, files_changed_between, read_json

PREREGISTRATION = ROOT / "docs" / "preregistration.json"
PILOT = ROOT / "docs" / "pilot.json"
SWEEPS = ROOT / "docs" / "sweeps"

FIRST_SEED = 20000  # disjoint from the development seeds (0-999) and from the first
# preregistration's 10000 on (withdrawn; its runs may have used any of them)


def seed_range(count: int) -> list[int]:
    """The first and last of ``count`` confirmatory seeds."""
    return [FIRST_SEED, FIRST_SEED + count - 1]


def claim_hash(key: str, claim: dict) -> str:
    """The hash of a claim's definition and of its paper's default configuration."""
    payload = json.dumps({"claim": definition(claim), "config": default_config_hash(key)},
                         sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def default_config_hash(key: str) -> str:
    """The hash of a paper's composed default configuration (its seed aside). Its claims are
    left out: each claim's definition is hashed on its own (:func:`claim_hash`), so a note
    added to one claim, or a change to another, leaves a claim's frozen hash as it was.
    Composed once per paper and state of the config files (a report hashes every claim)."""
    conf = str(ROOT / "conf")
    files = sorted((path, stat.st_mtime_ns, stat.st_size)
                   for folder, _, names in os.walk(conf) for name in names
                   if (stat := os.stat(path := os.path.join(folder, name))))
    return _composed_config_hash(key, conf, hash(tuple(files)))


@functools.cache
def _composed_config_hash(key: str, conf: str, files_state: int) -> str:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from experiments.runner.cli import search_path_override
    from experiments.schemas import register_schemas

    register_schemas()
    with initialize_config_dir(config_dir=conf, version_base="1.3"):
        cfg = compose("config", overrides=[f"+paper={key}", *search_path_override([key])])
    config = OmegaConf.to_container(cfg, resolve=False)
    for volatile in ("seed", "hydra", "paths"):
        config.pop(volatile, None)
    config["paper"].pop("claims", None)
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()
                          ).hexdigest()[:16]


def git_commit() -> str:
    done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True)
    return done.stdout.strip() if done.returncode == 0 else "unknown"


def status(key: str, claim: dict, registered: dict | None) -> str:
    """``preregistered`` (identical to its frozen definition), ``exploratory`` (changed
    after the preregistration, or added since) or ``not preregistered`` (no record)."""
    if not registered:
        return "not preregistered"
    frozen = registered.get("papers", {}).get(key, {}).get("frozen", {}).get(claim["id"])
    if frozen is None or frozen["hash"] != claim_hash(key, claim):
        return "exploratory"
    return "preregistered"


def frozen_code_refusal(run: dict, registered: dict) -> str | None:
    """Why a confirmatory job's record is not evidence for the preregistered code, in one
    line naming the job; None when it is. Its commit must be the preregistered one, or a
    later one whose changes since touch none of the files its run imported (results.json
    ``imports``); a tree with uncommitted changes is refused whatever they touched."""
    sha, frozen = str(run.get("git_sha") or ""), registered["commit"]
    job = f"{run.get('paper')} seed {run.get('seed')} ({run.get('folder')})"
    if not sha or sha == "None":
        return f"{job}: its record names no commit"
    if sha.endswith("-dirty"):
        return f"{job}: made at {sha[:7]} with uncommitted changes"
    if sha == frozen:
        return None
    if not isinstance(run.get("imports"), list):
        return (f"{job}: made at {sha[:7]}, not the preregistered {frozen[:7]}, and its "
                "record does not list the files its run imported")
    changed = files_changed_between(frozen, sha)
    if changed is None:
        return (f"{job}: made at {sha[:7]}, which git cannot compare with the preregistered "
                f"{frozen[:7]} here (a shallow clone: git fetch --unshallow)")
    touched = sorted(set(changed) & set(run["imports"]))
    if touched:
        return (f"{job}: made at {sha[:7]}, whose changes since the preregistered "
                f"{frozen[:7]} touch files its run imports: {', '.join(touched[:3])}"
                + (f" and {len(touched) - 3} more" if len(touched) > 3 else ""))
    return None


def confirmatory_seeds(registered: dict) -> dict[str, list[int]]:
    """Per paper, the seeds the preregistration declares."""
    return {key: list(range(p["seed_range"][0], p["seed_range"][1] + 1))
            for key, p in registered["papers"].items()}


def confirmatory_record(papers: list[dict]) -> dict[str, Any]:
    """What publishing the confirmatory study adds to docs/reproduction.json: the
    preregistration it follows, the pilot beside it, and per paper the files changed between
    the preregistration and its runs. ``UserError`` when a paper's seeds are not the ones
    the preregistration declares (a refused record leaves its seed out)."""
    registered = json.loads(PREREGISTRATION.read_text())
    declared = confirmatory_seeds(registered)
    for paper in papers:
        if sorted(paper["seeds"]) != declared.get(paper["key"]):
            raise UserError(f"{paper['key']}: seeds {paper['seeds']} are not the "
                            f"preregistered {declared.get(paper['key'])}")
    pilot = json.loads(PILOT.read_text())["papers"] if PILOT.is_file() else []
    changes = {p["key"]: sorted({f for sha in p["git_sha"]
                                 for f in changed_files(registered["commit"], sha, p["key"])})
               for p in papers}
    return {"preregistration": {"commit": registered["commit"],
                                "created": registered["created"],
                                "first_seed": registered["first_seed"]},
            "pilot": [{k: p[k] for k in ("key", "verdict", "seeds")} for p in pilot],
            "changes_since_preregistration": changes}


# -- the seed plan ------------------------------------------------------------------------

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
        claims = {c["id"]: c for c in find_paper(key).info.get("claims") or []}
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
    registered = {}
    for key, record in papers().items():
        claims = record.claims
        registered[key] = {**seeds.get(key, {"seeds": MIN_SEEDS,
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
                                             for key, p in registered.items()), 1),
            "papers": registered}


def sweep_verdict(key: str, claim: dict[str, Any]) -> Verdict:
    """A claim judged on a published sweep (``docs/sweeps/<key>_<sweep>.json``): holds when
    it holds in every configuration (each by the claim's rule over its seeds), contradicted
    when it is contradicted in one, inconclusive otherwise."""
    name, rule = claim["sweep"], rule_of(claim)
    record, error = read_json(SWEEPS / f"{key}_{name}.json")
    if record is None:
        return Verdict(NOT_RUN, f"the sweep {name} is not published (make sweep PAPER={key} "
                       f"SWEEP={name}, then make summary PUBLISH={name})", rule=rule)
    verdicts = [(", ".join(f"{k}={v}" for k, v in row["settings"].items()),
                 row["claims"].get(claim["id"], NOT_RUN)) for row in record["rows"]]
    words = [v for _, v in verdicts]
    verdict = (HOLDS if words and all(v == HOLDS for v in words) else
               CONTRADICTED if CONTRADICTED in words else INCONCLUSIVE)
    detail = "published sweep " + name + ": " + "; ".join(f"{s} {v}" for s, v in verdicts)
    return Verdict(verdict, detail, rule=rule)
