"""The slow defaults, before and after: each paper's default at seed 0, default size, from an
empty cache, run by this one driver in turn with the same paper at an earlier commit (a
``git worktree`` of ``--before``, the same virtual environment), so both see the same
machine. Every run's metrics must equal the committed reference
(``tests/data/reference_metrics/<paper>.json``) bit for bit, the wall-clock metrics aside: a
speed-up may change the time, never a number.

    python tests/benchmarks/bench_defaults.py [--before REV] [--write-reference] [paper ...]

Without papers: the ten slowest defaults (``SLOWEST``). ``--write-reference`` (re)writes the
references from this tree's runs; do it only when a default changes on purpose."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REFERENCES = ROOT / "tests" / "data" / "reference_metrics"
# seed-0 job times of make reproduce at the commit the speed work started from, longest first
SLOWEST = ("sufexplain", "directsynth", "proteinopd", "prohind", "gcad", "viptc", "glycandock",
           "gscoreset", "sparseshap", "proprio")
WALL_CLOCK = ("time_", "seconds_")  # metrics measured in wall time: they move with the machine


def numbers(metrics: dict) -> dict:
    """The metrics that must not move: all but the wall-clock ones."""
    return {k: v for k, v in metrics.items()
            if not any(k.startswith(p) or f"_{p}" in k for p in WALL_CLOCK)}


def run_default(key: str, code: Path, folder: Path) -> tuple[float, dict, dict]:
    """Wall seconds of ``python run.py +paper=<key>`` in ``code``, its results.json and its
    metrics.json."""
    start = time.perf_counter()
    command = [sys.executable, "run.py", f"+paper={key}", f"hydra.run.dir={folder / 'run'}",
               f"paths.cache_dir={folder / 'cache'}"]
    done = subprocess.run(command, cwd=code, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{key} failed in {code}:\n{done.stderr[-2000:]}")
    run = folder / "run"
    return (wall, json.loads((run / "results.json").read_text()),
            json.loads((run / "metrics.json").read_text()))


def differences(key: str, metrics: dict) -> list[str]:
    """The metrics that differ from the committed reference (bit for bit; NaN equals NaN)."""
    reference = json.loads((REFERENCES / f"{key}.json").read_text())
    ours = numbers(metrics)
    return sorted(k for k in reference.keys() | ours.keys()
                  if json.dumps(reference.get(k)) != json.dumps(ours.get(k)))


def worktree(rev: str, folder: Path) -> Path:
    subprocess.run(["git", "worktree", "add", "--detach", "-f", str(folder), rev], cwd=ROOT,
                   check=True, capture_output=True)
    return folder


def stage_lines(result: dict) -> list[str]:
    stages = result.get("stage_seconds") or {}
    lines = [f"    {name:<43} {seconds:7.1f} s" for name, seconds in stages.items()]
    rest = result["wall_time_s"] - sum(stages.values())
    return lines + [f"    {'everything else (data, evaluation, figures)':<43} {rest:7.1f} s"]


def bench(key: str, before: tuple[str, Path] | None, write_reference: bool) -> bool:
    """Time the paper's default now (and at ``before``: its label and worktree), check both
    runs' metrics against the reference and print the times; False when a metric of this
    code moved (the earlier commit's differences are printed: a default may have changed on
    purpose since, see CHANGELOG)."""
    with tempfile.TemporaryDirectory() as folder:
        old = run_default(key, before[1], Path(folder) / "before") if before else None
        wall, result, metrics = run_default(key, ROOT, Path(folder) / "after")
    if write_reference:
        REFERENCES.mkdir(parents=True, exist_ok=True)
        (REFERENCES / f"{key}.json").write_text(json.dumps(numbers(metrics), indent=1,
                                                           sort_keys=True) + "\n")
    line = f"{key}: {wall:.0f} s wall now"
    if old:
        line += f", {old[0]:.0f} s at {before[0]}: {old[0] / wall:.2f}x faster"
    print(line + " (seed 0, default size, empty cache)", flush=True)
    print("\n".join(stage_lines(result)))
    moved = False
    for label, got in [("now", metrics)] + ([(before[0], old[2])] if old else []):
        differ = differences(key, got)
        if differ:  # the earlier commit may differ where a default changed on purpose since
            print(f"  {label}: DIFFERENT from tests/data/reference_metrics/{key}.json: "
                  + ", ".join(differ), flush=True)
            moved = moved or label == "now"
        else:
            print(f"  {label}: {len(numbers(got))} metrics identical to "
                  f"tests/data/reference_metrics/{key}.json (wall-clock metrics aside)",
                  flush=True)
    return not moved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("papers", nargs="*", default=list(SLOWEST))
    parser.add_argument("--before", help="a commit to time each default against")
    parser.add_argument("--write-reference", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        before = None
        if args.before:
            before = (args.before[:7], worktree(args.before, Path(folder) / "before"))
        try:
            same = [bench(key, before, args.write_reference) for key in args.papers]
        finally:
            if before:
                subprocess.run(["git", "worktree", "remove", "--force", str(before[1])],
                               cwd=ROOT, capture_output=True)
    if not all(same):
        raise SystemExit("a default's metrics moved (DIFFERENT above)")


if __name__ == "__main__":
    main()
