"""The claims ledger, generated from git: every change of a claim's definition (and every
removed claim), the commit that made it, and the verdict published for the claim before it.

    python -m experiments.claims.ledger              # every paper's post-hoc changes
    python -m experiments.claims.ledger cfbeam --all # every change of cfbeam's claims
    python -m experiments.claims.ledger --write      # docs/claims_ledger.json

A claim's definition is what its verdict depends on (:data:`DEFINITION_KEYS`: the
condition, rule, test, margin and its source, the sanity, ablation and deterministic flags,
the verifier), read from ``conf/paper/<key>.yaml`` at each commit that touched it and from
the working tree last. A verdict is published when ``docs/reproduction.json`` holds one for
the claim; a change is **post hoc** when a verdict for that claim was published before it.
Each post-hoc change needs its reason: ``changed_after_results`` on the claim,
``removed_claims`` in the paper's config for a claim taken out, or, for a change made to
many claims at once, an entry of ``docs/claim_change_reasons.yaml`` (a test enforces it).
The committed record, ``docs/claims_ledger.json``, keys each post-hoc change by the
publication it came after (not by its own commit, which a record written before that
commit cannot name), so the pages and the README show it, and a test regenerates it from
git and compares.
"""

from __future__ import annotations

import argparse
import functools
import json
import subprocess
from dataclasses import dataclass

import yaml

from experiments.claims.papers import ROOT, papers

PUBLISHED = "docs/reproduction.json"
RECORD = ROOT / "docs" / "claims_ledger.json"
REASONS = ROOT / "docs" / "claim_change_reasons.yaml"  # changes made to many claims at once
DEFINITION_KEYS = ("holds_if", "rule", "test", "margin", "margin_metric", "margin_source",
                   "sanity", "ablation", "deterministic", "verify")
DEFAULTS = {"rule": "compare", "test": "interval", "sanity": False, "deterministic": False,
            "ablation": False}
WORKING_TREE = "working tree"


@dataclass(frozen=True)
class Change:
    paper: str
    claim: str
    commit: str  # the commit that made it, or "working tree"
    date: str
    kind: str  # "changed" | "removed"
    fields: tuple[str, ...]  # what changed (empty for a removal)
    published: str | None  # the publication commit whose verdict came before it
    verdict: str | None  # that verdict

    @property
    def post_hoc(self) -> bool:
        return self.published is not None


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout


def definition(claim: dict) -> dict:
    """A claim's definition with absent keys at their defaults (a ``rule: compare`` spelt out
    is no change) and the condition's spacing normalized."""
    out = {k: DEFAULTS.get(k) if claim.get(k) is None else claim[k] for k in DEFINITION_KEYS}
    for key in ("holds_if", "margin_metric"):
        if isinstance(out.get(key), str):
            out[key] = " ".join(out[key].split())
    return out


def _claims(text: str) -> dict[str, dict]:
    data = yaml.safe_load(text) or {}
    claims = (data.get("paper") or {}).get("claims") or []
    return {str(c["id"]): definition(c) for c in claims if isinstance(c, dict) and "id" in c}


@functools.cache
def _commits(path: str) -> tuple[tuple[str, str], ...]:
    """(commit, date) of every commit that touched ``path``, oldest first."""
    lines = _git("log", "--reverse", "--format=%H %cs", "--", path).split("\n")
    return tuple(tuple(line.split(" ", 1)) for line in lines if line.strip())


@functools.cache
def _order() -> dict[str, int]:
    """Each commit's position in the history (oldest 0), to tell what came before what."""
    commits = _git("log", "--reverse", "--format=%H").split()
    return {c: i for i, c in enumerate(commits)}


def verdicts_at(rev: str) -> dict:
    """The verdicts of the reproduction published at git revision ``rev``: {"rev": the full
    hash, "papers": {paper: {"verdict": ..., "claims": {claim id: verdict}}}}."""
    published = json.loads(_git("show", f"{rev}:{PUBLISHED}"))
    papers = published["papers"] if isinstance(published, dict) else published
    return {"rev": _git("rev-parse", rev).strip(), "papers": {
        p["key"]: {"verdict": p["verdict"],
                   "claims": {c["id"]: c["verdict"] for c in p.get("claims", [])}}
        for p in papers}}


@functools.cache
def publications() -> tuple[tuple[str, dict[str, dict[str, str]]], ...]:
    """(commit, paper -> claim -> verdict) of every published reproduction, oldest first
    (a version that cannot be read is left out)."""
    out = []
    for commit, _ in _commits(PUBLISHED):
        try:
            papers = verdicts_at(commit)["papers"]
        except (subprocess.CalledProcessError, json.JSONDecodeError, KeyError, TypeError):
            continue
        out.append((commit, {key: p["claims"] for key, p in papers.items()}))
    return tuple(out)


def _published_before(key: str, claim: str, commit: str) -> tuple[str | None, str | None]:
    """The latest publication before ``commit`` with a verdict for the claim."""
    order = _order()
    position = order.get(commit, len(order))  # the working tree comes after every commit
    found = (None, None)
    for published, verdicts in publications():
        if order[published] < position and claim in verdicts.get(key, {}):
            found = (published, verdicts[key][claim])
    return found


def changes(key: str) -> list[Change]:
    """Every change of a definition of ``key``'s claims, and every removal, oldest first."""
    path = f"conf/paper/{key}.yaml"
    versions = [(c, d, _claims(_git("show", f"{c}:{path}"))) for c, d in _commits(path)]
    current = (ROOT / path).read_text()
    if not versions or _claims(current) != versions[-1][2]:
        versions.append((WORKING_TREE, "", _claims(current)))
    out = []
    for (_, _, before), (commit, date, after) in zip(versions, versions[1:], strict=False):
        for claim, old in before.items():
            new = after.get(claim)
            if new == old:
                continue
            fields = () if new is None else tuple(k for k in old if old[k] != new[k])
            out.append(Change(key, claim, commit, date, "removed" if new is None else
                              "changed", fields, *_published_before(key, claim, commit)))
    return out


def record() -> dict[str, dict[str, list[dict]]]:
    """paper -> claim -> its post-hoc changes, one entry per publication they came after:
    ``{"after": commit, "verdict": ..., "changed": [fields] or "removed"}``."""
    out: dict[str, dict[str, list[dict]]] = {}
    for key in list(papers()):
        for change in changes(key):
            if not change.post_hoc:
                continue
            entries = out.setdefault(key, {}).setdefault(change.claim, [])
            if entries and entries[-1]["after"] == change.published[:7]:
                entry = entries[-1]
            else:
                entry = {"after": change.published[:7], "verdict": change.verdict,
                         "changed": []}
                entries.append(entry)
            if change.kind == "removed":
                entry["changed"] = "removed"
            elif entry["changed"] != "removed":
                entry["changed"] = sorted(set(entry["changed"]) | set(change.fields))
    return out


def read_record() -> dict[str, dict[str, list[dict]]]:
    return json.loads(RECORD.read_text()) if RECORD.is_file() else {}


def history_text(entries: list[dict]) -> str:
    """``after contradicted at 02ecbe2: holds_if, rule; after ...``."""
    return "; ".join(f"after {e['verdict']} at {e['after']}: "
                     + ("removed" if e["changed"] == "removed" else ", ".join(e["changed"]))
                     for e in entries)


def _shared_reasons() -> dict[str, set[str]]:
    """publication -> the fields a project-wide reason explains changes of after it."""
    out: dict[str, set[str]] = {}
    for entry in yaml.safe_load(REASONS.read_text()) or []:
        out.setdefault(str(entry["after"]), set()).update(entry["changed"])
    return out


def unexplained(key: str, config: dict, ledger: dict | None = None) -> list[str]:
    """The claims of ``key`` with post-hoc changes in the ledger and no reason: neither
    ``changed_after_results`` on a claim (``removed_claims`` for a claim taken out) nor, for
    every changed field, a project-wide reason (docs/claim_change_reasons.yaml)."""
    ledger = read_record() if ledger is None else ledger
    shared = _shared_reasons()
    claims = {c["id"]: c for c in config.get("claims") or []}
    removed = {r["id"] for r in config.get("removed_claims") or []}
    out = []
    for claim, entries in (ledger.get(key) or {}).items():
        if claim not in claims:
            if claim not in removed:
                out.append(f"{key}.{claim} ({history_text(entries)})")
            continue
        own = [e for e in entries if e["changed"] == "removed"
               or not set(e["changed"]) <= shared.get(e["after"], set())]
        if own and not claims[claim].get("changed_after_results"):
            out.append(f"{key}.{claim} ({history_text(own)})")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.claims.ledger",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("papers", nargs="*", help="paper keys (default: all)")
    parser.add_argument("--all", action="store_true", help="every change, not only post hoc")
    parser.add_argument("--write", action="store_true", help=f"write {RECORD.name}")
    args = parser.parse_args(argv)
    if args.write:
        RECORD.write_text(json.dumps(record(), indent=1, sort_keys=True) + "\n")
        print(f"written: {RECORD.relative_to(ROOT)}")
        return 0
    for key in args.papers or list(papers()):
        for change in changes(key):
            if args.all or change.post_hoc:
                when = change.commit[:7] if change.commit != WORKING_TREE else WORKING_TREE
                what = "removed" if change.kind == "removed" else ", ".join(change.fields)
                before = (f"after {change.verdict} at {change.published[:7]}"
                          if change.post_hoc else "before any published verdict")
                print(f"{key}.{change.claim}: {what} at {when} {change.date} ({before})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
