"""Claims as data and the reproduction report: the condition language, the seed rules, every
paper's claims, the report on a fixture folder of runs, and the README table's freshness."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from common.errors import UserError
from experiments.claims import (
    CONTRADICTED,
    HOLDS,
    INCONCLUSIVE,
    MISSING,
    NOT_RUN,
    NOT_TESTED,
    ClaimSyntaxError,
    check_claims,
    evaluate,
    find_paper,
    judge,
    metric_names,
    paper_verdict,
    papers,
    parse,
)
from experiments.claims.papers import ROOT
from experiments.report.__main__ import main as report_main
from experiments.report.__main__ import write_report
from experiments.report.render import README_END, README_START, readme_table
from experiments.report.summary import collect, summarize_folder

# -- the condition language -----------------------------------------------------------------


@pytest.mark.parametrize("text,metrics,expected", [
    ("a + b * c > 7", {"a": 1, "b": 2, "c": 3}, False),  # 1 + 6 = 7: * binds tighter
    ("a + b * c >= 7", {"a": 1, "b": 2, "c": 3}, True),
    ("(a + b) * c > 7", {"a": 1, "b": 2, "c": 3}, True),  # 9
    ("a - b - c == -4", {"a": 1, "b": 2, "c": 3}, True),  # left-associative
    ("a / b / c < 0.2", {"a": 1, "b": 2, "c": 3}, True),  # 1/6
    ("-a + 2 == 1", {"a": 1}, True),
    ("abs(a - b) <= 0.5 and a < b", {"a": 1.0, "b": 1.4}, True),
    ("abs(a - b) <= 0.5 and a > b", {"a": 1.0, "b": 1.4}, False),
    ("x <= 1e-3", {"x": 0.0005}, True),
    ("x > .5", {"x": 0.6}, True),
])
def test_conditions_follow_arithmetic_precedence(text, metrics, expected):
    assert evaluate(parse(text), metrics) is expected


@pytest.mark.parametrize("text,message", [
    ("a.b > 1", "unexpected '.b"),  # no attribute access
    ("a[0] > 1", "unexpected '\\[0\\]"),  # no indexing
    ("max(a) > 1", "only abs\\(\\) may be called"),
    ("__import__('os') > 1", "unexpected"),
    ("a > 1 or b > 1", "unexpected 'or'"),
    ("a >> 1", "unexpected '>'"),
    ("a + 1", "needs a comparison"),
    ("a > ", "expected more"),
    ("abs(a > 1", "needs a comparison|expected"),
])
def test_conditions_outside_the_language_are_refused(text, message):
    with pytest.raises(ClaimSyntaxError, match=message):
        parse(text)


def test_metric_names_and_unknown_names_name_the_paper_and_the_claim():
    assert metric_names(parse("abs(a - b) < c and d > 0")) == {"a", "b", "c", "d"}
    claims = [{"id": "gain", "holds_if": "a > bb"}]
    check_claims("demo", claims)  # syntax only
    with pytest.raises(UserError, match="paper demo, claim gain: no metric bb"):
        check_claims("demo", claims, {"a": 1.0})
    with pytest.raises(UserError, match="paper demo, claim bad: expected more"):
        check_claims("demo", [{"id": "bad", "holds_if": "a +"}])


# -- the rules: how seeds become a verdict ---------------------------------------------------

def claim(text, rule="compare", **extra):
    return {"holds_if": text, "rule": rule, **extra}


def test_compare_uses_the_paired_t_interval_of_scipy():
    from scipy import stats

    diffs = [1.0, 1.1, 0.9]
    runs = [{"a": 1.0 + d, "b": 1.0} for d in diffs]
    verdict = judge(claim("a > b"), runs)
    low, high = stats.t.interval(0.95, len(diffs) - 1, loc=sum(diffs) / 3,
                                 scale=stats.sem(diffs))
    assert verdict.verdict == HOLDS
    assert verdict.effect.low == pytest.approx(low) and verdict.effect.high == pytest.approx(high)
    assert verdict.effect.mean == pytest.approx(1.0)
    assert verdict.effect.relative_mean == pytest.approx(1.0)  # a - b over |b| = 1
    # the same differences read against a < b: the interval is on the other side
    assert judge(claim("a < b"), runs).verdict == CONTRADICTED


def test_one_seed_is_inconclusive_never_false():
    verdict = judge(claim("a > b"), [{"a": 0.582, "b": 0.484}])
    assert verdict.verdict == INCONCLUSIVE and "needs at least two" in verdict.detail
    assert judge(claim("a > b"), [{"a": 0.3, "b": 0.484}]).verdict == INCONCLUSIVE
    assert verdict.effect.mean == pytest.approx(0.098)


def test_three_positive_seeds_with_an_interval_across_0_do_not_hold():
    """glycandock's case: +0.15, +0.05, +0.20 at every seed, an interval that spans 0."""
    runs = [{"a": d, "b": 0.0} for d in (0.15, 0.05, 0.20)]
    verdict = judge(claim("a > b"), runs)
    assert all(verdict.per_seed) and verdict.verdict == INCONCLUSIVE
    assert "spans 0" in verdict.detail


def test_ties_and_one_win_are_inconclusive_not_contradicted():
    """directsynth's hill_climbing_solves: two tied seeds and one win, whichever operator."""
    runs = [{"a": 0.2, "b": 0.2}, {"a": 0.2, "b": 0.2}, {"a": 0.2 + 1 / 30, "b": 0.2}]
    for op in (">", ">="):
        for test in ("interval", "sign"):
            assert judge(claim(f"a {op} b", test=test), runs).verdict == INCONCLUSIVE
    tied = judge(claim("a > b"), runs[:2])
    assert tied.verdict == INCONCLUSIVE and "tied at all 2 seeds" in tied.detail


def test_the_sign_test_is_scipys_on_the_untied_seeds():
    from scipy.stats import binomtest

    runs = [{"a": 1.0, "b": 0.0}] * 9 + [{"a": 0.0, "b": 0.0}] * 2 + [{"a": 0.0, "b": 1.0}]
    verdict = judge(claim("a > b", test="sign"), runs)
    p = binomtest(9, 10, 0.5).pvalue
    assert verdict.verdict == HOLDS and f"p = {p:.3g}" in verdict.detail
    behind = [{"a": b["b"], "b": b["a"]} for b in runs]
    assert judge(claim("a > b", test="sign"), behind).verdict == CONTRADICTED


def test_exact_checks_count_seeds_and_one_failure_is_a_counterexample():
    runs = [{"n": 0}, {"n": 0}, {"n": 1}]
    verdict = judge(claim("n == 0", "exact"), runs)
    assert verdict.verdict == CONTRADICTED and "1/3" in verdict.detail
    assert judge(claim("n == 0", "exact"), runs[:2]).verdict == HOLDS


def test_an_existential_counterexample_at_6_of_10_seeds_holds_and_none_is_never_false():
    runs = [{"ranks": 0}] * 6 + [{"ranks": 1}] * 4
    verdict = judge(claim("ranks == 0", "exists"), runs)
    assert verdict.verdict == HOLDS and "6/10" in verdict.detail
    none = judge(claim("ranks == 0", "exists"), [{"ranks": 1}] * 10)
    assert none.verdict == INCONCLUSIVE and "not shown" in none.detail


def test_an_equivalence_well_inside_its_margin_holds_at_9_of_10_seeds():
    """ditherq's rht_matches_dense: the ratio's excess over 1 within a 0.1 margin, 9 seeds
    under it and one over."""
    ratios = [1.02, 1.04, 1.03, 1.05, 1.01, 1.04, 1.03, 1.02, 1.06, 1.12]
    verdict = judge(claim("r <= 1", "equivalence", margin=0.1), [{"r": r} for r in ratios])
    assert verdict.verdict == HOLDS and verdict.effect.level == 0.9
    far = judge(claim("r <= 1", "equivalence", margin=0.1), [{"r": 1.3 + r / 100}
                                                              for r in range(10)])
    assert far.verdict == CONTRADICTED


def test_equivalence_agrees_with_statsmodels_two_one_sided_tests():
    import numpy as np
    from statsmodels.stats.weightstats import ttost_paired

    rng = np.random.default_rng(0)
    for shift in (0.0, 0.3, 0.6, 0.9, 1.5):
        a, b = rng.normal(shift, 0.5, 6), rng.normal(0.0, 0.1, 6)
        p = ttost_paired(a, b, -1.0, 1.0)[0]
        runs = [{"a": x, "b": y} for x, y in zip(a, b, strict=True)]
        verdict = judge(claim("a == b", "equivalence", margin=1.0), runs)
        assert (verdict.verdict == HOLDS) == (p < 0.05), (shift, p, verdict.detail)


def test_conjunctions_name_the_comparison_that_decided_them():
    runs = [{"a": 1.0 + d, "b": 0.5, "c": 1.5} for d in (0.01, 0.02, 0.03)]
    verdict = judge(claim("a > b and a > c"), runs)
    assert verdict.verdict == CONTRADICTED and "1 of 2 comparisons hold" in verdict.detail
    assert verdict.effect.label == "a - c" and len(verdict.parts) == 2


def test_effects_are_signed_toward_the_claim():
    assert judge(claim("x >= 7"), [{"x": 9}]).effect.mean == 2  # margin to the threshold
    assert judge(claim("x <= 7"), [{"x": 9}]).effect.mean == -2
    # a counted rule shows its count of seeds, not an interval ("-1 [-1, -1]" of an instance)
    counted = judge(claim("x == 1", "exists"), [{"x": 0}, {"x": 1}])
    assert counted.effect is None and "1/2 seeds" in counted.detail
    assert judge(claim("a > 0"), [{"a": 3}]).effect.relative_mean is None


def test_a_relative_effect_is_a_ratio_of_means_and_none_near_a_zero_reference():
    """gcad once printed -46%: a mean of per-seed ratios, one dividing by a value near 0."""
    runs = [{"a": a, "b": b} for a, b in ((1.2, 1.0), (2.2, 2.0), (0.31, 0.01))]
    effect = judge(claim("a > b"), runs).effect
    assert effect.relative_mean == pytest.approx(effect.mean / (3.01 / 3))
    assert effect.relative_low == pytest.approx(effect.low / (3.01 / 3))
    runs = [{"a": a, "b": b} for a, b in ((0.2, -0.5), (0.3, 0.6), (0.1, 0.01))]
    assert judge(claim("a > b"), runs).effect.relative_mean is None  # mean 0.04, sd 0.55


@pytest.mark.parametrize("bad,message", [
    (claim("a == b"), "compare needs directional"),
    (claim("a > b", "equivalence"), "needs a margin"),
    (claim("a > b", margin=0.1), "margin belongs to rule equivalence"),
    (claim("a > b", "exact", test="sign"), "compare rule only"),
    (claim("a > b", "all"), "unknown rule"),
])
def test_a_rule_that_does_not_fit_its_condition_is_refused(bad, message):
    with pytest.raises(UserError, match=message):
        check_claims("demo", [{"id": "c", **bad}])


def test_untestable_and_unrun_claims_never_hold():
    assert judge(claim(None), [{"a": 1}]).verdict == NOT_TESTED
    assert judge(claim("a > 0"), []).verdict == NOT_RUN

    def badge(*words, p=1.0):
        return paper_verdict([(w, 0.0 if w == CONTRADICTED else p) for w in words])

    assert badge(HOLDS, HOLDS).text == HOLDS
    assert badge(HOLDS, HOLDS, NOT_TESTED).text == "holds (2 of 3 tested)"
    assert badge(HOLDS, HOLDS, NOT_TESTED).word == HOLDS
    assert badge(HOLDS, INCONCLUSIVE).word == "partial"
    assert badge(INCONCLUSIVE, NOT_TESTED).word == INCONCLUSIVE
    assert badge(HOLDS, CONTRADICTED).word == CONTRADICTED
    assert badge(NOT_TESTED).word == NOT_TESTED
    assert badge(HOLDS, NOT_RUN).word == NOT_RUN
    assert badge(HOLDS, MISSING).word == "partial"  # a missing metric never holds


def test_a_paper_is_contradicted_only_across_its_claims():
    """Holm across the paper's tested claims: a claim contradicted at p = 0.02 contradicts a
    paper of two tested claims (0.02 <= 0.05 / 2) but not one of three (0.02 > 0.05 / 3)."""
    two = [(CONTRADICTED, 0.02), (HOLDS, 1.0), (NOT_TESTED, 1.0)]
    assert paper_verdict(two).word == CONTRADICTED and paper_verdict(two).deciding == (0,)
    three = [(CONTRADICTED, 0.02), (HOLDS, 1.0), (INCONCLUSIVE, 0.4)]
    assert paper_verdict(three).word == "partial" and paper_verdict(three).deciding == (0, 2)
    # the claim's p against is Holm-adjusted across a conjunction's parts
    runs = [{"a": -1.0 - d, "b": 0.0, "c": 1.0 + d} for d in (0.01, 0.03, 0.02)]
    single, both = judge(claim("a > b"), runs), judge(claim("a > b and c > b"), runs)
    assert single.verdict == both.verdict == CONTRADICTED
    assert both.p_against == pytest.approx(2 * single.p_against)


# -- every paper's claims -------------------------------------------------------------------

@pytest.mark.parametrize("key", list(papers()))
def test_every_paper_states_checkable_claims(key):
    info = find_paper(key).info
    assert len(info["claim"].split()) <= 20, "the headline claim has at most 20 words"
    assert info.get("seeds") in (3, 5, 10), "declare make reproduce's seed count (paper.seeds)"
    claims = info["claims"]
    assert len(claims) >= 2 and len({c["id"] for c in claims}) == len(claims)
    for claim in claims:
        assert claim["text"].strip()
        if claim["holds_if"] is None:
            assert claim.get("scale"), f"{claim['id']}: holds_if null needs its reason"
        else:
            parse(claim["holds_if"])
    assert any(c["holds_if"] for c in claims), "at least one claim is tested here"


def test_published_reproduction_names_only_metrics_the_defaults_wrote():
    summary = json.loads((ROOT / "docs" / "reproduction.json").read_text())["papers"]
    assert sorted(p["key"] for p in summary) == list(papers())
    for paper in summary:
        for claim in paper["claims"]:
            assert "metric missing" not in claim["detail"], (paper["key"], claim)


def test_the_readme_table_is_generated_from_the_published_reproduction():
    published = json.loads((ROOT / "docs" / "reproduction.json").read_text())
    readme = (ROOT / "README.md").read_text()
    start, end = readme.index(README_START), readme.index(README_END) + len(README_END)
    assert readme[start:end] == readme_table(published), "run `make readme` to refresh it"
    assert len(readme.splitlines()) <= 260


@pytest.mark.slow
def test_the_published_table_is_judged_again_from_its_committed_records():
    """A published study names its committed records (docs/studies/<study>): judging them
    on a clean checkout gives every paper's verdict and every claim's verdict and effect as
    published."""
    published = json.loads((ROOT / "docs" / "reproduction.json").read_text())
    if not published.get("records"):
        pytest.skip("the published table names no committed records")
    papers, _ = summarize_folder(ROOT / published["records"])
    for again, then in zip(papers, published["papers"], strict=True):
        assert (again["key"], again["verdict"]) == (then["key"], then["verdict"])
        assert [(c["id"], c["verdict"], c["effect"] and c["effect"]["text"])
                for c in again["claims"]] == \
            [(c["id"], c["verdict"], c["effect"] and c["effect"]["text"]) for c in then["claims"]]


def test_the_paper_pages_heads_are_generated_from_the_configs_and_the_reproduction():
    from experiments.report.pages import main as pages

    assert pages(["--check"]) == 0, "run `make pages` to refresh the paper pages' heads"


def test_the_pages_say_which_verdicts_moved_since_the_compared_reproduction(tmp_path,
                                                                            monkeypatch):
    from experiments.claims.ledger import verdicts_at
    from experiments.report import pages

    since = verdicts_at("HEAD")  # the reproduction published at the checkout's commit
    assert len(since["rev"]) == 40 and "tps" in since["papers"]
    since["papers"]["tps"]["claims"] = {"tps_strictly_proper": "inconclusive", "gone": "holds"}
    published = {"papers": [{"key": "tps", "verdict": "holds", "claims": [
        {"id": "tps_strictly_proper", "verdict": "holds"},
        {"id": "ece_not_proper", "verdict": "holds"}]}], "since": since}
    target = tmp_path / "reproduction.json"
    target.write_text(json.dumps(published))
    monkeypatch.setattr(pages, "PUBLISHED", target)
    claims = [{"id": "tps_strictly_proper"}, {"id": "ece_not_proper"}]
    lines = pages.moved("tps", claims)
    assert lines[1].startswith(f"Verdicts that moved since the reproduction published at "
                               f"{since['rev'][:7]} (paper: ")
    assert lines[3:] == ["- `tps_strictly_proper`: inconclusive -> holds",
                         "- `ece_not_proper`: new claim -> holds", "- `gone`: holds -> removed"]
    published["since"]["papers"]["tps"]["claims"] = {c["id"]: c["verdict"]
                                                    for c in published["papers"][0]["claims"]}
    target.write_text(json.dumps(published))
    assert pages.moved("tps", claims)[1].endswith(": none.")


# -- the report on a fixture folder ---------------------------------------------------------

def _png(path: Path) -> None:
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(2, 2))
    ax.plot([0, 1], [0, 1])
    fig.savefig(path)
    plt.close(fig)


def _tps_tables(run: Path, gap: float) -> None:
    """The tables the tps existence claims are re-verified from, agreeing with the metrics
    below: the oracle not first under ECE, AUROC and AURC, first under the scalarized Brier
    score and AUPRC; recalibration moves TPS by 0.05; censoring flips the order."""
    tables = run / "tables"
    tables.mkdir(parents=True, exist_ok=True)
    (tables / "leaderboard.csv").write_text(
        "metric,oracle,constant\n"
        f"tps_brier_uniform,0.1,{0.1 + gap}\nece,0.02,0.01\nauroc,0.7,0.7\naurc,0.3,0.2\n"
        "scalar_brier,0.1,0.2\nauprc,0.8,0.6\n")
    (run / "config_resolved.yaml").write_text("method:\n  recalibration: platt\n")
    (tables / "recalibration.csv").write_text(
        "recalibration,tps_brier_uniform_before,tps_brier_uniform_after\nplatt,0.2,0.15\n")
    (tables / "censoring_verdicts.csv").write_text(
        "design,predictor,complete_only,approx_own_p_stop\n"
        "designed,oracle,0.1,0.3\ndesigned,tempered,0.2,0.2\n")


def report_fixture(root: Path) -> Path:
    """tps at seeds 0 and 1 (an exact check fails at seed 1), a failed rankcomp, a
    non-default tps run."""
    for seed, gap in ((0, 0.01), (1, 0.02)):
        run = root / "tps" / f"seed{seed}"
        run.mkdir(parents=True)
        metrics = {"tps_oracle_first_all": 1 - seed, "ranks_oracle_first_ece": 0,
                   "ranks_oracle_first_auroc": 0, "ranks_oracle_first_scalar_brier": 1,
                   "tps_gap_constant_vs_oracle": gap, "tps_change_under_recalibration": 0.05,
                   "auroc_change_under_recalibration": 0.0,
                   "censored_approx_verdict_changed": 1, "ranks_oracle_first_auprc": 1,
                   "ranks_oracle_first_aurc": 0,
                   "censored_vs_complete_diff": 0.0001 * (2 * seed - 1),
                   "censored_vs_complete_stderr": 0.001}
        _tps_tables(run, gap)
        (run / "results.json").write_text(json.dumps({
            "paper": "tps", "seed": seed, "metrics": metrics, "wall_time_s": 6.0,
            "overrides": ["+paper=tps", f"seed={seed}"], "git_sha": "abc",
            "config_hash": "h", "versions": {"torch": "2.13.0"}}))
        _png(run / "figures" / "leaderboard_ranks.png")
    other = root / "tps" / "tweaked"
    other.mkdir()
    (other / "results.json").write_text(json.dumps({
        "paper": "tps", "seed": 5, "metrics": {"tps_gap_constant_vs_oracle": -9.0},
        "wall_time_s": 1.0, "overrides": ["+paper=tps", "method.gamma=0.5"]}))
    failed = root / "rankcomp" / "seed0"
    failed.mkdir(parents=True)
    (failed / "failed.json").write_text(json.dumps({
        "paper": "rankcomp", "error": "interrupted (SIGTERM)",
        "overrides": ["+paper=rankcomp", "seed=0"]}))
    return root


def test_report_judges_the_default_runs_and_shows_failures(tmp_path):
    folder = report_fixture(tmp_path / "runs")
    found = collect(folder)
    assert [r["seed"] for r in found["tps"]["runs"]] == [0, 1]  # the tweaked run is not one
    papers, unplaced = write_report(folder, tmp_path / "report")
    papers = {p["key"]: p for p in papers}
    assert unplaced == []
    tps = papers["tps"]
    assert tps["verdict"] == CONTRADICTED  # the exact check fails at seed 1
    verdicts = {c["id"]: c["verdict"] for c in tps["claims"]}
    # no counterexample for the scalarized Brier score at either seed: not shown, not false;
    # the constant predictor's gap at two seeds: an interval across 0
    assert verdicts == {"tps_strictly_proper": CONTRADICTED, "ece_not_proper": HOLDS,
                        "auroc_not_proper": HOLDS, "scalar_brier_not_proper": INCONCLUSIVE,
                        "constant_predictor_penalized": INCONCLUSIVE,
                        "recalibration_moves_tps_not_ranks": HOLDS,
                        "recalibration_keeps_ranks": HOLDS, "auprc_not_proper": INCONCLUSIVE,
                        "risk_coverage_not_proper": HOLDS,
                        # its measured margin doubles between the two seeds: not shown
                        "censored_score_exact": INCONCLUSIVE,
                        "censoring_changes_verdict": HOLDS}
    assert tps["headline"]["mean"] == pytest.approx(0.015)
    gap = next(c for c in tps["claims"] if c["id"] == "constant_predictor_penalized")
    assert gap["effect"]["mean"] == pytest.approx(0.015) and gap["effect"]["low"] < 0.015
    assert papers["rankcomp"]["verdict"] == "failed"
    assert papers["cfbeam"]["verdict"] == NOT_RUN
    page = (tmp_path / "report" / "index.html").read_text()
    assert page.count("<tr data-paper=") == len(papers)
    assert "data:image/png;base64," in page and 'id="paper-tps"' in page
    # the page opens with the effect figure, before the overview table
    assert page.index('alt="effects"') < page.index('id="overview"')
    assert (tmp_path / "report" / "effects.png").stat().st_size > 1000
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert "interrupted (SIGTERM)" in markdown and "tps_gap_constant_vs_oracle: 0.01, 0.02" \
        in markdown
    assert "tps_gap_constant_vs_oracle - 0 = +0.015 [" in markdown
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert {c["id"]: c["verdict"] for c in next(
        p for p in summary if p["key"] == "tps")["claims"]} == verdicts


@pytest.mark.parametrize("content", ["", '{"paper": "tps", "metrics": {"tps_or'])
def test_a_corrupt_run_is_shown_and_the_others_are_judged(tmp_path, content, capsys):
    """A truncated or empty results.json (a full disk, a killed writer): the page is written,
    the run is shown as corrupt (never as a pass), the other runs are judged, exit code 1."""
    folder = report_fixture(tmp_path / "runs")
    broken = folder / "tps" / "seed2"
    broken.mkdir()
    (broken / "results.json").write_text(content)
    out = tmp_path / "report"
    assert report_main([str(folder), "--out", str(out), "--publish"]) == 1
    printed = capsys.readouterr().out
    assert f"corrupt: {broken / 'results.json'}" in printed
    assert "published" not in printed
    papers = {p["key"]: p for p in json.loads((out / "summary.json").read_text())}
    assert papers["tps"]["corrupt"] == 1 and papers["tps"]["seeds"] == [0, 1]
    assert papers["tps"]["verdict"] == CONTRADICTED
    page = (out / "index.html").read_text()
    assert 'data-verdict="corrupt"' in page and "seed2" in page
    assert "corrupt:" in (out / "report.md").read_text()


def test_a_corrupt_job_is_left_out_of_a_sweep_summary(tmp_path):
    from experiments.runner import sweep_summary

    folder = report_fixture(tmp_path / "sweep")
    (folder / "tps" / "seed1" / "results.json").write_text('{"paper": "tp')
    csv_path = sweep_summary.summarize_sweep(folder / "tps", {"tps_gap_constant_vs_oracle": True})
    assert csv_path is not None and csv_path.exists()
    text = (folder / "tps" / "summary.md").read_text()
    assert "corrupt: seed1/results.json, JSONDecodeError" in text
    with pytest.raises(UserError, match="1 corrupt results.json"):
        sweep_summary.publish(folder / "tps", "demo", out=tmp_path / "published")


def test_readme_speed_numbers_are_the_committed_benchmark_output():
    """The README's ditherq speed ratios are the d = 4096 rows of ``docs/bench/ditherq.txt``
    (the output of ``make bench``), so a rerun of the benchmark has to update both."""
    readme = (ROOT / "README.md").read_text()
    sentence = readme[readme.index("- Speed, from `docs/bench/ditherq.txt`"):]
    sentence = sentence[:sentence.index("\n- ")]
    quoted = re.findall(r"(\d+\.\d)x \((forward)\) and (\d+\.\d)x \((inverse)\)[^,]*batch (\d+), "
                        r"(\d+\.\d)x at batch (\d+)", sentence.replace("\n", " "))
    assert quoted, sentence
    forward, _, inverse, _, batch, single, one = quoted[0]
    rows = {line.split()[1]: line.split("|")[1].split()
            for line in (ROOT / "docs/bench/ditherq.txt").read_text().splitlines()
            if line.split()[:1] == ["4096"]}
    assert rows[batch][3:5] == [f"{forward}x", f"{inverse}x"]
    assert rows[one][3] == f"{single}x"


def test_the_report_logs_its_claims_table_to_wandb_when_asked(tmp_path, monkeypatch):
    """``--wandb``: one run of job_type report with the claims table (W&B disabled here, so
    the same calls run without a server)."""
    from experiments.runner import wandb_logger

    tables = []
    monkeypatch.setattr(wandb_logger.WandbMirror, "log_table",
                        lambda self, name, rows: tables.append((name, rows)))
    folder = report_fixture(tmp_path / "runs")
    assert report_main([str(folder), "--out", str(tmp_path / "report"), "--wandb"]) == 0
    (name, rows), = tables
    assert name == "claims" and len([r for r in rows if r["paper"] == "tps"]) == len(
        find_paper("tps").info["claims"])


def test_make_reproduce_runs_the_declared_seeds_in_rounds():
    from experiments.runner.reproduce import rounds

    declared = {key: find_paper(key).info["seeds"] for key in ("tps", "dpcert", "cfbeam")}
    plan = rounds(["cfbeam", "dpcert", "tps"], None)
    assert len(plan) == max(declared.values())
    for key, count in declared.items():
        assert [s for s, members in plan if key in members] == list(range(count))
    assert [members for _, members in plan][0] == ["cfbeam", "dpcert", "tps"]  # order kept
    assert rounds(["tps", "cfbeam"], [0, 1]) == [("0,1", ["tps", "cfbeam"])]


def test_the_same_runs_get_the_same_verdicts_in_the_report_and_in_a_sweep_summary(tmp_path):
    """One home for verdicts: three seeds of a paper judged by the report and summarised as
    a sweep give every claim the same verdict."""
    from experiments.runner.sweep_summary import summarize_sweep

    folder = tmp_path / "runs"
    for seed in range(3):
        run = folder / "cfbeam" / f"seed{seed}"
        (run / "tables").mkdir(parents=True)
        metrics = {m: 1.0 + 0.1 * seed for m in (
            "tree_budget_slope_vanilla", "tree_budget_slope_cfbeam",
            "tree_budget_slope_cfbeam_adaptive", "tree_budget_slope_bon",
            "tree_budget_slope_bon_closed_form", "lm_gap_cfbeam_minus_bon_slope_over_horizon")}
        for arm, base in (("cfbeam", 0.6), ("beam", 0.5), ("bon", 0.3), ("bomaj", 0.4)):
            values = [base + 0.05 * ((i * (seed + 1)) % 5) for i in range(8)]
            metrics[f"lm_accuracy_{arm}_longest_L"] = sum(values) / len(values)
        (run / "results.json").write_text(json.dumps({
            "paper": "cfbeam", "seed": seed, "metrics": metrics, "wall_time_s": 1.0,
            "overrides": ["+paper=cfbeam", f"seed={seed}"]}))
    papers, _ = summarize_folder(folder)
    report = {c["id"]: c["verdict"] for c in next(p for p in papers
                                                   if p["key"] == "cfbeam")["claims"]}
    summarize_sweep(folder / "cfbeam", claims=find_paper("cfbeam").info["claims"])
    with (folder / "cfbeam" / "summary.csv").open() as handle:
        row = next(csv.DictReader(handle))
    sweep = {k.removeprefix("claim_"): v for k, v in row.items() if k.startswith("claim_")}
    assert sweep == report


def test_every_threshold_in_a_claim_says_where_it_comes_from():
    """A number other than 0 in a condition has its source beside it: a comment on the
    condition or its rule line (the abstract's value, a scale the run measures, or our
    reading with its reason), or an equivalence margin's reason."""
    missing = []
    for path in sorted((ROOT / "conf" / "paper").glob("*.yaml")):
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            found = re.match(r'\s*holds_if: "(.*)"', line)
            if not found:
                continue
            numbers = [n for n in re.findall(r"(?<![\w.])(\d+\.?\d*(?:e-?\d+)?)",
                                             found.group(1)) if float(n) != 0]
            sourced = any("#" in near for near in lines[i:i + 3]) or any(
                "margin_reason" in near for near in lines[i:i + 5])
            if numbers and not sourced:
                missing.append(f"{path.name}: {found.group(1)}")
    assert not missing, missing


def test_every_existence_claim_is_re_verified_and_an_unverified_instance_does_not_count(
        tmp_path):
    import importlib

    from experiments.claims import judge_runs

    for key in list(papers()):
        for c in find_paper(key).info.get("claims") or []:
            if c.get("rule") == "exists":
                module, _, name = c["verify"].partition(":")
                assert callable(getattr(importlib.import_module(module), name)), c["id"]
    claim = next(c for c in find_paper("tps").info["claims"] if c["id"] == "ece_not_proper")
    runs = [{"metrics": {"ranks_oracle_first_ece": 0}, "seed": s, "folder": str(tmp_path)}
            for s in range(3)]  # reported at every seed, but no leaderboard was saved
    verdict = judge_runs(claim, runs)
    assert verdict.verdict == INCONCLUSIVE and "failed re-verification" in verdict.detail


def test_the_effect_figure_keeps_its_caption_and_ticks_inside(tmp_path, monkeypatch):
    """The forest plot's wrapped captions end inside the figure and its symmetric-log tick
    labels do not overlap."""
    import itertools

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from experiments.report import forest

    rows = [{"paper": "p", "claim": f"c{i}", "verdict": "holds", "rule": "compare",
             "margin": None, "sanity": False, "unit": unit, "effect": value,
             "low": value - 1, "high": value + 1, "seeds": 3, "abstract": "", "label": "x"}
            for i, (unit, value) in enumerate([("%", 3.0), ("%", 2500.0), ("%", -40.0),
                                               ("abs.", 0.2)])]
    captured = {}
    monkeypatch.setattr(plt, "close", lambda fig: captured.setdefault("fig", fig))
    forest.plot_effects(rows, tmp_path / "effects.png")
    monkeypatch.undo()
    fig = captured["fig"]
    renderer = fig.canvas.get_renderer()
    width = fig.bbox.width
    for ax in fig.axes:
        box = ax.xaxis.label.get_window_extent(renderer)
        assert box.x0 >= 0 and box.x1 <= width, "the caption runs off the figure"
        labels = sorted((t.get_window_extent(renderer) for t in ax.get_xticklabels()
                         if t.get_text()), key=lambda b: b.x0)
        assert all(a.x1 <= b.x0 for a, b in itertools.pairwise(labels)), "tick labels overlap"
    plt.close(fig)
