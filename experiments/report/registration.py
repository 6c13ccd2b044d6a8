"""The preregistration's record and what is read from it: where it lives, the fresh seeds
the confirmatory study runs, a claim's frozen hash and its status against the record, and
what publishing the confirmatory study adds (experiments/report/preregister.py writes the
record; the report and ``make reproduce STUDY=confirmatory`` read it)."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import subprocess
from typing import Any

from common.errors import UserError
from experiments.claims.ledger import definition
from experiments.claims.papers import ROOT
from experiments.runner.results import changed_files

PREREGISTRATION = ROOT / "docs" / "preregistration.json"
PILOT = ROOT / "docs" / "pilot.json"
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
    changed = _changed_between(frozen, sha)
    if changed is None:
        return (f"{job}: made at {sha[:7]}, which git cannot compare with the preregistered "
                f"{frozen[:7]} here (a shallow clone: git fetch --unshallow)")
    touched = sorted(set(changed) & set(run["imports"]))
    if touched:
        return (f"{job}: made at {sha[:7]}, whose changes since the preregistered "
                f"{frozen[:7]} touch files its run imports: {', '.join(touched[:3])}"
                + (f" and {len(touched) - 3} more" if len(touched) > 3 else ""))
    return None


@functools.cache
def _changed_between(since: str, until: str) -> tuple[str, ...] | None:
    done = subprocess.run(["git", "diff", "--name-only", since, until], cwd=ROOT,
                          capture_output=True, text=True)
    return tuple(done.stdout.split()) if done.returncode == 0 else None


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


