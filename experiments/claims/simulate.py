"""The verdict rules measured on planted data whose truth is known.

    python -m experiments.claims.simulate                     # print the table
    python -m experiments.claims.simulate --write docs/verdicts.md

Each scenario draws per-seed values of a claim's effect (seeds that are means of noisy
instances, a margin the run measures) from a known truth, judges them with the project's own
``judge`` at 3, 5 and 10 seeds, and counts how often each verdict comes out, and how often
the rule's interval covers the true effect; a badge scenario judges a paper of several
claims and counts its badge (``paper_verdict``). Under a null truth "holds" and
"contradicted" are false alarms; under a true effect "holds" is the power. The draws come
from one named stream per scenario and seed count, so the table is the same on every
machine.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from common.streams import Streams
from experiments.claims.decide import judge_runs
from experiments.claims.verdicts import CONTRADICTED, HOLDS, judge, paper_verdict

SEED_COUNTS = (3, 5, 10)
REPLICATES = 2000
TABLE_START, TABLE_END = "<!-- simulation table -->", "<!-- end of simulation table -->"


@dataclass(frozen=True)
class Scenario:
    name: str
    rule: str  # the claim's rule, as in paper.claims
    truth: str  # what is planted, in words
    expected: str  # holds | contradicted | neither: the correct verdict
    draw: Callable  # (rng, seeds) -> runs
    claim: dict
    true_effect: float | None = None  # for coverage
    through_runs: bool = False  # judged as the report does (judge_runs: missing values)
    badge: int = 0  # a paper of this many claims (claim's a{k} for each k): its badge


def _runs(effects) -> list[dict]:
    return [{"a": float(e), "b": 0.0} for e in effects]


def _normal(mu: float):
    return lambda rng, n: _runs(mu + rng.standard_normal(n))


def _heavy(mu: float):
    """Student t with 3 degrees of freedom, scaled to unit variance."""
    return lambda rng, n: _runs(mu + rng.standard_t(3, n) / np.sqrt(3.0))


def _ties(p_ahead: float, p_behind: float):
    """A share of 30 tasks: per seed one task more, one fewer, or the same."""
    def draw(rng, n):
        u = rng.random(n)
        return _runs(np.where(u < p_ahead, 1 / 30, np.where(u < p_ahead + p_behind, -1 / 30,
                                                             0.0)))
    return draw


def _instances(mu: float, between: float = 1.0, within: float = 3.0, per_seed: int = 30):
    """Seeds with an effect of their own (sd ``between``), each the mean of ``per_seed``
    instances with noise (sd ``within``) on top."""
    def draw(rng, n):
        theta = mu + between * rng.standard_normal(n)
        return _runs([t + within * rng.standard_normal(per_seed).mean() for t in theta])
    return draw


def _conjunction(parts: int):
    """``parts`` comparisons, every one a null effect (independent normal per seed)."""
    def draw(rng, n):
        return [{**{f"a{k}": float(rng.standard_normal()) for k in range(parts)}, "b": 0.0}
                for _ in range(n)]
    return draw


def _failure_share(trials: int = 5, rate: float = 0.1):
    """Failures over ``trials`` trials a seed, the true rate at the claim's bound."""
    return lambda rng, n: [{"a": float(rng.binomial(trials, rate)) / trials, "b": rate}
                           for _ in range(n)]


def _unequal_instances(mu: float = 0.0):
    """Seeds of 3 to 100 instances (sd 3) and a seed effect of their own (sd 1)."""
    def draw(rng, n):
        theta = mu + rng.standard_normal(n)
        return _runs([t + 3 * rng.standard_normal(int(rng.integers(3, 101))).mean()
                      for t in theta])
    return draw


def _nan_at_a_seed(mu: float = -3.0):
    """A clear effect against the claim at every seed but one, where the metric is NaN."""
    def draw(rng, n):
        runs = _runs(mu + rng.standard_normal(n))
        runs[int(rng.integers(n))]["a"] = float("nan")
        return [{"metrics": r, "seed": i} for i, r in enumerate(runs)]
    return draw


def _spurious(p: float):
    """Each seed reports an instance with probability ``p``, none of them real."""
    def draw(rng, n):
        return [{"metrics": {"a": float(x), "b": 1.0, "real": 0.0}, "seed": i}
                for i, x in enumerate(rng.random(n) < p)]
    return draw


def real_instance(run) -> bool:
    """The re-verification the spurious-instance scenario's claim names."""
    return run["metrics"]["real"] == 1.0


def _exists(p: float):
    """A counterexample found at each seed with probability ``p``."""
    return lambda rng, n: [{"a": float(x), "b": 1.0} for x in rng.random(n) < p]


def _measured_margin(difference: float, margin: float = 1.0, margin_sd: float = 0.5):
    """A difference ``a - b`` (sd 1 a seed) and a margin the run measures at each seed
    (mean ``margin``, sd ``margin_sd``, independent of the difference)."""
    return lambda rng, n: [{"a": float(difference + d), "b": 0.0, "m": float(margin + e)}
                           for d, e in zip(rng.standard_normal(n),
                                           margin_sd * rng.standard_normal(n), strict=True)]


COMPARE = {"holds_if": "a > b", "rule": "compare"}
SIGN = {"holds_if": "a > b", "rule": "compare", "test": "sign"}
EQUIVALENT = {"holds_if": "a == b", "rule": "equivalence", "margin": 1.0}
EXISTS = {"holds_if": "a == b", "rule": "exists"}
BELOW = {"holds_if": "a < b", "rule": "compare"}
EXISTS_VERIFIED = {**EXISTS, "verify": "experiments.claims.simulate:real_instance"}
MEASURED = {"holds_if": "a == b", "rule": "equivalence", "margin_metric": "m"}
NO_WORSE_MEASURED = {"holds_if": "a >= b", "rule": "equivalence", "margin_metric": "m"}


def _all_parts(parts: int) -> dict:
    return {"holds_if": " and ".join(f"a{k} > b" for k in range(parts)), "rule": "compare"}


SCENARIOS = (
    Scenario("null", "compare", "effect 0, normal", "neither", _normal(0.0), COMPARE, 0.0),
    Scenario("effect 1 sd", "compare", "effect +1 sd", HOLDS, _normal(1.0), COMPARE, 1.0),
    Scenario("effect 2 sd", "compare", "effect +2 sd", HOLDS, _normal(2.0), COMPARE, 2.0),
    Scenario("heavy tails", "compare", "effect 0, t(3) noise", "neither", _heavy(0.0), COMPARE,
             0.0),
    Scenario("ties", "compare", "0 or +-1/30 a seed, no effect", "neither",
             _ties(0.2, 0.2), COMPARE, 0.0),
    Scenario("ties, sign test", "compare + sign", "0 or +-1/30 a seed, no effect", "neither",
             _ties(0.2, 0.2), SIGN),
    Scenario("ties with an effect, sign test", "compare + sign", "ahead 0.7, behind 0.05",
             HOLDS, _ties(0.7, 0.05), SIGN),
    Scenario("instances, null", "compare (seed means)",
             "effect 0; seeds sd 1, 30 instances sd 3", "neither", _instances(0.0),
             COMPARE, 0.0),
    Scenario("instances, effect", "compare (seed means)",
             "effect +1; seeds sd 1, 30 instances sd 3", HOLDS, _instances(1.0), COMPARE,
             1.0),
    Scenario("equivalent", "equivalence", "difference 0, margin 1 sd", HOLDS, _normal(0.0),
             EQUIVALENT, 0.0),
    Scenario("at the margin", "equivalence", "difference 1 sd = the margin", "neither",
             _normal(1.0), EQUIVALENT, 1.0),
    Scenario("beyond the margin", "equivalence", "difference 3 sd, margin 1", CONTRADICTED,
             _normal(3.0), EQUIVALENT, 3.0),
    Scenario("measured margin, equivalent", "equivalence (measured margin)",
             "difference 0; margin 1 measured with sd 0.5", HOLDS, _measured_margin(0.0),
             MEASURED, 0.0),
    Scenario("measured margin, at the margin", "equivalence (measured margin)",
             "difference 1 = the margin's mean, measured with sd 0.5", "neither",
             _measured_margin(1.0), MEASURED, 1.0),
    Scenario("measured margin, no worse at the margin", "equivalence (measured margin)",
             "a >= b: difference -1 = minus the margin's mean, measured with sd 0.5",
             "neither", _measured_margin(-1.0), NO_WORSE_MEASURED, -1.0),
    Scenario("a counterexample at 30% of seeds", "exists", "exists", HOLDS, _exists(0.3),
             EXISTS),
    Scenario("no counterexample", "exists", "none exists", "neither", _exists(0.0), EXISTS),
    *(Scenario(f"conjunction of {k} null parts", "compare (and)", "every part effect 0",
               "neither", _conjunction(k), _all_parts(k)) for k in (3, 5, 7)),
    Scenario("failure share at its bound", "compare", "5 trials a seed, rate 0.1 = the bound",
             "neither", _failure_share(), BELOW),
    Scenario("unequal instance counts, null", "compare (seed means)",
             "effect 0; seeds sd 1, 3 to 100 instances sd 3", "neither", _unequal_instances(),
             COMPARE, 0.0),
    Scenario("NaN at a seed", "compare (missing)", "effect -3 sd, NaN at one seed",
             "neither", _nan_at_a_seed(), COMPARE, through_runs=True),
    Scenario("spurious instances, re-verified", "exists (verify)",
             "5% of seeds report one, none real", "neither", _spurious(0.05),
             EXISTS_VERIFIED, through_runs=True),
    *(Scenario(f"paper of {k} null claims", "paper badge", "every claim's effect 0",
               "neither", _conjunction(k), COMPARE, badge=k) for k in (3, 5, 7)),
)


def _verdict(scenario: Scenario, runs):
    """The scenario's verdict word (its badge for a paper of claims) and its effect."""
    if scenario.badge:
        claims = [judge({"holds_if": f"a{k} > b", "rule": "compare"}, runs)
                  for k in range(scenario.badge)]
        return paper_verdict([(v.verdict, v.p_against) for v in claims]).word, None
    verdict = (judge_runs(scenario.claim, runs) if scenario.through_runs
               else judge(scenario.claim, runs))
    return verdict.verdict, verdict.effect


def measure(scenario: Scenario, seeds: int, replicates: int = REPLICATES) -> dict[str, float]:
    """Shares of holds and contradicted verdicts, and the interval's coverage of the true
    effect (where the rule has an interval), over ``replicates`` draws."""
    rng = Streams(0, fixed=True).numpy(f"verdict simulation/{scenario.name}/{seeds}")
    held = against = covered = intervals = 0
    for _ in range(replicates):
        word, effect = _verdict(scenario, scenario.draw(rng, seeds))
        held += word == HOLDS
        against += word == CONTRADICTED
        if scenario.true_effect is not None and effect is not None and effect.low is not None:
            intervals += 1
            covered += effect.low <= scenario.true_effect <= effect.high
    return {"holds": held / replicates, "contradicted": against / replicates,
            "coverage": covered / intervals if intervals else float("nan"),
            "replicates": replicates}


def measure_all(replicates: int = REPLICATES) -> dict[tuple[str, int], dict[str, float]]:
    return {(s.name, n): measure(s, n, replicates) for s in SCENARIOS for n in SEED_COUNTS}


def table(results: dict[tuple[str, int], dict[str, float]]) -> str:
    """A markdown table: per scenario and seed count, P(holds), P(contradicted) and the
    interval's coverage."""
    head = " | ".join(f"{n} seeds: holds / contr. / cover." for n in SEED_COUNTS)
    lines = [f"| rule | scenario (truth) | correct verdict | {head} |",
             "|---|---|---|" + "---|" * len(SEED_COUNTS)]
    for s in SCENARIOS:
        cells = []
        for n in SEED_COUNTS:
            r = results[(s.name, n)]
            cover = "-" if r["coverage"] != r["coverage"] else f"{r['coverage']:.3f}"
            cells.append(f"{r['holds']:.3f} / {r['contradicted']:.3f} / {cover}")
        lines.append(f"| {s.rule} | {s.name} ({s.truth}) | {s.expected} | "
                     + " | ".join(cells) + " |")
    replicates = {r["replicates"] for r in results.values()}
    errors = ", ".join(f"{math.sqrt(p * (1 - p) / min(replicates)):.4f} at a rate of {p:g}"
                       for p in (0.05, 0.5))
    lines.append(f"\n{'/'.join(map(str, sorted(replicates)))} replicates a cell; the Monte "
                 f"Carlo standard error of a rate: {errors}.")
    return "\n".join(lines)


def write(path: Path, text: str) -> None:
    """Replace the table between the markers of ``path``."""
    doc = path.read_text()
    pattern = re.compile(re.escape(TABLE_START) + ".*?" + re.escape(TABLE_END), re.S)
    if not pattern.search(doc):
        raise ValueError(f"{path} has no {TABLE_START} ... {TABLE_END} markers")
    path.write_text(pattern.sub(lambda _: f"{TABLE_START}\n{text}\n{TABLE_END}", doc))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", type=Path, help="a markdown file with the table markers")
    args = parser.parse_args(argv)
    text = table(measure_all())
    print(text)
    if args.write:
        write(args.write, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
