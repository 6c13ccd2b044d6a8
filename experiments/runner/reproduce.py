"""``make reproduce``: every paper's default at its declared seed count, as Hydra multiruns.

Each paper declares ``paper.seeds`` in ``conf/paper/<key>.yaml``, fixed before any result is
seen (no stopping rule looks at the data). The runs go in rounds by seed: round ``s`` is one
multirun of the papers that declare more than ``s`` seeds, longest first, so two workers
stay busy and an interrupted reproduction has the same seeds for every paper it reached.
``--seeds 0,1`` runs exactly those seeds for every paper instead (one multirun);
``--scale paper`` runs each paper's ``scale=paper`` preset (one multirun per paper). Every job
writes ``<dir>/<paper>/seed<s>/``; a finished job is skipped when run again (resume).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from experiments.claims import paper_info


def rounds(papers: list[str], seeds: list[int] | None) -> list[tuple[int | str, list[str]]]:
    """(seed or seed list, papers) per multirun, in order."""
    if seeds is not None:
        return [(",".join(map(str, seeds)), papers)]
    declared = {key: int(paper_info(key).get("seeds", 3)) for key in papers}
    return [(s, [k for k in papers if declared[k] > s]) for s in range(max(declared.values()))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.runner.reproduce")
    parser.add_argument("--papers", required=True, help="comma-separated, longest first")
    parser.add_argument("--seeds", default="", help="e.g. 0,1,2 (default: declared counts)")
    parser.add_argument("--launcher", default="joblib")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--dir", default="outputs/reproduce")
    parser.add_argument("--scale", default="cpu", help="cpu or paper (the presets)")
    parser.add_argument("overrides", nargs="*", help="passed to every job")
    args = parser.parse_args(argv)
    papers = [p for p in args.papers.split(",") if p]
    seeds = [int(s) for s in args.seeds.split(",") if s] or None
    code, start = 0, time.perf_counter()
    for seed, members in rounds(papers, seeds):
        # the presets are per paper: at scale=paper, one multirun per paper
        groups = [members] if args.scale == "cpu" else [[key] for key in members]
        for group in groups:
            command = [sys.executable, "run.py", "-m", f"+paper={','.join(group)}",
                       f"seed={seed}", f"hydra/launcher={args.launcher}",
                       f"hydra.sweep.dir={args.dir}",
                       "hydra.sweep.subdir=${paper.key}/seed${seed}", *args.overrides]
            if args.scale != "cpu":
                command.append(f"scale={args.scale}")
            if args.launcher == "joblib":
                command.insert(5, f"hydra.launcher.n_jobs={args.jobs}")
            print(f"==> seed {seed}: {', '.join(group)}", flush=True)
            code = max(code, subprocess.call(command))
    print(f"==> reproduction finished in {(time.perf_counter() - start) / 60:.1f} min wall "
          f"(exit code {code}); make report judges it", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
