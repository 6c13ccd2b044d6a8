"""The pre-registered confirmatory study: the power analysis that sets each paper's seed
count, the frozen claims and what the report does with a claim changed since, the fresh
seeds, and the reproduction rounds over them."""

from __future__ import annotations

import json

import pytest
from statsmodels.stats.power import TTestPower

from experiments.report import preregister
from experiments.report.preregister import (
    MAX_SEEDS,
    MIN_SEEDS,
    MIN_SIGN_SEEDS,
    plan,
    seeds_for_power,
)
from experiments.report.registration import (
    FIRST_SEED,
    claim_hash,
    confirmatory_seeds,
    status,
)
from experiments.runner.reproduce import rounds

from .conftest import ROOT


def _effect(values):
    return {"per_seed": list(values)}


def test_the_seed_count_is_the_noncentral_t_power_analysis():
    """An effect of one standard deviation needs 10 seeds for 80% power (two-sided 5%):
    statsmodels' own answer; a larger one fewer, none where the pilot has no spread."""
    values = [0.0, 1.0, 2.0, 1.0, 1.0]  # mean 1, sd 0.707: d = 1.414
    expected = TTestPower().solve_power(effect_size=1 / 0.7071067811865476, alpha=0.05,
                                        power=0.8, alternative="two-sided")
    assert seeds_for_power(_effect(values), "compare", None) == int(-(-expected // 1))
    assert seeds_for_power(_effect([1.0, 1.0, 1.0]), "compare", None) is None
    small = seeds_for_power(_effect([0.1, -0.9, 1.1, 0.2, -0.1]), "compare", None)
    assert small > 100
    # an equivalence: the distance inside the margin, one-sided
    assert seeds_for_power(_effect([0.0, 0.1, -0.1]), "equivalence", 1.0) <= 3
    assert seeds_for_power(_effect([0.9, 1.1, 1.0]), "equivalence", 1.0) == 10**6


def _pilot(key: str, effects: dict[str, list[float]], runtime: float = 60.0) -> dict:
    return {"key": key, "runtime_s": runtime, "claims": [
        {"id": claim, "effect": _effect(values), "margin": None}
        for claim, values in effects.items()]}


def test_each_paper_gets_the_count_its_undecided_claims_need_within_the_bounds(monkeypatch):
    # cfbeam: a moderate effect needs ~10 seeds, a tiny one would need hundreds
    moderate, tiny = [0.0, 1.0, 2.0, 1.0, 1.0], [0.1, -0.9, 1.1, 0.2, -0.1]
    claims = {"paper": [{"id": "share", "holds_if": "a > b", "rule": "compare",
                         "test": "sign"}]}
    real = preregister.paper_info
    monkeypatch.setattr(preregister, "paper_info",
                        lambda key: {"claims": claims[key]} if key in claims else real(key))
    seeds = plan([_pilot("cfbeam", {"ll_beam_quadratic": moderate,
                                    "lm_cf_beam_vs_ll_beam": tiny}),
                  _pilot("tps", {"constant_predictor_penalized": [5.0, 5.1, 4.9]}),
                  _pilot("paper", {"share": [0.0, 0.0, 0.1]})])
    assert MIN_SEEDS < seeds["cfbeam"]["seeds"] <= MAX_SEEDS
    assert "beyond this study" in seeds["cfbeam"]["claims"]["lm_cf_beam_vs_ll_beam"]["why"]
    assert seeds["tps"]["seeds"] == MIN_SEEDS  # a sanity check does not count
    assert seeds["paper"]["seeds"] >= MIN_SIGN_SEEDS  # a sign test must be able to decide
    for record in seeds.values():
        assert record["seed_range"] == [FIRST_SEED, FIRST_SEED + record["seeds"] - 1]


def test_the_cost_cap_keeps_the_study_within_its_budget_but_never_below_five():
    pilot = [_pilot(f"paper{i}", {}, runtime=600.0) for i in range(4)]
    caps = preregister.cost_caps(pilot)
    assert all(MIN_SEEDS <= c <= MAX_SEEDS for c in caps.values())
    assert sum(c * 10 for c in caps.values()) <= 2 * preregister.BUDGET_MINUTES or \
        all(c == MIN_SEEDS for c in caps.values())


def test_a_claim_changed_after_its_preregistration_is_exploratory():
    from experiments.claims.papers import paper_info

    claim = paper_info("ditherq")["claims"][1]
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

    from experiments.claims.papers import paper_info
    from experiments.report import registration

    first, second = paper_info("ditherq")["claims"][:2]
    before = claim_hash("ditherq", first)
    conf = tmp_path / "conf"
    shutil.copytree(ROOT / "conf", conf)
    monkeypatch.setattr(registration, "ROOT", tmp_path)
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
    from experiments.report import build

    monkeypatch.setattr(build, "preregistration_status",
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
    papers, _ = build.summarize_folder(folder)
    tps = next(p for p in papers if p["key"] == "tps")
    claim = next(c for c in tps["claims"] if c["id"] == "tps_strictly_proper")
    assert claim["verdict"] == "contradicted" and claim["preregistration"] == "exploratory"
    assert tps["verdict"] != "contradicted"  # the only contradicted claim is not counted
    assert "exploratory" in build.readme_claims(tps)


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
    from experiments.report import build

    declared = {"papers": [{"key": "tps", "study": "declared"}]}
    monkeypatch.setattr(build, "PREREGISTRATION", tmp_path / "missing.json")
    assert "preregistered" not in build.study_text(declared)
    record = tmp_path / "preregistration.json"
    record.write_text(json.dumps({"commit": "abcdef0123", "first_seed": FIRST_SEED,
                                  "papers": {"tps": {"seeds": 5}, "jecs": {"seeds": 7}}}))
    monkeypatch.setattr(build, "PREREGISTRATION", record)
    text = build.study_text(declared)
    assert "12 jobs" in text and "abcdef0" in text and "not published yet" in text
    confirmatory = {"papers": [{"key": "tps", "study": "confirmatory"}],
                    "preregistration": {"commit": "abcdef0123"}}
    assert "**confirmatory study**" in build.study_text(confirmatory)


def test_the_pilot_is_summarized_as_before_any_record():
    """Making the preregistration again reads the pilot as the first time did: no claim is
    judged against the record on disk (which the pilot itself produced)."""
    from experiments.claims.papers import paper_info
    from experiments.report.build import before_preregistration, preregistration_status

    claim = {**paper_info("ditherq")["claims"][1], "margin": 123.0}  # not as frozen
    assert preregistration_status("ditherq", claim) == "exploratory"
    with before_preregistration():
        assert preregistration_status("ditherq", claim) == "not preregistered"
    assert preregistration_status("ditherq", claim) == "exploratory"
