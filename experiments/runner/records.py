"""A study's evidence in git: each finished job's **record**, the files the report and the
claims' verifiers read (``results.json``, ``metrics.json``, ``config_resolved.yaml`` and
the CSV tables; no weights, figures, logs or caches), copied from its run folder
``<runs>/<paper>/seed<s>/`` into a committed folder ``<records>/<paper>/seed<s>/``.

``make reproduce RECORDS=<folder>`` restores every record into its run folder before it
runs, so each job with a record is skipped (resume from a clean clone), and saves the
records of the jobs each round finished; it commits nothing: commit the records after each
round, and an interruption loses at most that round. ``make report REPORT_FROM=<folder>``
judges the records alone.
"""

from __future__ import annotations

import shutil
from datetime import datetime
from pathlib import Path

from experiments.runner.results import read_json

RECORD_FILES = ("results.json", "metrics.json", "config_resolved.yaml")
RECORD_TABLES = "tables"  # every *.csv in it


def record_files(run: Path) -> list[Path]:
    """The files of a run folder that make its record, relative to the folder."""
    files = [Path(name) for name in RECORD_FILES if (run / name).is_file()]
    tables = run / RECORD_TABLES
    if tables.is_dir():
        files += sorted(p.relative_to(run) for p in tables.glob("*.csv"))
    return files


def finished_runs(root: Path) -> list[Path]:
    """The run folders under ``root`` whose results.json holds metrics (a finished job)."""
    out = []
    for path in sorted(root.rglob("results.json")):
        result, _ = read_json(path)
        if isinstance((result or {}).get("metrics"), dict):
            out.append(path.parent)
    return out


def _copy_finished(source: Path, target: Path) -> int:
    """Copy the record of every finished job under ``source`` to the same place under
    ``target`` where that place holds no results.json (one is never overwritten); returns
    how many were copied."""
    copied = 0
    for run in finished_runs(source):
        place = target / run.relative_to(source)
        if (place / "results.json").exists():
            continue
        for name in record_files(run):
            (place / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(run / name, place / name)
        copied += 1
    return copied


def save_records(runs: Path, records: Path) -> int:
    """Copy the record of every finished job under ``runs`` that ``records`` lacks; returns
    how many were saved (a record already there is never overwritten: it is the
    evidence)."""
    return _copy_finished(runs, records)


def study_timing(records: Path) -> dict:
    """A study's time from its records alone, however many commands and interruptions it
    took: per paper its job-minutes (the jobs' ``wall_time_s`` summed) and ``wall_min``, the
    minutes during which some job was running (the union of the jobs' intervals from
    ``started_at``: the rounds' wall times summed, without the pauses between them). Both
    count each job's protocol, its start-up (imports, configuration) aside."""
    spans, minutes = [], {}
    for run in finished_runs(records):
        result, _ = read_json(run / "results.json")
        seconds, started = result.get("wall_time_s"), result.get("started_at")
        if not isinstance(seconds, (int, float)) or not started:
            continue
        start = datetime.fromisoformat(started).timestamp()
        spans.append((start, start + seconds))
        paper = result.get("paper", "?")
        minutes[paper] = minutes.get(paper, 0.0) + seconds / 60
    wall, end = 0.0, float("-inf")
    for start, stop in sorted(spans):
        wall += max(0.0, stop - max(start, end))
        end = max(end, stop)
    return {"jobs": len(spans), "wall_min": round(wall / 60, 2),
            "job_minutes": {k: round(v, 2) for k, v in sorted(minutes.items(),
                                                              key=lambda kv: -kv[1])}}


def restore_records(records: Path, runs: Path) -> int:
    """Copy every record into its run folder under ``runs`` where that folder holds no
    results.json yet; returns how many were restored."""
    return _copy_finished(records, runs) if records.is_dir() else 0
