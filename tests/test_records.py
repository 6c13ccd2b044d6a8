"""A study's records in git (experiments/runner/records.py): a finished job's record holds
what the report and the verifiers read and nothing else; saving never overwrites a record,
and restoring fills only run folders that hold no results."""

from __future__ import annotations

import json
from pathlib import Path

from experiments.runner.records import (
    finished_runs,
    restore_records,
    save_records,
    study_timing,
)


def _run(folder: Path, seed: int, finished: bool = True) -> Path:
    run = folder / "tps" / f"seed{seed}"
    (run / "tables").mkdir(parents=True)
    (run / "figures").mkdir()
    result = {"paper": "tps", "seed": seed, **({"metrics": {"a": seed}} if finished else {})}
    (run / "results.json").write_text(json.dumps(result))
    (run / "metrics.json").write_text(json.dumps({"a": seed}))
    (run / "config_resolved.yaml").write_text("seed: 0\n")
    (run / "tables" / "leaderboard.csv").write_text("metric,x\n")
    (run / "figures" / "big.png").write_bytes(b"\0" * 1000)
    (run / "run.log").write_text("log\n")
    return run


def test_a_record_holds_the_results_tables_and_config_only(tmp_path):
    runs, records = tmp_path / "runs", tmp_path / "records"
    _run(runs, 0)
    _run(runs, 1, finished=False)  # no metrics: not a finished job
    assert save_records(runs, records) == 1
    saved = sorted(str(p.relative_to(records)) for p in records.rglob("*") if p.is_file())
    assert saved == ["tps/seed0/config_resolved.yaml", "tps/seed0/metrics.json",
                     "tps/seed0/results.json", "tps/seed0/tables/leaderboard.csv"]
    # a record is evidence: saving again never overwrites it
    (runs / "tps" / "seed0" / "metrics.json").write_text('{"a": 99}')
    assert save_records(runs, records) == 0
    assert json.loads((records / "tps" / "seed0" / "metrics.json").read_text()) == {"a": 0}


def test_restoring_fills_only_folders_without_results(tmp_path):
    runs, records, fresh = tmp_path / "runs", tmp_path / "records", tmp_path / "fresh"
    _run(runs, 0)
    _run(runs, 2)
    save_records(runs, records)
    assert restore_records(records, fresh) == 2
    assert [p.name for p in finished_runs(fresh)] == ["seed0", "seed2"]
    assert restore_records(records, fresh) == 0  # already there
    assert restore_records(tmp_path / "none", fresh) == 0


def test_a_studys_time_is_read_from_its_records(tmp_path):
    """Job-minutes are the jobs' times summed; the wall time is the union of their
    intervals, so overlapping jobs count once and the pause between two rounds not at all."""
    for seed, (start, seconds) in enumerate([("00:00:00", 60), ("00:00:30", 60),
                                             ("05:00:00", 120)]):
        run = _run(tmp_path, seed)
        result = json.loads((run / "results.json").read_text())
        result.update(started_at=f"2026-12-06T{start}+00:00", wall_time_s=seconds)
        (run / "results.json").write_text(json.dumps(result))
    timing = study_timing(tmp_path)
    assert timing == {"jobs": 3, "wall_min": 3.5, "job_minutes": {"tps": 4.0}}
