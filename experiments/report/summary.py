"""The report's data step: the runs under a folder found and judged into one record per
paper and per claim (:class:`PaperRecord`, :class:`ClaimRecord`), what every renderer reads
(experiments/report/render.py: the page, report.md, the README table and the paper pages).

``collect`` finds the runs (``results.json``) and failures (``failed.json``) under a folder
(the ``make reproduce`` sweep, a study's committed records, a multirun, or single runs);
``summarize`` judges each paper's claims over its seeds (each claim by its rule);
``published`` is the part of a record docs/reproduction.json keeps.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import re
from collections import defaultdict
from pathlib import Path
from typing import Any, TypedDict

from experiments.claims import (
    INCONCLUSIVE,
    JUDGED,
    NOT_RUN,
    Verdict,
    claim_metrics,
    find_paper,
    is_default,
    judge_runs,
    paper_verdict,
    papers,
    rule_of,
)
from experiments.claims.decide import usable_number
from experiments.claims.metrics import headline as headline_metrics
from experiments.claims.papers import ROOT
from experiments.claims.power import seeds_for_power
from experiments.claims.study import (
    FIRST_SEED,
    PREREGISTRATION,
    frozen_code_refusal,
    status,
    sweep_verdict,
)
from experiments.claims.verdicts import margin_of, mean_sd
from experiments.runner.results import read_json

PAPER_NOTES = ROOT / "docs" / "papers"
FAILED, CORRUPT = "failed", "corrupt"


class ClaimRecord(TypedDict, total=False):
    """One claim judged over a paper's seeds."""

    id: str
    text: str
    holds_if: str | None
    rule: str
    test: str
    margin: float | None
    margin_metric: str | None
    margin_source: str | None
    margin_reason: str | None
    changed_after_results: str | None
    scale: str | None
    sanity: bool
    ablation: bool
    setting: str | None
    abstract: str | None
    preregistration: str  # preregistered | exploratory | not preregistered
    verdict: str
    detail: str
    per_seed: list[float]
    p_against: float
    seeds_needed: dict[str, Any] | None  # power.Sizing as a dict, for an inconclusive one
    effect: dict[str, Any] | None  # verdicts.Effect as a dict, with its text
    parts: list[dict[str, str]]  # a conjunction's comparisons: verdict, text
    values: dict[str, list]  # metric -> value at each seed
    measured: dict[str, float]  # metric -> mean over seeds


class PaperRecord(TypedDict, total=False):
    """One paper's runs judged: its badge, its claims and where its evidence came from."""

    key: str
    title: str
    claim: str
    study: str  # confirmatory | declared
    figure_caption: str
    verdict: str
    claims: list[ClaimRecord]
    decided_by: list[str]
    stand_in: str | None
    seeds: list[int]
    declared_seeds: int
    failed: list[dict[str, Any]]
    corrupt: list[dict[str, str]] | int
    refused: list[str]
    duplicates: list[dict[str, Any]]
    headline: dict[str, Any] | None
    runtime_s: float | None
    git_sha: list[str]
    config_hash: list[str]
    versions: dict[str, str]
    folders: list[str]


class StudyRecord(TypedDict, total=False):
    """A published study (docs/reproduction.json): its papers' records as published, its
    time from the records, the reproduction it compares verdicts with, where its committed
    records are, and for a confirmatory study its preregistration, the pilot beside it and
    the files changed between the two."""

    papers: list[PaperRecord]
    timing: dict[str, Any]  # runner.records.study_timing: jobs, wall_min, job_minutes
    since: dict[str, Any] | None
    records: str | None  # docs/studies/<study>
    preregistration: dict[str, Any]
    pilot: list[dict[str, Any]]
    changes_since_preregistration: dict[str, list[str]]


def _seed_of(overrides: list[str]) -> int | None:
    for item in overrides:
        if item.startswith("seed="):
            return int(item.split("=", 1)[1])
    return 0


def _paper_from_path(path: Path, folder: Path) -> str | None:
    """The paper a run folder belongs to when its files cannot tell (``<paper>/seed<k>``)."""
    known = set(papers())
    return next((part for part in path.relative_to(folder).parts if part in known), None)


def collect(folder: Path) -> dict[str, dict[str, list]]:
    """paper -> {"runs": [results.json, by seed, each seed once], "failed": [failed.json +
    folder], "corrupt": [{"file", "error"}], "duplicates": [a seed's other folders]} of the
    default runs under ``folder`` (runs with other
    settings are not the claims' evidence); a folder whose run finished counts once even if
    an earlier attempt failed there. A file that cannot be read (truncated, empty) is
    corrupt, filed under the paper its path names (``"?"`` when none)."""
    folder = Path(folder)
    found: dict[str, dict[str, list]] = defaultdict(
        lambda: {"runs": [], "failed": [], "corrupt": []})
    for path in sorted(folder.rglob("results.json")):
        result, error = read_json(path)
        if result is None or not isinstance(result.get("metrics"), dict):
            key = (result or {}).get("paper") or _paper_from_path(path, folder) or "?"
            found[key]["corrupt"].append({"file": str(path), "error": error or "no metrics"})
        elif "paper" in result and is_default(result.get("overrides") or []):
            result["folder"] = str(path.parent)
            found[result["paper"]]["runs"].append(result)
    for path in sorted(folder.rglob("failed.json")):
        if (path.parent / "results.json").exists():
            continue
        failure, error = read_json(path)
        if failure is None:
            key = _paper_from_path(path, folder) or "?"
            found[key]["corrupt"].append({"file": str(path), "error": error})
        elif failure.get("paper") and is_default(failure.get("overrides") or []):
            failure["folder"] = str(path.parent)
            failure["seed"] = _seed_of(failure.get("overrides") or [])
            found[failure["paper"]]["failed"].append(failure)
    for entry in found.values():
        entry["runs"], entry["duplicates"] = _once_per_seed(entry["runs"])
    return dict(found)


def _once_per_seed(runs: list[dict]) -> tuple[list[dict], list[dict]]:
    """The runs by seed, each seed once (the first folder in path order); the other folders
    of a seed (a copied folder) are named, never counted twice."""
    kept: dict[Any, dict] = {}
    duplicates = []
    for run in sorted(runs, key=lambda r: (r.get("seed", 0), r.get("folder", ""))):
        if run.get("seed", 0) in kept:
            duplicates.append({"seed": run.get("seed", 0), "folder": run.get("folder"),
                               "counted": kept[run.get("seed", 0)].get("folder")})
        else:
            kept[run.get("seed", 0)] = run
    return list(kept.values()), duplicates


def _seeds_needed(claim: dict[str, Any], verdict: Verdict, metrics: list[dict]
                  ) -> dict[str, Any] | None:
    """For an inconclusive interval verdict: the seeds a new study would need for 80% power
    at these seeds' values, by simulating the claim's rule (experiments/claims/power.py)."""
    if verdict.verdict != INCONCLUSIVE or verdict.effect is None or claim.get("sweep"):
        return None
    return dataclasses.asdict(seeds_for_power(claim, metrics))


def _effect_record(verdict: Verdict) -> dict[str, Any] | None:
    e = verdict.effect
    return None if e is None else {**dataclasses.asdict(e), "text": e.text()}


@functools.cache
def _registered() -> dict | None:
    record, _ = read_json(PREREGISTRATION)
    return record


@contextlib.contextmanager
def before_preregistration():
    """Summaries as they are before docs/preregistration.json exists, every claim "not
    preregistered": the pilot's, which the preregistration is made from (so that making it
    again gives the same pilot, whatever record is on disk)."""
    global _registered
    kept = _registered
    _registered = lambda: None  # noqa: E731
    try:
        yield
    finally:
        _registered = kept


def _frozen_code_runs(runs: list[dict]) -> tuple[list[dict], list[str]]:
    """The runs that are evidence, and one line per confirmatory run (a seed of the
    preregistered study) whose record is not from the frozen code
    (:func:`experiments.claims.study.frozen_code_refusal`)."""
    registered = _registered()
    if not registered:
        return runs, []
    kept, refused = [], []
    for run in runs:
        why = (frozen_code_refusal(run, registered)
               if run.get("seed", -1) >= registered["first_seed"] else None)
        if why:
            refused.append(why)
        else:
            kept.append(run)
    return kept, refused


def preregistration_status(key: str, claim: dict[str, Any]) -> str:
    """The claim against docs/preregistration.json: preregistered, exploratory (changed
    after it) or not preregistered."""
    return status(key, claim, _registered())


def summarize(key: str, entry: dict[str, list] | None) -> PaperRecord:
    """One paper's verdicts, effects, headline number and runtime over the seeds in
    ``entry``."""
    info = find_paper(key).info
    runs, refused = _frozen_code_runs((entry or {}).get("runs", []))
    failed = (entry or {}).get("failed", [])
    corrupt = (entry or {}).get("corrupt", [])
    metrics = [r["metrics"] for r in runs]
    claims = []
    for claim in info.get("claims") or []:
        text = claim.get("holds_if")
        names = sorted(claim_metrics(claim))
        verdict = (sweep_verdict(key, claim) if claim.get("sweep")
                   else judge_runs(claim, runs))
        registration = preregistration_status(key, claim)
        claims.append({
            "id": claim["id"], "text": claim["text"], "holds_if": text,
            "rule": verdict.rule, "test": claim.get("test", "interval"),
            "margin": (margin_of(claim, metrics) if rule_of(claim) == "equivalence"
                       and verdict.verdict in JUDGED else claim.get("margin")),
            "margin_metric": claim.get("margin_metric"),
            "margin_source": claim.get("margin_source"),
            "margin_reason": claim.get("margin_reason"),
            "changed_after_results": claim.get("changed_after_results"),
            "scale": claim.get("scale"), "sweep": claim.get("sweep"),
            "sanity": bool(claim.get("sanity")), "ablation": bool(claim.get("ablation")),
            "setting": claim.get("setting") or info.get("stand_in"),
            "abstract": claim.get("abstract"),
            "preregistration": registration,
            "verdict": verdict.verdict, "detail": verdict.detail,
            "per_seed": verdict.per_seed, "p_against": verdict.p_against,
            "seeds_needed": _seeds_needed(claim, verdict, metrics),
            "effect": _effect_record(verdict),
            "parts": [{"verdict": part.verdict, "text": part.effect.text()}
                      for part in verdict.parts],
            "values": {n: [m.get(n) for m in metrics] for n in names},
            "measured": {n: mean_sd(usable)[0] for n in names
                         if (usable := [float(m[n]) for m in metrics
                                        if usable_number(m.get(n))])},
        })
    primary = next(iter(headline_metrics(info, metrics[0] if metrics else {})), None)
    headline = None
    values = [m.get(primary) for m in metrics] if primary else []
    values = [float(v) for v in values if usable_number(v)]
    if values:  # a seed whose headline is null or not finite is left out of it, never a crash
        mean, sd = mean_sd(values)
        headline = {"metric": primary, "mean": mean, "sd": sd, "seeds": len(values)}
    decided_by: list[str] = []
    if runs:  # exploratory claims (changed after their preregistration) are shown only
        badge_claims = [c for c in claims
                        if counted(c) and c["preregistration"] != "exploratory"]
        badge = paper_verdict([(c["verdict"], c["p_against"]) for c in badge_claims])
        verdict = badge.text
        decided_by = [badge_claims[i]["id"] for i in badge.deciding]
    else:
        verdict = FAILED if failed else CORRUPT if corrupt else NOT_RUN
    seeds = [r.get("seed") for r in runs]
    return {
        "key": key, "title": info["title"], "claim": info["claim"],
        "study": ("confirmatory" if seeds and min(seeds) >= FIRST_SEED else "declared"),
        "figure_caption": info.get("figure", ""), "verdict": verdict, "claims": claims,
        "decided_by": decided_by,
        "stand_in": info.get("stand_in"),
        "seeds": seeds, "declared_seeds": info.get("seeds"),
        "failed": [{"seed": f["seed"], "error": f.get("error", ""), "folder": f["folder"]}
                   for f in failed],
        "corrupt": corrupt, "refused": refused,
        "duplicates": (entry or {}).get("duplicates", []),
        "headline": headline,
        "runtime_s": (mean_sd(times)[0] if (times := [r["wall_time_s"] for r in runs
                                                      if usable_number(r.get("wall_time_s"))])
                      else None),
        "git_sha": sorted({str(r.get("git_sha")) for r in runs}),
        "config_hash": sorted({str(r.get("config_hash")) for r in runs}),
        "versions": runs[0].get("versions", {}) if runs else {},
        "folders": [r["folder"] for r in runs],
    }


def summarize_folder(folder: Path) -> tuple[list[PaperRecord], list[dict[str, str]]]:
    """Every paper's summary, and the corrupt files no paper could be told for."""
    found = collect(folder)
    unplaced = found.get("?", {}).get("corrupt", [])
    return [summarize(key, found.get(key)) for key in list(papers())], unplaced



def counted(claim: dict[str, Any]) -> bool:
    """A claim that counts toward its paper's badge: not a sanity check, not an ablation."""
    return not claim["sanity"] and not claim.get("ablation")



def recon_notes(key: str) -> list[str]:
    """The sentences of docs/papers/<key>.md that name a reconstruction (RECON), in
    Markdown (headings, quotes and table rows left out)."""
    path = PAPER_NOTES / f"{key}.md"
    if not path.is_file():
        return []
    text = " ".join(line.strip() for line in path.read_text().splitlines()
                    if not line.lstrip().startswith(("#", ">", "|")))
    sentences = re.split(r"(?<=[.;])\s+(?=[A-Z(`*])", text)
    notes = [s.strip(" -*") for s in sentences if "RECON" in s]
    return [n[:400] for n in notes[:8]]


def effect_rows(papers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per judged claim: its effect on a common axis (relative to the reference side
    in %, or in its own units where the reference is 0) and interval, grouped by paper."""
    rows = []
    for p in papers:
        for c in p["claims"]:
            e = c["effect"]
            if e is None or c["verdict"] not in JUDGED:
                continue
            relative = e["relative_mean"] is not None
            scale = 100.0 if relative else 1.0
            mean = (e["relative_mean"] if relative else e["mean"]) * scale
            low = e["relative_low"] if relative else e["low"]
            high = e["relative_high"] if relative else e["high"]
            margin = c.get("margin") if c["rule"] == "equivalence" else None
            if margin is not None and relative:
                margin = margin / e["reference"]
            rows.append({"paper": p["key"], "claim": c["id"], "verdict": c["verdict"],
                         "rule": c["rule"], "margin": None if margin is None else margin * scale,
                         "sanity": c["sanity"], "unit": "%" if relative else "abs.",
                         "effect": mean, "low": None if low is None else low * scale,
                         "high": None if high is None else high * scale,
                         "seeds": len(e["per_seed"]), "abstract": c["abstract"] or "",
                         "label": e["label"]})
    return rows



def published(paper: PaperRecord) -> PaperRecord:
    """The part of a paper's record docs/reproduction.json keeps (no folders or versions)."""
    keep = ("key", "verdict", "decided_by", "stand_in", "headline", "runtime_s", "seeds",
            "declared_seeds", "git_sha", "study")
    slim = {k: paper[k] for k in keep}
    slim["claims"] = [{k: c[k] for k in ("id", "verdict", "detail", "rule", "sanity",
                                         "ablation", "setting", "p_against", "measured",
                                         "values",
                                         "abstract", "seeds_needed", "effect", "parts",
                                         "margin", "changed_after_results",
                                         "preregistration")}
                      for c in paper["claims"]]
    slim["corrupt"] = len(paper["corrupt"])
    return slim

