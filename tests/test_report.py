"""Claims as data and the reproduction report: the condition language, the seed rules, every
paper's claims, the report on a fixture folder of runs, and the README table's freshness."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from common.errors import UserError
from experiments.report.build import (
    README_END,
    README_START,
    ROOT,
    all_papers,
    collect,
    paper_info,
    readme_table,
    write_report,
)
from experiments.report.claims import (
    FAILS,
    HOLDS,
    NOT_RUN,
    NOT_TESTED,
    ClaimSyntaxError,
    check_claims,
    combine,
    evaluate,
    metric_names,
    paper_verdict,
    parse,
)

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
    with pytest.raises(UserError, match="mean_ci needs one comparison"):
        check_claims("demo", [{"id": "two", "holds_if": "a > 1 and b > 1",
                               "over_seeds": "mean_ci"}])


# -- how seeds combine ------------------------------------------------------------------------

def test_all_needs_every_seed():
    runs = [{"a": 2, "b": 1}, {"a": 2, "b": 1}, {"a": 0, "b": 1}]
    verdict = combine("a > b", "all", runs)
    assert verdict.verdict == FAILS and verdict.detail == "2 of 3 seeds"
    assert verdict.per_seed == [True, True, False]
    assert combine("a > b", "all", runs[:2]).verdict == HOLDS


def test_mean_ci_uses_the_paired_t_interval():
    # differences 1.0, 1.1, 0.9: mean 1, sd 0.1, half width 4.303 * 0.1 / sqrt(3) = 0.248
    runs = [{"a": 1.0 + d, "b": 1.0} for d in (1.0, 1.1, 0.9)]
    verdict = combine("a > b", "mean_ci", runs)
    assert verdict.verdict == HOLDS
    assert "[0.7516, 1.248]" in verdict.detail
    # the same differences do not show a < b, and a noisy gain is not shown at 95%
    assert combine("a < b", "mean_ci", runs).verdict == FAILS
    noisy = [{"a": d, "b": 0.0} for d in (1.0, -1.0, 0.5)]
    assert combine("a > b", "mean_ci", noisy).verdict == FAILS
    assert "includes 0" in combine("a > b", "mean_ci", noisy).detail
    # every seed holds, yet the interval need not exclude 0 with a wide spread
    spread = [{"a": d, "b": 0.0} for d in (0.01, 3.0, 0.02)]
    assert combine("a > b", "all", spread).verdict == HOLDS
    assert combine("a > b", "mean_ci", spread).verdict == FAILS
    assert combine("a > b", "mean_ci", runs[:1]).detail == "mean_ci needs at least two seeds"


def test_untestable_and_unrun_claims_never_hold():
    assert combine(None, "all", [{"a": 1}]).verdict == NOT_TESTED
    assert combine("a > 0", "all", []).verdict == NOT_RUN
    assert paper_verdict([HOLDS, HOLDS, NOT_TESTED]) == HOLDS
    assert paper_verdict([HOLDS, FAILS]) == "partial"
    assert paper_verdict([FAILS, NOT_TESTED]) == FAILS
    assert paper_verdict([NOT_TESTED]) == NOT_TESTED
    assert paper_verdict([HOLDS, NOT_RUN]) == NOT_RUN


# -- every paper's claims -------------------------------------------------------------------

@pytest.mark.parametrize("key", all_papers())
def test_every_paper_states_checkable_claims(key):
    info = paper_info(key)
    assert len(info["claim"].split()) <= 20, "the headline claim has at most 20 words"
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
    summary = json.loads((ROOT / "docs" / "reproduction.json").read_text())
    assert sorted(p["key"] for p in summary) == all_papers()
    for paper in summary:
        for claim in paper["claims"]:
            assert "metric missing" not in claim["detail"], (paper["key"], claim)


def test_the_readme_table_is_generated_from_the_published_reproduction():
    summary = json.loads((ROOT / "docs" / "reproduction.json").read_text())
    readme = (ROOT / "README.md").read_text()
    start, end = readme.index(README_START), readme.index(README_END) + len(README_END)
    assert readme[start:end] == readme_table(summary), "run `make readme` to refresh it"
    assert len(readme.splitlines()) <= 260


# -- the report on a fixture folder ---------------------------------------------------------

def _png(path: Path) -> None:
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(2, 2))
    ax.plot([0, 1], [0, 1])
    fig.savefig(path)
    plt.close(fig)


def report_fixture(root: Path) -> Path:
    """tps at seeds 0 and 1 (one metric differs), a failed rankcomp, a non-default tps run."""
    for seed, gap in ((0, 0.01), (1, 0.02)):
        run = root / "tps" / f"seed{seed}"
        run.mkdir(parents=True)
        metrics = {"tps_oracle_first_all": 1, "ranks_oracle_first_ece": 0,
                   "ranks_oracle_first_auroc": 0, "ranks_oracle_first_scalar_brier": 1,
                   "tps_gap_constant_vs_oracle": gap}
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
    papers = {p["key"]: p for p in write_report(folder, tmp_path / "report")}
    tps = papers["tps"]
    assert tps["verdict"] == "partial"
    verdicts = {c["id"]: c["verdict"] for c in tps["claims"]}
    assert verdicts == {"tps_strictly_proper": HOLDS, "others_do_not": FAILS,
                        "constant_predictor_penalized": HOLDS}
    assert tps["headline"]["mean"] == pytest.approx(0.015)
    assert papers["rankcomp"]["verdict"] == "failed"
    assert papers["cfbeam"]["verdict"] == NOT_RUN
    page = (tmp_path / "report" / "index.html").read_text()
    assert page.count("<tr data-paper=") == len(all_papers())
    assert "data:image/png;base64," in page and 'id="paper-tps"' in page
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert "interrupted (SIGTERM)" in markdown and "tps_gap_constant_vs_oracle: 0.01, 0.02" \
        in markdown


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
