"""The pre-registered confirmatory study: the power analysis that sets each paper's seed
count, the frozen claims and what the report does with a claim changed since, the fresh
seeds, and the reproduction rounds over them."""

from __future__ import annotations

import json

import pytest
from statsmodels.stats.power import TTestPower

from experiments.claims import study
from experiments.claims.papers import Paper, find_paper
from experiments.claims.power import seeds_for_power
from experiments.claims.study import (
    FIRST_SEED,
    MAX_SEEDS,
    MIN_SEEDS,
    MIN_SIGN_SEEDS,
    claim_hash,
    confirmatory_seeds,
    plan,
    status,
)
from experiments.report import preregister
from experiments.runner.reproduce import rounds

from .conftest import ROOT

COMPARE = {"id": "better", "holds_if": "a > b", "rule": "compare"}


def _runs(**values) -> list[dict[str, float]]:
    seeds = len(next(iter(values.values())))
    return [{name: float(v[i]) for name, v in values.items()} for i in range(seeds)]


def _independent_power(claim: dict, runs: list[dict], seeds: int, replicates: int = 2000
                       ) -> float:
    """P(decided: holds or contradicted) at ``seeds`` seeds drawn by numpy's multivariate
    normal at the runs' mean and covariance, on a stream of its own: the check of a recorded
    power."""
    import numpy as np

    from experiments.claims.verdicts import judge

    names = sorted(runs[0])
    values = np.array([[r[n] for n in names] for r in runs])
    rng = np.random.default_rng(12345)
    draws = rng.multivariate_normal(values.mean(0), np.cov(values, rowvar=False, ddof=1),
                                    (replicates, seeds), method="eigh")
    return sum(judge(claim, [dict(zip(names, map(float, row), strict=True)) for row in draw])
               .verdict in ("holds", "contradicted") for draw in draws) / replicates


def test_a_single_comparison_is_sized_like_the_noncentral_t():
    """For one comparison the simulated rule is the t-test: the count is statsmodels' answer
    (within the simulation's error), and none where the seeds show no spread."""
    values = [0.0, 1.0, 2.0, 1.0, 1.0]  # mean 1, sd 0.707: d = 1.414
    expected = TTestPower().solve_power(effect_size=1 / 0.7071067811865476, alpha=0.05,
                                        power=0.8, alternative="two-sided")
    sizing = seeds_for_power(COMPARE, _runs(a=values, b=[0.0] * 5))
    assert abs(sizing.seeds - expected) <= 1.5, (sizing, expected)
    flat = seeds_for_power(COMPARE, _runs(a=[1.0] * 3, b=[0.0] * 3))
    assert flat.seeds is None and "cannot decide" in flat.why
    tiny = seeds_for_power(COMPARE, _runs(a=[0.1, -0.9, 1.1, 0.2, -0.1], b=[0.0] * 5))
    assert tiny.seeds is None and "no count up to" in tiny.why


@pytest.mark.parametrize("claim,values", [
    (COMPARE, {"a": [0.9, 0.2, 1.4, 0.7, 0.5], "b": [0.0] * 5}),
    # a conjunction needs every part: more seeds than its weakest part alone
    ({"id": "both", "holds_if": "a > b and c > b", "rule": "compare"},
     {"a": [0.9, 0.2, 1.4, 0.7, 0.5], "c": [0.4, 1.3, 0.2, 0.9, 0.8], "b": [0.0] * 5}),
    # an equivalence needs both sides inside its margin, a measured margin its own spread
    ({"id": "same", "holds_if": "a == b", "rule": "equivalence", "margin": 1.0},
     {"a": [0.3, -0.2, 0.5, 0.1, 0.4], "b": [0.0] * 5}),
    ({"id": "measured", "holds_if": "a >= b", "rule": "equivalence", "margin_metric": "m"},
     {"a": [-0.3, 0.2, -0.5, 0.1, -0.4], "b": [0.0] * 5, "m": [0.8, 1.1, 0.6, 1.0, 0.9]}),
])
def test_the_recorded_power_is_what_the_rule_has_at_the_recorded_count(claim, values):
    runs = _runs(**values)
    sizing = seeds_for_power(claim, runs)
    assert sizing.power >= 0.8 and sizing.seeds >= 2
    assert abs(_independent_power(claim, runs, sizing.seeds) - sizing.power) <= 0.05
    if sizing.seeds > 2:
        assert _independent_power(claim, runs, sizing.seeds - 1) < 0.8 + 0.05
    if claim["id"] == "both":
        alone = seeds_for_power({**COMPARE, "holds_if": "c > b"}, runs)
        assert sizing.seeds >= alone.seeds


def _pilot(key: str, values: dict[str, dict[str, list[float]]], runtime: float = 60.0
           ) -> dict:
    return {"key": key, "runtime_s": runtime,
            "claims": [{"id": claim, "values": v} for claim, v in values.items()]}


def test_each_paper_gets_the_count_its_undecided_claims_need_within_the_bounds(monkeypatch):
    """A moderate effect needs more than the floor, a tiny one more than the study can buy
    (said so, with the power it gets), a sanity check does not count, and a sign test gets
    the seeds it needs to decide."""
    moderate = {"a": [0.0, 1.0, 2.0, 1.0, 0.6], "b": [0.0] * 5}
    tiny = {"c": [0.1, -0.9, 1.1, 0.2, -0.1], "b": [0.0] * 5}
    claims = {"paper": [{**COMPARE, "id": "moderate"}, {**COMPARE, "id": "tiny",
                                                        "holds_if": "c > b"},
                        {**COMPARE, "id": "check", "sanity": True}],
              "coarse": [{**COMPARE, "id": "share", "test": "sign"}]}
    real = study.find_paper
    monkeypatch.setattr(study, "find_paper",
                        lambda key: Paper(key, {"claims": claims[key]}) if key in claims
                        else real(key))
    seeds = plan([_pilot("paper", {"moderate": moderate, "tiny": tiny, "check": moderate}),
                  _pilot("coarse", {"share": {"a": [0.0, 0.0, 0.1], "b": [0.0] * 3}})])
    paper = seeds["paper"]
    assert MIN_SEEDS < paper["seeds"] <= MAX_SEEDS
    assert paper["seeds"] == paper["claims"]["moderate"]["seeds"]
    assert paper["claims"]["moderate"]["power_at_study"] >= 0.8
    assert "beyond this study" in paper["claims"]["tiny"]["why"]
    assert paper["claims"]["tiny"]["power_at_study"] < 0.8
    assert "check" not in paper["claims"]
    assert seeds["coarse"]["seeds"] >= MIN_SIGN_SEEDS  # a sign test must be able to decide
    for record in seeds.values():
        assert record["seed_range"] == [FIRST_SEED, FIRST_SEED + record["seeds"] - 1]


def test_the_cost_cap_keeps_the_study_within_its_budget_but_never_below_five():
    pilot = [_pilot(f"paper{i}", {}, runtime=600.0) for i in range(4)]
    caps = study.cost_caps(pilot)
    assert all(MIN_SEEDS <= c <= MAX_SEEDS for c in caps.values())
    assert sum(c * 10 for c in caps.values()) <= 2 * study.BUDGET_MINUTES or \
        all(c == MIN_SEEDS for c in caps.values())
    assert study.budget_note(pilot) is None
    # where even the floor costs more than the budget, the record says so
    costly = [_pilot(f"paper{i}", {}, runtime=600.0) for i in range(10)]
    assert all(c == MIN_SEEDS for c in study.cost_caps(costly).values())
    assert "over the budget" in study.budget_note(costly)


def test_a_claim_changed_after_its_preregistration_is_exploratory():
    from experiments.claims.papers import find_paper

    claim = find_paper("ditherq").info["claims"][1]
    registered = {"papers": {"ditherq": {"frozen": {claim["id"]: {
        "hash": claim_hash("ditherq", claim)}}}}}
    assert status("ditherq", claim, registered) == "preregistered"
    assert status("ditherq", {**claim, "holds_if": "rht_basis_vs_dense_mse_ratio_b2 > 1.2"},
                  registered) == "exploratory"
    assert status("ditherq", {**claim, "text": "reworded"}, registered) == "preregistered"
    assert status("ditherq", claim, None) == "not preregistered"


def test_a_claim_keeps_its_hash_when_another_claim_or_a_note_changes(monkeypatch, tmp_path):
    """The paper's configuration is hashed without its claims: a note on one claim (say,
    that it changed after its results were seen) or a new margin on another leaves a claim's
    frozen hash as it was; a change to the paper's settings changes every claim's."""
    import shutil

    import yaml

    from experiments.claims.papers import find_paper

    first, second = find_paper("ditherq").info["claims"][:2]
    before = claim_hash("ditherq", first)
    conf = tmp_path / "conf"
    shutil.copytree(ROOT / "conf", conf)
    monkeypatch.setattr(study, "ROOT", tmp_path)
    page = conf / "paper" / "ditherq.yaml"
    data = yaml.safe_load(page.read_text())
    claims = data["paper"]["claims"]
    claims[0]["changed_after_results"] = "a note"
    claims[1]["margin"] = 0.5
    header = "# @package _global_\n"
    page.write_text(header + yaml.safe_dump(data))
    assert claim_hash("ditherq", first) == before
    data["protocol"]["n_trials"] += 1
    page.write_text(header + yaml.safe_dump(data))
    assert claim_hash("ditherq", first) != before
    assert claim_hash("ditherq", {**second, "margin": 0.5}) != claim_hash("ditherq", second)


def test_an_exploratory_claim_is_shown_but_not_counted(monkeypatch, tmp_path):
    """The report marks the changed claim and judges the paper without it."""
    from experiments.report import render, summary

    monkeypatch.setattr(summary, "preregistration_status",
                        lambda key, claim: "exploratory" if claim["id"] == "tps_strictly_proper"
                        else "preregistered")
    folder = tmp_path / "runs"
    for seed in (0, 1):
        run = folder / "tps" / f"seed{seed}"
        run.mkdir(parents=True)
        (run / "results.json").write_text(json.dumps({
            "paper": "tps", "seed": seed, "wall_time_s": 1.0,
            "overrides": ["+paper=tps", f"seed={seed}"],
            "metrics": {"tps_oracle_first_all": 0}}))  # the exact check fails
    papers, _ = summary.summarize_folder(folder)
    tps = next(p for p in papers if p["key"] == "tps")
    claim = next(c for c in tps["claims"] if c["id"] == "tps_strictly_proper")
    assert claim["verdict"] == "contradicted" and claim["preregistration"] == "exploratory"
    assert tps["verdict"] != "contradicted"  # the only contradicted claim is not counted
    assert "exploratory" in render.claim_text(claim)


def test_the_confirmatory_rounds_run_each_papers_preregistered_seeds():
    registered = {"tps": [10000, 10001, 10002], "cfbeam": [10000, 10001]}
    assert rounds(["cfbeam", "tps"], None, registered) == [
        (10000, ["cfbeam", "tps"]), (10001, ["cfbeam", "tps"]), (10002, ["tps"])]
    assert rounds(["tps"], None)[0] == (0, ["tps"])  # the declared study starts at 0


def test_the_preregistered_seeds_are_fresh():
    """The confirmatory seeds never touch 0-999 (every development run, test and sweep);
    the counts stay within the study's bounds."""
    assert FIRST_SEED >= 1000
    path = ROOT / "docs" / "preregistration.json"
    if not path.is_file():
        pytest.skip("no preregistration yet")
    record = json.loads(path.read_text())
    for key, seeds in confirmatory_seeds(record).items():
        assert min(seeds) >= 1000 and MIN_SEEDS <= len(seeds) <= MAX_SEEDS, key
    published = json.loads((ROOT / "docs" / "reproduction.json").read_text())
    if all(p.get("study") == "confirmatory" for p in published["papers"]):
        for paper in published["papers"]:
            assert min(paper["seeds"]) >= 1000
            assert sorted(paper["seeds"]) == confirmatory_seeds(record)[paper["key"]]


def test_the_table_says_which_study_it_shows(monkeypatch, tmp_path):
    """The declared study's table names a preregistered confirmatory study that is not
    published yet; the confirmatory table names its preregistration's commit."""
    from experiments.report import render

    declared = {"papers": [{"key": "tps", "study": "declared"}]}
    monkeypatch.setattr(render, "PREREGISTRATION", tmp_path / "missing.json")
    assert "preregistered" not in render.study_text(declared)
    record = tmp_path / "preregistration.json"
    record.write_text(json.dumps({"commit": "abcdef0123", "first_seed": FIRST_SEED,
                                  "papers": {"tps": {"seeds": 5}, "jecs": {"seeds": 7}}}))
    monkeypatch.setattr(render, "PREREGISTRATION", record)
    text = render.study_text(declared)
    assert "12 jobs" in text and "abcdef0" in text and "not published yet" in text
    confirmatory = {"papers": [{"key": "tps", "study": "confirmatory", "claims": [
        {"preregistration": "preregistered"}, {"preregistration": "exploratory"}]}],
                    "preregistration": {"commit": "abcdef0123", "first_seed": 20000},
                    "records": "docs/studies/confirmatory"}
    text = render.study_text(confirmatory)
    assert "**confirmatory study**" in text and "from 20000" in text and "abcdef0" in text
    assert "1 of 2 claims are as preregistered; 1 changed after it" in text
    assert "records committed in docs/studies/confirmatory" in text


def test_the_pilot_is_summarized_as_before_any_record(monkeypatch):
    """Making the preregistration again reads the pilot as the first time did: no claim is
    judged against the record on disk (which the pilot itself produced)."""
    from experiments.claims.papers import find_paper
    from experiments.report import summary
    from experiments.report.summary import before_preregistration, preregistration_status

    frozen = find_paper("ditherq").info["claims"][1]
    record = {"papers": {"ditherq": {"frozen": {frozen["id"]: {
        "hash": claim_hash("ditherq", frozen)}}}}}
    monkeypatch.setattr(summary, "_registered", lambda: record)
    claim = {**frozen, "margin": 123.0}  # not as frozen
    assert preregistration_status("ditherq", claim) == "exploratory"
    with before_preregistration():
        assert preregistration_status("ditherq", claim) == "not preregistered"
    assert preregistration_status("ditherq", claim) == "exploratory"


def test_the_pilot_alone_is_judged_again_without_a_preregistration(monkeypatch, tmp_path):
    """``--pilot-only`` writes docs/pilot.json from the pilot's runs and no preregistration
    (the pilot judged again with new rules, before the study is preregistered)."""
    from experiments.report import summary

    from .test_report import report_fixture

    folder = report_fixture(tmp_path / "runs")
    pilot, record = tmp_path / "pilot.json", tmp_path / "preregistration.json"
    monkeypatch.setattr(summary, "papers", lambda: {"tps": find_paper("tps")})
    monkeypatch.setattr(preregister, "PILOT", pilot)
    monkeypatch.setattr(preregister, "PREREGISTRATION", record)
    monkeypatch.setattr(preregister, "ROOT", tmp_path)
    assert preregister.main([str(folder), "--pilot-only"]) == 0
    papers = json.loads(pilot.read_text())["papers"]
    assert [p["key"] for p in papers] == ["tps"] and papers[0]["seeds"] == [0, 1]
    assert all("values" in c for c in papers[0]["claims"])  # what the sizing reads
    assert not record.exists()


def test_a_confirmatory_record_is_evidence_only_from_the_frozen_code(monkeypatch):
    """The preregistered commit, or a later one whose changes touch none of the files the
    run imported; a dirty tree, a change to an imported file, or a later record that does
    not list its imports is refused in one line naming the job."""
    from experiments.report import summary

    frozen = "a" * 40
    changes = {("a" * 40, "b" * 40): ("docs/notes.md", "experiments/report/render.py"),
               ("a" * 40, "c" * 40): ("methods/tps/scores.py", "README.md")}
    monkeypatch.setattr(study, "files_changed_between", lambda a, b: changes.get((a, b)))
    registered = {"commit": frozen, "first_seed": FIRST_SEED}
    run = {"paper": "tps", "seed": FIRST_SEED, "folder": "records/tps/seed20000",
           "imports": ["experiments/tps.py", "methods/tps/scores.py"]}
    refusal = study.frozen_code_refusal
    assert refusal({**run, "git_sha": frozen}, registered) is None
    assert refusal({**run, "git_sha": "b" * 40}, registered) is None  # docs and the report
    touched = refusal({**run, "git_sha": "c" * 40}, registered)
    assert touched.startswith("tps seed 20000 (records/tps/seed20000)")
    assert "methods/tps/scores.py" in touched and "README" not in touched
    assert "uncommitted" in refusal({**run, "git_sha": frozen + "-dirty"}, registered)
    unlisted = {k: v for k, v in run.items() if k != "imports"}
    assert "does not list" in refusal({**unlisted, "git_sha": "b" * 40}, registered)
    assert "shallow" in refusal({**run, "git_sha": "d" * 40}, registered)
    # the report counts the evidence and names the refused; development seeds are not frozen
    monkeypatch.setattr(summary, "_registered", lambda: registered)
    runs = [{**run, "git_sha": frozen}, {**run, "seed": FIRST_SEED + 1, "git_sha": "c" * 40},
            {**run, "seed": 3, "git_sha": frozen + "-dirty"}]
    kept, refused = summary._frozen_code_runs(runs)
    assert [r["seed"] for r in kept] == [FIRST_SEED, 3]
    assert len(refused) == 1 and refused[0].startswith(f"tps seed {FIRST_SEED + 1} ")
