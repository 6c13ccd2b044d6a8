"""Where a claim meets its runs: the one function that turns a claim and the runs of its
seeds into a verdict (:func:`judge_runs`), and the one that says whether a single run's
metrics satisfy its condition (:func:`seed_condition`). The report, the sweep summaries and
a job's closing line all call these, so the same runs get the same verdict everywhere.

A run here is a dict with ``metrics`` (metrics.json), and optionally ``seed`` and
``folder`` (where an existence claim's ``verify`` re-reads the instance it reported).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from experiments.claims.language import (
    evaluate,
    metric_names,
    parse,
    parse_expression,
)
from experiments.claims.verdicts import (
    MISSING,
    NOT_APPLICABLE,
    NOT_RUN,
    NOT_TESTED,
    Verdict,
    judge,
)

FAILS = "fails"  # one seed's condition is false (a seed's line, not a verdict)


def rule_of(claim: Mapping) -> str:
    """The claim's rule; ``compare`` when it declares none."""
    return str(claim.get("rule") or "compare")


def claim_metrics(claim: Mapping) -> set[str]:
    """Every metric the claim reads: its condition's and its measured margin's."""
    names = metric_names(parse(claim["holds_if"])) if claim.get("holds_if") else set()
    if claim.get("margin_metric"):
        names |= metric_names(parse_expression(str(claim["margin_metric"])))
    return names


def usable_number(value) -> bool:
    """A metric value a rule can use: a finite int or float (not a bool, None or NaN)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and \
        math.isfinite(value)


def missing_at(claim: Mapping, runs: Sequence[Mapping]) -> list[str]:
    """Per seed where a metric the claim reads is absent or not a finite number: ``seed 3:
    x (absent), y (nan)``."""
    gaps = []
    for i, run in enumerate(runs):
        metrics = run["metrics"]
        bad = [f"{n} ({'absent' if n not in metrics else metrics[n]})"
               for n in sorted(claim_metrics(claim)) if not usable_number(metrics.get(n))]
        if bad:
            gaps.append(f"seed {run.get('seed', i)}: {', '.join(bad)}")
    return gaps


def judge_runs(claim: Mapping, runs: Sequence[Mapping]) -> Verdict:
    """The verdict of ``claim`` over ``runs`` (one per seed): not tested here (no condition),
    not run (no run), not applicable here (the runs' configuration writes none of its
    metrics), missing (a metric absent or not finite at some seed: never a counterexample,
    a tie or an instance), else the claim's rule on the metrics."""
    rule = rule_of(claim)
    if claim.get("holds_if") is None:
        return Verdict(NOT_TESTED, "no run here tests it (see its scale note)", rule=rule)
    if not runs:
        return Verdict(NOT_RUN, "no finished run", rule=rule)
    names = claim_metrics(claim)
    if not any(names & set(run["metrics"]) for run in runs):
        return Verdict(NOT_APPLICABLE, "these runs write none of its metrics", rule=rule)
    gaps = missing_at(claim, runs)
    if gaps:
        return Verdict(MISSING, "missing at " + "; ".join(gaps), rule=rule)
    verified = ([verifier(claim)(run) for run in runs]
                if rule == "exists" and claim.get("verify") else None)
    return judge(claim, [run["metrics"] for run in runs], verified)


def verifier(claim: Mapping):
    """The claim's ``verify`` function (``module:function``): re-checks a reported instance
    from the run's own files, independently of the run's code; False when it cannot."""
    import importlib

    module, _, name = str(claim["verify"]).partition(":")
    check = getattr(importlib.import_module(module), name)

    def verified(run: Mapping) -> bool:
        try:
            return bool(check(run))
        except (OSError, ValueError, KeyError):  # no saved instance, or an unreadable one
            return False

    return verified


def seed_condition(claim: Mapping, metrics: Mapping, required: set[str] = frozenset()) -> str:
    """One run's line for a claim: its condition holds or fails at this seed, or the claim
    is not tested here, not applicable here (the configuration writes none of its metrics,
    and none of them is required of it), or missing (a metric it reads is absent or not
    finite)."""
    if claim.get("holds_if") is None:
        return NOT_TESTED
    names = claim_metrics(claim)
    if not names & set(metrics) and not names & set(required):
        return NOT_APPLICABLE
    if missing_at(claim, [{"metrics": metrics}]):
        return MISSING
    return "holds" if evaluate(parse(claim["holds_if"]), metrics) else FAILS
