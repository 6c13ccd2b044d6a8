"""``python -m experiments.report <runs folder> [--out outputs/report] [--publish]``

Writes the reproduction report (index.html, report.md, effects.png, summary.json) from the
runs under a folder. ``--publish`` also copies summary.json to docs/reproduction.json and
regenerates the README's results table from it (what ``make readme`` does after a full
``make reproduce``); ``--wandb`` logs the claims table and the effect figure as a W&B run.
A run file that cannot be read is shown as corrupt and the others are judged; the exit code
is then 1, after the page is written (and nothing is published).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from experiments.claims.papers import ROOT
from experiments.report.build import (
    log_to_wandb,
    readme_table,
    replace_readme_table,
    write_report,
)
from experiments.report.pages import main as write_pages
from experiments.report.pages import verdicts_at
from experiments.report.registration import confirmatory_record
from experiments.runner.results import read_json


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.report")
    parser.add_argument("runs", type=Path, help="a folder of runs (make reproduce's sweep)")
    parser.add_argument("--out", type=Path, default=Path("outputs/report"))
    parser.add_argument("--publish", action="store_true",
                        help="copy summary.json to docs/ and regenerate the README table")
    parser.add_argument("--since", metavar="REV",
                        help="with --publish: the git revision whose docs/reproduction.json "
                             "the paper pages compare verdicts with (default: the one the "
                             "published file already compares with)")
    parser.add_argument("--wandb", action="store_true",
                        help="also log the claims table and the effect figure to W&B")
    args = parser.parse_args(argv)
    if not args.runs.is_dir():
        print(f"error: {args.runs} is not a folder of runs (run make reproduce first)",
              file=sys.stderr)
        return 1
    papers, unplaced = write_report(args.runs, args.out)
    for p in papers:
        print(f"{p['key']:<12} {p['verdict']:<24} seeds {p['seeds']}")
    corrupt = unplaced + [c for p in papers for c in p["corrupt"]]
    for c in corrupt:
        print(f"corrupt: {c['file']}, {c['error']}")
    print(f"report: {args.out / 'index.html'} and {args.out / 'report.md'}")
    if args.wandb:
        log_to_wandb(papers, args.out, str(args.runs))
    if corrupt:
        return 1
    if args.publish:
        import json

        target = ROOT / "docs" / "reproduction.json"
        target.parent.mkdir(exist_ok=True)
        timing, _ = read_json(args.runs / "timing.json")
        earlier, _ = read_json(target)
        kept = earlier.get("since") if isinstance(earlier, dict) else None
        since = verdicts_at(args.since) if args.since else kept
        papers_summary = json.loads((args.out / "summary.json").read_text())
        published = {"papers": papers_summary, "timing": timing, "since": since}
        if all(p.get("study") == "confirmatory" for p in papers_summary):
            published.update(confirmatory_record(papers_summary))
        target.write_text(json.dumps(published, indent=1) + "\n")
        readme = ROOT / "README.md"
        readme.write_text(replace_readme_table(readme.read_text(), readme_table(published)))
        write_pages([])
        print(f"published: {target} and the README table")
    return 0


if __name__ == "__main__":
    sys.exit(main())
