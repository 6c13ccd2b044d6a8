"""``make reproduce``: every paper's default at its declared seed count, as Hydra multiruns.

Each paper declares ``paper.seeds`` in ``conf/paper/<key>.yaml``, fixed before any result is
seen (no stopping rule looks at the data). The runs go in rounds by seed: round ``s`` runs
the papers that declare more than ``s`` seeds, longest first, so an interrupted
reproduction has the same seeds for every paper it reached: one multirun of the one-process
papers, a job per core, then the papers with a worker pool of their own, one at a time, so
that no two processes share a core (sharing them made jobs two to three times slower).
``--seeds 0,1`` runs exactly those seeds for every paper instead (one multirun);
``--scale paper`` runs each paper's ``scale=paper`` preset (one multirun per paper);
``--study confirmatory`` runs the seeds the committed docs/preregistration.json declares
(fresh seeds from its first seed, each paper's count from the pilot's power analysis). Every job
writes ``<dir>/<paper>/seed<s>/``; a finished job is skipped when run again (resume).
``--papers all`` takes every registered paper, longest first by the cost per seed the last
published reproduction measured (docs/reproduction.json; a paper it lacks goes first). At
the end it prints the wall time and each paper's job-minutes and writes them to
``<dir>/timing.json`` (``make readme`` publishes them with the table). ``--records DIR``
keeps the study's evidence in a committed folder (experiments/runner/records.py): its
records are restored into the run folders first (those jobs are skipped), and each round's
finished jobs are saved there.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from common.errors import UserError
from experiments.claims.papers import ROOT, find_paper, papers
from experiments.runner.job import EXIT_REJECTED
from experiments.runner.records import restore_records, save_records
from experiments.runner.results import read_json

PUBLISHED = ROOT / "docs" / "reproduction.json"


def longest_first(papers: list[str]) -> list[str]:
    """``papers`` by the seconds per seed the published reproduction measured, longest
    first (unmeasured ones first: they may be long)."""
    try:
        measured = {p["key"]: p.get("runtime_s") or 0.0
                    for p in json.loads(PUBLISHED.read_text())["papers"]}
    except (OSError, ValueError, KeyError, TypeError):
        measured = {}
    return sorted(papers, key=lambda k: -measured.get(k, float("inf")))


def has_worker_pool(key: str) -> bool:
    """Whether the paper's default runs its own pool of worker processes
    (``protocol.workers``): such a job gets the cores to itself."""
    from omegaconf import OmegaConf

    protocol = OmegaConf.load(ROOT / "conf" / "paper" / f"{key}.yaml").get("protocol") or {}
    return "workers" in protocol


def job_minutes(folder: Path) -> dict[str, float]:
    """Per paper, the minutes its finished jobs under ``folder`` took (results.json)."""
    out: dict[str, float] = {}
    for path in sorted(folder.rglob("results.json")):
        result, _ = read_json(path)
        if result and result.get("paper") and result.get("wall_time_s") is not None:
            out[result["paper"]] = out.get(result["paper"], 0.0) + result["wall_time_s"] / 60
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def rounds(papers: list[str], seeds: list[int] | None,
           registered: dict[str, list[int]] | None = None) -> list[tuple[int | str, list[str]]]:
    """(seed or seed list, papers) per multirun, in order: round i runs each paper's i-th
    seed (its declared seeds from 0, or the preregistered ones)."""
    if seeds is not None:
        return [(",".join(map(str, seeds)), papers)]
    if registered is None:
        registered = {key: list(range(int(find_paper(key).info.get("seeds", 3)))) for key in papers}
    longest = max(len(registered[k]) for k in papers)
    out = []
    for i in range(longest):
        members = [k for k in papers if len(registered[k]) > i]
        for seed in sorted({registered[k][i] for k in members}):
            out.append((seed, [k for k in members if registered[k][i] == seed]))
    return out


def confirmatory_plan() -> dict[str, list[int]] | None:
    """The preregistered seeds, once docs/preregistration.json is committed as it is (the
    confirmatory runs must come after it in git's order); None, with one line, otherwise."""
    from experiments.claims.study import PREREGISTRATION, confirmatory_seeds

    committed = subprocess.run(["git", "diff", "--quiet", "HEAD", "--",
                                str(PREREGISTRATION)], cwd=ROOT).returncode == 0 and \
        subprocess.run(["git", "ls-files", "--error-unmatch", str(PREREGISTRATION)], cwd=ROOT,
                       capture_output=True).returncode == 0
    if not PREREGISTRATION.is_file() or not committed:
        print("error: the confirmatory study runs the seeds docs/preregistration.json "
              "declares, after it is committed: make preregister, then git commit it",
              file=sys.stderr)
        return None
    return confirmatory_seeds(json.loads(PREREGISTRATION.read_text()))


def _end_with_parent() -> None:
    """In the multirun's process: SIGTERM when the driver dies, even by SIGKILL (Linux), so
    no orphaned multirun keeps writing while a rerun starts the same jobs."""
    if sys.platform.startswith("linux"):
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def run_stoppable(command: list[str], stopped: list[int]) -> int:
    """Run one multirun; SIGTERM or SIGINT to this process (a scheduler, ``kill <pid>``,
    Ctrl-C) stops it too: the multirun gets SIGTERM, and its job processes, which watch it,
    end with ``failed.json`` saying ``interrupted``; the multirun also ends when this process
    is killed outright. ``stopped`` records the signal."""
    child = subprocess.Popen(command, preexec_fn=_end_with_parent)

    def stop(signum, frame):
        stopped.append(signum)
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        return child.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def record_timing(folder: Path, papers: list[str], seeds: str, wall: float,
                  minutes: dict[str, float]) -> None:
    """Add this reproduction's wall time to ``<folder>/timing.json`` (the rounds so far) with
    the job-minutes; a file that cannot be read is set aside, never silently replaced."""
    timing = folder / "timing.json"
    previous, error = read_json(timing) if timing.exists() else ({}, "")
    if not isinstance((previous or {}).get("runs", []), list):
        previous, error = None, "runs is not a list"
    if previous is None:  # never silently dropped: the earlier rounds' wall times are in it
        aside = timing.with_name(f"timing.json.corrupt-{int(time.time())}")
        timing.rename(aside)
        print(f"warning: {timing} cannot be read ({error}): set aside as {aside.name}; the "
              "wall time of the rounds it held is not in the new one", file=sys.stderr)
    runs = [*(previous or {}).get("runs", []),
            {"papers": papers, "seeds": seeds, "wall_min": round(wall, 2)}]
    folder.mkdir(parents=True, exist_ok=True)
    timing.write_text(json.dumps({"runs": runs, "job_minutes": minutes}, indent=1) + "\n")


class _OneLineParser(argparse.ArgumentParser):
    """argparse with one ``error:`` line (and exit code 1) instead of its usage block."""

    def error(self, message: str):
        print(f"error: {message} (make help lists the variables)", file=sys.stderr)
        sys.exit(EXIT_REJECTED)


def checked_arguments(args) -> tuple[list[str], list[int] | None]:
    """The papers and seeds asked for; ``UserError`` (one line) for an unknown paper, a seed
    that is not a number, no worker or a folder Hydra's override cannot hold."""
    known = list(papers())
    chosen = (longest_first(known) if args.papers == "all"
              else [p.strip() for p in args.papers.split(",") if p.strip()])
    if not chosen:
        raise UserError(f"no paper given: PAPERS=all or some of {', '.join(known)}")
    for key in chosen:
        find_paper(key)
    seeds = []
    for text in (s.strip() for s in args.seeds.split(",") if s.strip()):
        if not text.isdigit():
            raise UserError(f"SEEDS={args.seeds}: '{text}' is not a seed (a whole number >= 0)")
        seeds.append(int(text))
    if args.jobs < 1:
        raise UserError(f"JOBS={args.jobs}: at least one job at a time")
    if any(c in args.dir for c in "\"'\\,=[]{}()"):
        raise UserError(f"REPRODUCE_DIR={args.dir}: a folder name without quotes, commas, "
                        "brackets or '=' (Hydra reads them as syntax)")
    return chosen, seeds or None


def multiruns(args, seed, members: list[str], pooled: set[str]
              ) -> list[tuple[list[str], list[str]]]:
    """(papers, command) of each multirun of one round. The presets are per paper: at
    scale=paper, one multirun per paper. At the default scale the one-process papers share
    the cores (one job per core) and a paper with its own worker pool runs alone: no core is
    shared by two processes."""
    if args.scale == "cpu":
        groups = [[k for k in members if k not in pooled], [k for k in members if k in pooled]]
    else:
        groups = [[key] for key in members]
    out = []
    for group in (g for g in groups if g):
        jobs = 1 if args.scale == "cpu" and group[0] in pooled else args.jobs
        command = [sys.executable, "run.py", "-m", f"+paper={','.join(group)}",
                   f"seed={seed}", f"hydra/launcher={args.launcher}",
                   f"hydra.sweep.dir='{args.dir}'",
                   "hydra.sweep.subdir=${paper.key}/seed${seed}", *args.overrides]
        if args.scale != "cpu":
            command.append(f"scale={args.scale}")
        if args.launcher == "joblib":
            command.insert(5, f"hydra.launcher.n_jobs={jobs}")
        out.append((group, command))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = _OneLineParser(prog="python -m experiments.runner.reproduce")
    parser.add_argument("--papers", required=True, help="comma-separated, longest first")
    parser.add_argument("--seeds", default="", help="e.g. 0,1,2 (default: declared counts)")
    parser.add_argument("--launcher", default="joblib")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--dir", default="outputs/reproduce")
    parser.add_argument("--scale", default="cpu", help="cpu or paper (the presets)")
    parser.add_argument("--study", default="declared", choices=("declared", "confirmatory"),
                        help="declared: each paper's paper.seeds from 0 (the quick study); "
                             "confirmatory: the seeds docs/preregistration.json declares")
    parser.add_argument("--records", default="",
                        help="a committed folder of job records: restored first, saved to "
                             "after each round (it commits nothing)")
    parser.add_argument("overrides", nargs="*", help="passed to every job")
    args = parser.parse_args(argv)
    try:
        papers, seeds = checked_arguments(args)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_REJECTED
    registered = None
    if args.study == "confirmatory":
        registered = confirmatory_plan()
        if registered is None:
            return EXIT_REJECTED
    records = Path(args.records) if args.records else None
    if records is not None:
        restored = restore_records(records, Path(args.dir))
        print(f"==> {restored} finished jobs restored from the records in {records}",
              flush=True)

    def keep_records() -> None:
        if records is not None:
            saved = save_records(Path(args.dir), records)
            if saved:
                print(f"==> {saved} new records in {records}: commit them (git add "
                      f"{records} && git commit) so an interruption keeps this round",
                      flush=True)

    code, start, stopped = 0, time.perf_counter(), []
    pooled = {key for key in papers if has_worker_pool(key)}
    for seed, members in rounds(papers, seeds, registered):
        for group, command in multiruns(args, seed, members, pooled):
            print(f"==> seed {seed}: {', '.join(group)}", flush=True)
            returned = run_stoppable(command, stopped)
            keep_records()
            if stopped:
                print(f"interrupted ({signal.Signals(stopped[0]).name}); rerun the same "
                      "command to resume", file=sys.stderr, flush=True)
                return 128 + stopped[0]
            if returned == EXIT_REJECTED:  # a refused command line: the next would be too
                return returned
            code = max(code, returned)
    wall = (time.perf_counter() - start) / 60
    minutes = job_minutes(Path(args.dir))
    print(f"==> reproduction finished in {wall:.1f} min wall (exit code {code}); job-minutes: "
          + ", ".join(f"{k} {v:.1f}" for k, v in minutes.items()) + "; make report judges it",
          flush=True)
    record_timing(Path(args.dir), papers, args.seeds or "declared", wall, minutes)
    return code


if __name__ == "__main__":
    sys.exit(main())
