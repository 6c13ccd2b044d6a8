"""Re-verification of the existence claims from a run's saved leaderboard
(``tables/leaderboard.csv``: one row per metric, one column per predictor): the report
reads the table itself instead of trusting the run's flag, so a reported instance counts
only when the numbers the run saved show it."""

from __future__ import annotations

import csv
from collections.abc import Mapping
from pathlib import Path

REFERENCE = "oracle"  # the true per-step trace
# the metrics whose larger value is better (the others: smaller is better)
HIGHER_IS_BETTER = ("auroc", "auprc")


def reference_not_first(run: Mapping, metric: str) -> bool:
    """Some other predictor scores at least as well as the true trace under ``metric`` in
    the run's saved leaderboard (a tie is not first)."""
    with (Path(run["folder"]) / "tables" / "leaderboard.csv").open(newline="") as handle:
        row = next(r for r in csv.DictReader(handle) if r["metric"] == metric)
    values = {k: float(v) for k, v in row.items() if k != "metric" and v not in ("", None)}
    sign = -1.0 if metric in HIGHER_IS_BETTER else 1.0
    best_other = min(sign * v for k, v in values.items() if k != REFERENCE)
    return best_other <= sign * values[REFERENCE]


def ece(run: Mapping) -> bool:
    return reference_not_first(run, "ece")


def auroc(run: Mapping) -> bool:
    return reference_not_first(run, "auroc")


def scalar_brier(run: Mapping) -> bool:
    return reference_not_first(run, "scalar_brier")


def auprc(run: Mapping) -> bool:
    return reference_not_first(run, "auprc")


def aurc(run: Mapping) -> bool:
    return reference_not_first(run, "aurc")


def _table(run: Mapping, name: str) -> list[dict[str, str]]:
    with (Path(run["folder"]) / "tables" / f"{name}.csv").open(newline="") as handle:
        return list(csv.DictReader(handle))


def recalibration_moves_tps(run: Mapping) -> bool:
    """The run's recalibration (method.recalibration in its saved config) moved the TPS
    Brier score by at least half the gap between the true trace and the constant base-rate
    predictor, both as the run saved them."""
    import yaml

    config = yaml.safe_load((Path(run["folder"]) / "config_resolved.yaml").read_text())
    kind = config["method"]["recalibration"]
    platt = next(r for r in _table(run, "recalibration") if r["recalibration"] == kind)
    board = next(r for r in _table(run, "leaderboard") if r["metric"] == "tps_brier_uniform")
    change = float(platt["tps_brier_uniform_after"]) - float(platt["tps_brier_uniform_before"])
    return abs(change) > 0.5 * (float(board["constant"]) - float(board[REFERENCE]))


def censoring_changes_verdict(run: Mapping) -> bool:
    """On the heavily censored design, the complete-only evaluation and the tractable
    approximation order the true trace and the other predictor differently."""
    rows = {r["predictor"]: r for r in _table(run, "censoring_verdicts")
            if r["design"] == "designed"}
    other = next(p for p in rows if p != REFERENCE)

    def first(column: str) -> bool:
        return float(rows[REFERENCE][column]) < float(rows[other][column])

    return first("complete_only") != first("approx_own_p_stop")
