"""``make preregister``: freeze the claims, the analysis and the seed counts before the
confirmatory data exist.

    python -m experiments.report.preregister outputs/pilot      # writes docs/pilot.json
                                                                # and docs/preregistration.json

The pilot is a full ``make reproduce`` at the development seeds (the seeds every tuning run
used, its records in docs/studies/pilot); it is kept in ``docs/pilot.json`` and never pooled
with the confirmatory seeds. What the record holds and how each paper's seed count is sized
is the study layer's (experiments/claims/study.py); this command judges the pilot and
writes the two files.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from experiments.claims.papers import ROOT
from experiments.claims.study import (
    BUDGET_MINUTES,
    FIRST_SEED,
    PILOT,
    PREREGISTRATION,
    preregistration,
)


def main(argv: list[str] | None = None) -> int:
    from experiments.report.summary import before_preregistration, summarize_folder

    parser = argparse.ArgumentParser(prog="python -m experiments.report.preregister",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("pilot", type=Path, help="the pilot's runs (make reproduce's folder)")
    parser.add_argument("--pilot-only", action="store_true",
                        help="write docs/pilot.json only: the pilot judged again, before the "
                             "study is preregistered")
    args = parser.parse_args(argv)
    if not args.pilot.is_dir():
        print(f"error: {args.pilot} is not a folder of runs (run the pilot first: make "
              "reproduce REPRODUCE_DIR=outputs/pilot)", file=sys.stderr)
        return 1
    with before_preregistration():
        papers, _ = summarize_folder(args.pilot)
    missing = [p["key"] for p in papers if not p["seeds"]]
    if missing:
        print(f"error: the pilot has no finished run of {', '.join(missing)}", file=sys.stderr)
        return 1
    from experiments.report.summary import published

    pilot = [published(p) for p in papers]
    PILOT.write_text(json.dumps({"papers": pilot}, indent=1, default=str) + "\n")
    if args.pilot_only:
        print(f"{PILOT.relative_to(ROOT)}: the pilot's {sum(len(p['seeds']) for p in pilot)} "
              "jobs judged (no preregistration written)")
        return 0
    record = preregistration(pilot)
    PREREGISTRATION.write_text(json.dumps(record, indent=1) + "\n")
    total = sum(p["seeds"] for p in record["papers"].values())
    print(f"{PILOT.relative_to(ROOT)} and {PREREGISTRATION.relative_to(ROOT)}: "
          f"{total} confirmatory jobs from seed {FIRST_SEED}, about "
          f"{record['planned_job_minutes']:.0f} job-minutes at the pilot's speed (the budget: "
          f"{2 * BUDGET_MINUTES:.0f}); commit them before the confirmatory run (make "
          "reproduce STUDY=confirmatory)")
    for key, p in record["papers"].items():
        beyond = [c for c, need in p["claims"].items() if "beyond" in need["why"]]
        print(f"  {key:<12} {p['seeds']:>2} seeds" + (f"; beyond this study: "
                                                     f"{', '.join(beyond)}" if beyond else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
