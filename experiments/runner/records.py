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


def _copy(source: Path, target: Path, files: list[Path]) -> None:
    for name in files:
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / name, target / name)


def save_records(runs: Path, records: Path) -> int:
    """Copy the record of every finished job under ``runs`` that ``records`` lacks, and the
    rounds' timing.json; returns how many records were saved (a record already there is
    never overwritten: it is the evidence)."""
    if (runs / "timing.json").is_file():  # the rounds' wall times so far, for the README
        records.mkdir(parents=True, exist_ok=True)
        shutil.copy2(runs / "timing.json", records / "timing.json")
    saved = 0
    for run in finished_runs(runs):
        target = records / run.relative_to(runs)
        if (target / "results.json").is_file():
            continue
        _copy(run, target, record_files(run))
        saved += 1
    return saved


def restore_records(records: Path, runs: Path) -> int:
    """Copy every record into its run folder under ``runs`` where that folder holds no
    results.json yet; returns how many were restored."""
    if not records.is_dir():
        return 0
    restored = 0
    for record in finished_runs(records):
        target = runs / record.relative_to(records)
        if (target / "results.json").exists():
            continue
        _copy(record, target, record_files(record))
        restored += 1
    return restored
