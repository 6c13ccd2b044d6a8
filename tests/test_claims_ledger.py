"""The claims ledger (experiments/claims/ledger.py): docs/claims_ledger.json is what git's
history of the paper configs and the published reproductions says now, and every claim
changed after a verdict for it was published gives its reason."""

from __future__ import annotations

import json
import subprocess

import pytest

from experiments.claims import ledger
from experiments.claims.papers import ROOT, find_paper, papers


def _full_history() -> bool:
    try:
        out = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return False
    return out.strip() == "false"


@pytest.mark.skipif(not _full_history(), reason="needs the git history (not a shallow clone)")
def test_the_committed_ledger_is_what_git_says():
    assert ledger.read_record() == json.loads(json.dumps(ledger.record())), \
        "run python -m experiments.claims.ledger --write"


def test_every_change_after_a_published_verdict_gives_its_reason():
    missing = [u for key in list(papers()) for u in ledger.unexplained(key, find_paper(key).info)]
    assert not missing, "give changed_after_results (or removed_claims): " + "; ".join(missing)


def test_a_change_without_a_reason_is_caught():
    entry = {"after": "0000000", "verdict": "holds", "changed": ["holds_if"]}
    record = {"p": {"c": [entry], "gone": [{**entry, "changed": "removed"}]}}
    bare = {"claims": [{"id": "c", "holds_if": "a > 1"}]}
    assert len(ledger.unexplained("p", bare, record)) == 2
    explained = {"claims": [{"id": "c", "holds_if": "a > 1", "changed_after_results": "why"}],
                 "removed_claims": [{"id": "gone", "reason": "why"}]}
    assert ledger.unexplained("p", explained, record) == []
    # a project-wide reason covers only the fields it lists, after its publication
    shared = {"p": {"c": [{**entry, "after": "6dee2b4", "changed": ["rule"]}]}}
    assert ledger.unexplained("p", bare, shared) == []
    shared["p"]["c"][0]["changed"] = ["rule", "holds_if"]
    assert len(ledger.unexplained("p", bare, shared)) == 1


def test_a_definition_ignores_wording_and_spelt_out_defaults():
    a = {"id": "c", "text": "one", "holds_if": "a  >  b"}
    b = {"id": "c", "text": "two", "holds_if": "a > b", "rule": "compare", "sanity": False}
    assert ledger.definition(a) == ledger.definition(b)
    assert ledger.definition(a) != ledger.definition({**a, "holds_if": "a >= b"})
