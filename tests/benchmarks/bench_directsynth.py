"""directsynth: where the default's time goes. Side by side in one process: parsing a task
with the ``pddl`` package's own function (a new LALR parser per file) against the grammar
shared by strips.ground; then the default's stages (the directness loop, sample and select,
the test evaluation) per domain, one process, domains in turn, at the default's settings."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

from _timing import best_of

from data.planning import SHIPPED

DOMAINS = ["blocksworld", "childsnack", "rovers"]  # fast, larger test tasks, slowest baseline


def parsing() -> None:
    from pddl import parse_problem
    from pddl.parser.problem import ProblemParser

    from methods.directsynth.strips import _parse

    problems = sorted((SHIPPED / "rovers" / "training" / "easy").glob("*.pddl"))[:10]
    ours = best_of(3, lambda: [_parse(ProblemParser, p) for p in problems])
    package = best_of(3, lambda: [parse_problem(str(p)) for p in problems])
    print(f"parse 10 rovers tasks: pddl.parse_problem {package:.2f} s, shared grammar "
          f"{ours:.2f} s ({package / ours:.1f}x)")


def stages(output: Path) -> None:
    """The default (seed 0) on DOMAINS, domains in turn in one process; its domains table
    holds each stage's seconds."""
    root = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "run.py", "+paper=directsynth", "protocol.workers=1",
                    f"dataset.domains=[{','.join(DOMAINS)}]", f"hydra.run.dir={output}"],
                   cwd=root, check=True, capture_output=True)
    print(f"default stages, seconds (seed 0, one process): {'domain':<12} {'loop':>6} "
          f"{'baseline':>8} {'test':>6}")
    with open(output / "tables" / "domains.csv") as table:
        for r in csv.DictReader(table):
            print(f"{'':<47}{r['domain']:<12} {float(r['seconds_ours']):>6.1f} "
                  f"{float(r['seconds_baseline']):>8.1f} {float(r['seconds_test']):>6.1f}")


if __name__ == "__main__":
    import tempfile

    parsing()
    with tempfile.TemporaryDirectory() as folder:
        stages(Path(folder) / "run")
