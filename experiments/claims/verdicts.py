"""How a claim's condition, judged at each seed, becomes one verdict with its effect.

Three outcomes for a tested claim, so that "not shown" never reads as "false":

- **holds**: ``all``: the condition holds at every seed; ``mean_ci``: the paired difference's
  two-sided 95% t-interval over seeds lies on the claimed side of 0;
- **contradicted**: the evidence is against it: ``all``: the condition fails at a majority of
  the seeds; ``mean_ci``: the interval lies on the other side of 0;
- **inconclusive**: anything else (mixed seeds, an interval that spans 0, one seed for
  ``mean_ci``); the detail says why and, for an interval, how many seeds the observed effect
  and spread would need for it to clear 0.

Every judged claim also gets an **effect** with its interval over seeds, signed so that a
positive effect is on the claimed side: for ``a > b`` the paired difference ``a - b``, for a
threshold ``x >= 7`` the margin ``x - 7``, for ``x == c`` minus the distance ``|x - c|``; of a
conjunction, its binding comparison (the smallest relative margin). The relative effect
divides by the right-hand side's size where it is not 0, so that claims of different scales
share one axis in the report's forest plot.

A claim with ``sanity: true`` is an identity or a property of the implementation (a check
that cannot fail when the code is right): it is judged and shown, but does not count toward
the paper's verdict.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from common.errors import UserError
from experiments.claims.language import (
    ClaimSyntaxError,
    comparisons,
    evaluate,
    metric_names,
    parse,
    value,
)

HOLDS, CONTRADICTED, INCONCLUSIVE = "holds", "contradicted", "inconclusive"
NOT_TESTED, NOT_RUN = "not tested here", "not run"
JUDGED = (HOLDS, CONTRADICTED, INCONCLUSIVE)
PARTIAL = "partial"
MAX_SEEDS_NEEDED = 1000
INTERVAL_COMPARISONS = ("<", "<=", ">", ">=")


@dataclass
class Effect:
    """A claim's effect over seeds, positive on the claimed side."""

    label: str  # what is measured, e.g. "a - b" or "x - 7"
    per_seed: list[float]
    relative_per_seed: list[float] | None  # divided by |right-hand side|; None where it is 0
    mean: float = 0.0
    low: float | None = None  # the two-sided 95% t-interval (None with one seed)
    high: float | None = None
    relative_mean: float | None = None
    relative_low: float | None = None
    relative_high: float | None = None

    def __post_init__(self):
        self.mean, self.low, self.high = mean_interval(self.per_seed)
        if self.relative_per_seed is not None:
            self.relative_mean, self.relative_low, self.relative_high = mean_interval(
                self.relative_per_seed)

    def text(self) -> str:
        """``+0.12 [0.05, 0.19]`` (and the relative effect in % where there is one)."""
        out = f"{self.label} = {_signed(self.mean)}"
        if self.low is not None:
            out += f" [{_signed(self.low)}, {_signed(self.high)}]"
        if self.relative_mean is not None:
            out += f", {_signed(100 * self.relative_mean)}%"
        return out


@dataclass
class Verdict:
    verdict: str  # holds | contradicted | inconclusive | not tested here | not run
    detail: str  # what decided it (k of n seeds, the interval, the seeds it would need)
    per_seed: list[bool] = field(default_factory=list)
    effect: Effect | None = None
    seeds_needed: int | None = None  # inconclusive interval: seeds for it to clear 0


def _signed(x: float) -> str:
    return f"{x:+.3g}"


def t_quantile_975(dof: int) -> float:
    from scipy.stats import t

    return float(t.ppf(0.975, dof))


def mean_sd(values: Sequence[float]) -> tuple[float, float]:
    """The mean and the sample standard deviation (0 for one value)."""
    n = len(values)
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return mean, sd


def mean_interval(values: Sequence[float]) -> tuple[float, float | None, float | None]:
    """The mean and its two-sided 95% t-interval (None, None with fewer than two values)."""
    n = len(values)
    mean, sd = mean_sd(values)
    if n < 2:
        return mean, None, None
    half = t_quantile_975(n - 1) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def seeds_needed(mean: float, sd: float) -> int | None:
    """The smallest number of seeds whose 95% t-interval, at this mean and spread, excludes
    0 (None when the mean is 0; ``MAX_SEEDS_NEEDED + 1`` when more than that)."""
    if mean == 0 or not math.isfinite(mean) or not math.isfinite(sd):
        return None
    for n in range(2, MAX_SEEDS_NEEDED + 1):
        if t_quantile_975(n - 1) * sd / math.sqrt(n) < abs(mean):
            return n
    return MAX_SEEDS_NEEDED + 1


def _comparison_effect(node, runs: Sequence[Mapping[str, float]]) -> Effect:
    left, right = node.args
    lefts = [value(left, m) for m in runs]
    rights = [value(right, m) for m in runs]
    if node.op in (">", ">="):
        margins = [a - b for a, b in zip(lefts, rights, strict=True)]
    elif node.op in ("<", "<="):
        margins = [b - a for a, b in zip(lefts, rights, strict=True)]
    else:  # ==: how far from equality
        margins = [-abs(a - b) for a, b in zip(lefts, rights, strict=True)]
    relative = None
    if all(b != 0 and math.isfinite(b) for b in rights):
        relative = [d / abs(b) for d, b in zip(margins, rights, strict=True)]
    return Effect(_label(node), margins, relative)


def _label(node) -> str:
    def text(n) -> str:
        if n.op == "number":
            return f"{n.args[0]:g}"
        if n.op == "metric":
            return n.args[0]
        if n.op == "neg":
            return f"-{text(n.args[0])}"
        if n.op == "abs":
            return f"abs({text(n.args[0])})"
        return f"({text(n.args[0])} {n.op} {text(n.args[1])})"

    left, right = (text(a)[1:-1] if a.op in ("+", "-", "*", "/") else text(a)
                   for a in node.args)
    if node.op in (">", ">="):
        return f"{left} - {right}"
    if node.op in ("<", "<="):
        return f"{right} - {left}"
    return f"-|{left} - {right}|"


def effect_of(text: str, runs: Sequence[Mapping[str, float]]) -> Effect:
    """The claim's effect over ``runs``: its comparison's, or a conjunction's binding one."""
    effects = [_comparison_effect(node, runs) for node in comparisons(parse(text))]
    if len(effects) == 1:
        return effects[0]
    if all(e.relative_per_seed is not None for e in effects):
        return min(effects, key=lambda e: e.relative_mean)
    return min(effects, key=lambda e: e.mean)


def combine(text: str | None, over_seeds: str, runs: Sequence[Mapping[str, float]]
            ) -> Verdict:
    """The verdict of one claim over the metrics of its seeds' runs."""
    if text is None:
        return Verdict(NOT_TESTED, "no run here tests it (see its scale note)")
    if not runs:
        return Verdict(NOT_RUN, "no finished run")
    if over_seeds not in ("all", "mean_ci"):
        raise UserError(f"unknown over_seeds '{over_seeds}' (all, mean_ci)")
    node = parse(text)
    if over_seeds == "mean_ci" and node.op not in INTERVAL_COMPARISONS:
        raise ClaimSyntaxError(f"over_seeds: mean_ci needs one comparison a > b, not '{text}'")
    per_seed = [evaluate(node, m) for m in runs]
    effect = effect_of(text, runs)
    judge = _every_seed if over_seeds == "all" else _interval
    verdict, detail, needed = judge(per_seed, effect)
    return Verdict(verdict, detail, per_seed, effect, needed)


def _every_seed(per_seed: list[bool], effect: Effect) -> tuple[str, str, None]:
    n, held = len(per_seed), sum(per_seed)
    if held == n:
        return HOLDS, f"holds at {held} of {n} seeds", None
    if n - held > n / 2:
        return CONTRADICTED, f"fails at {n - held} of {n} seeds", None
    return INCONCLUSIVE, f"holds at {held} of {n} seeds, fails at {n - held}", None


def _interval(per_seed: list[bool], effect: Effect) -> tuple[str, str, int | None]:
    n = len(per_seed)
    if n < 2:
        state = "held" if per_seed[0] else "failed"
        return INCONCLUSIVE, (f"one seed (the condition {state} at it, effect "
                              f"{_signed(effect.mean)}); an interval needs at least two "
                              "seeds"), None
    interval = f"95% CI [{effect.low:.4g}, {effect.high:.4g}] over {n} seeds"
    if effect.low > 0:
        return HOLDS, f"{interval} above 0", None
    if effect.high < 0:
        return CONTRADICTED, f"{interval} below 0", None
    needed = seeds_needed(effect.mean, mean_sd(effect.per_seed)[1])
    if needed is None:
        why = "no effect at these seeds"
    elif needed > MAX_SEEDS_NEEDED:
        why = f"more than {MAX_SEEDS_NEEDED} seeds at this effect and spread"
    else:
        side = "above" if effect.mean > 0 else "below"
        why = f"{needed} seeds at this effect and spread would put it {side} 0"
    return INCONCLUSIVE, f"{interval} spans 0; {why}", needed


def paper_verdict(verdicts: Sequence[str]) -> str:
    """One badge for a paper from its (non-sanity) claims' verdicts: contradicted when one
    is, holds when every tested claim holds ("holds (n of m tested)" when some are not
    tested here), partial when some hold, inconclusive when none holds or is contradicted."""
    if any(v == NOT_RUN for v in verdicts):
        return NOT_RUN
    tested = [v for v in verdicts if v in JUDGED]
    if not tested:
        return NOT_TESTED
    if CONTRADICTED in tested:
        return CONTRADICTED
    held = tested.count(HOLDS)
    if held == len(tested):
        return HOLDS if held == len(verdicts) else f"{HOLDS} ({held} of {len(verdicts)} tested)"
    return PARTIAL if held else INCONCLUSIVE


def check_claims(key: str, claims: Sequence[Mapping], metrics: Mapping[str, float] | None = None
                 ) -> None:
    """``UserError`` naming the paper and the claim when a condition is not in the language
    or (given a run's ``metrics``) names a metric that run did not write."""
    for claim in claims:
        text = claim.get("holds_if")
        if text is None:
            continue
        try:
            node = parse(text)
            if claim.get("over_seeds") == "mean_ci" and node.op not in INTERVAL_COMPARISONS:
                raise ClaimSyntaxError(f"over_seeds: mean_ci needs one comparison a > b, "
                                       f"not '{text}'")
        except ClaimSyntaxError as err:
            raise UserError(f"paper {key}, claim {claim.get('id')}: {err}") from None
        if metrics is not None:
            unknown = sorted(metric_names(node) - set(metrics))
            if unknown:
                raise UserError(f"paper {key}, claim {claim.get('id')}: no metric "
                                f"{', '.join(unknown)} in this run's metrics.json")
