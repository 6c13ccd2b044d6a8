"""How a claim's condition, measured at each seed, becomes one verdict with its effect.

Each claim declares its **rule** (``rule:`` in ``paper.claims``), one per kind of claim, so
that the evidence a verdict needs is the same across papers (docs/verdicts.md says why each
rule is what it is and measures its error rates by simulation, ``simulate.py``):

- ``compare``, a directional comparison (``a > b``, ``x >= 7``; a conjunction of them): each
  comparison's paired effect gets the two-sided 95% t-interval of its per-seed values (the
  seed is the independent replicate: a metric that is a mean over instances enters as its
  seed's mean, which keeps the interval at its level whatever the instance counts).
  **holds** when the interval lies above 0,
  **contradicted** when it lies below, **inconclusive** otherwise, so ties never count
  against a claim. ``test: sign`` (a coarse metric, e.g. a share of 10 tasks) decides by the
  exact two-sided binomial test on the seeds whose values differ instead;
- ``exact``, an identity or a count that must be 0 (k of n seeds, shown as k/n): holds at
  n of n, contradicted at any seed where it fails (a failure is a verified counterexample);
- ``equivalence`` ("matches", "keeps", "no worse"), with a margin, declared (``margin``) or
  measured by the run (``margin_metric``, per seed): ``a >= b`` (``a <= b``) holds when the
  one-sided 5% test says ``a - b + margin`` (``b - a + margin``) is above 0, ``a == b`` when
  both ``margin + (a - b)`` and ``margin - (a - b)`` are (two one-sided tests); each test
  is the 90% t-interval of the per-seed values, so a measured margin's own sampling error is
  in the interval (it varies with the seed like the difference does); contradicted when a
  side's interval lies wholly below 0;
- ``exists`` ("not always", "does not elicit", "can change"): holds when a verified instance
  was found at any seed; otherwise not shown (inconclusive), never contradicted.

"Contradicted" always means that the interval (or the test) points the other way. A
conjunction holds when every comparison does, is contradicted when one is under Holm's
family-wise control across its comparisons, and names the comparisons that decided it. An
interval-judged claim gets an **effect** signed so that a positive value is on the claimed
side (``a - b`` for ``a > b``, ``x - 7`` for ``x >= 7``; for a conjunction the comparison that
decided the verdict); the relative effect (a ratio of means) divides it and its interval by
the size of the right-hand side's mean, where that mean is clear of 0. A counted rule
(``exact``, ``exists``) shows its count of seeds, not an effect.

A paper's badge is contradicted only when one of its counted claims is contradicted under
Holm's control across those claims (:func:`paper_verdict`), so that a paper of several null
claims does not read "contradicted" more often than a single claim would.

A claim with ``sanity: true`` is an identity or a property of the implementation (a check
that cannot fail when the code is right): it is judged and shown, but does not count toward
the paper's verdict.
"""

from __future__ import annotations

import functools
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
    parse_expression,
    value,
)

# the verdict words, every one there is (a seed's "holds" / "fails" is a condition)
HOLDS, CONTRADICTED, INCONCLUSIVE = "holds", "contradicted", "inconclusive"
NOT_TESTED, NOT_RUN, NOT_APPLICABLE = "not tested here", "not run", "not applicable here"
MISSING = "missing"  # a metric absent or not finite at some seed
EXPLORATORY = "exploratory"  # changed after its preregistration: not counted
JUDGED = (HOLDS, CONTRADICTED, INCONCLUSIVE)
PARTIAL = "partial"
VERDICTS = (*JUDGED, NOT_TESTED, NOT_RUN, NOT_APPLICABLE, MISSING)
RULES = ("compare", "exact", "equivalence", "exists")
TESTS = ("interval", "sign")
ORDERED = ("<", "<=", ">", ">=")
ALPHA = 0.05


@dataclass
class Effect:
    """One comparison's effect over seeds, positive on the claimed side, and its interval:
    the t-interval of the per-seed values."""

    label: str  # what is measured, e.g. "a - b" or "x - 7"
    per_seed: list[float]
    # the relative effect's denominator: the size of the right-hand side's mean over seeds;
    # None where that mean is not clear of 0 (below its own spread over seeds)
    reference: float | None
    level: float = 0.95  # of the interval (0.90 for an equivalence's two one-sided tests)
    mean: float = 0.0
    low: float | None = None  # None with one seed
    high: float | None = None
    relative_mean: float | None = None
    relative_low: float | None = None
    relative_high: float | None = None
    method: str = ""

    def __post_init__(self):
        self.mean, self.low, self.high = mean_interval(self.per_seed, self.level)
        self.method = f"t over {len(self.per_seed)} seeds"
        self.set_relative()

    def set_relative(self) -> None:
        """The effect and its interval as a share of the reference (a ratio of means: the
        interval the verdict used, rescaled)."""
        if self.reference is None:
            self.relative_mean = self.relative_low = self.relative_high = None
            return
        self.relative_mean = self.mean / self.reference
        self.relative_low = None if self.low is None else self.low / self.reference
        self.relative_high = None if self.high is None else self.high / self.reference

    def text(self) -> str:
        """``a - b = +0.12 [+0.05, +0.19], +12%`` (the interval at its level)."""
        out = f"{self.label} = {_signed(self.mean)}"
        if self.low is not None:
            level = "" if self.level == 0.95 else f" {self.level:.0%}"
            out += f"{level} [{_signed(self.low)}, {_signed(self.high)}]"
        if self.relative_mean is not None:
            out += f", {_signed(100 * self.relative_mean)}%"
        return out


@dataclass
class Part:
    """One comparison of a claim: its verdict and effect, and the p-value of the test that
    its effect lies on the other side (for the family-wise controls of a conjunction and of
    a paper's badge)."""

    verdict: str
    detail: str
    effect: Effect
    p_against: float = 1.0


@dataclass
class Verdict:
    verdict: str  # holds | contradicted | inconclusive | not tested here | not run
    detail: str  # what decided it (k of n seeds, the interval, the test)
    per_seed: list[bool] = field(default_factory=list)  # the condition at each seed
    effect: Effect | None = None  # the deciding comparison's (interval rules only)
    rule: str = "compare"
    parts: list[Part] = field(default_factory=list)  # every comparison, for a conjunction
    # the p-value against the claim, Holm-adjusted across a conjunction's comparisons (0 for
    # a counterexample or a deterministic value against it; 1 where nothing points against)
    p_against: float = 1.0


def _signed(x: float) -> str:
    return f"{x:+.3g}"


@functools.lru_cache(maxsize=4096)
def t_quantile(dof: int, level: float = 0.95) -> float:
    from scipy.stats import t

    return float(t.ppf(0.5 + level / 2, dof))


def mean_sd(values: Sequence[float]) -> tuple[float, float]:
    """The mean and the sample standard deviation (0 for one value)."""
    n = len(values)
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return mean, sd


def mean_interval(values: Sequence[float], level: float = 0.95
                  ) -> tuple[float, float | None, float | None]:
    """The mean and its two-sided t-interval at ``level`` (None, None for one value)."""
    n = len(values)
    mean, sd = mean_sd(values)
    if n < 2:
        return mean, None, None
    half = t_quantile(n - 1, level) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def t_p_value(statistic: float, dof: int, two_sided: bool = True) -> float:
    """The t-test's p-value (upper tail when one-sided)."""
    from scipy.stats import t

    tail = float(t.sf(abs(statistic) if two_sided else statistic, dof))
    return min(1.0, 2 * tail) if two_sided else tail


def no_spread(values: Sequence[float]) -> bool:
    """Every seed gave the same value (up to rounding)."""
    return max(values) - min(values) <= 1e-12 * max(1.0, max(abs(v) for v in values))


# -- effects -------------------------------------------------------------------------------

def _margins(node, runs: Sequence[Mapping[str, float]]) -> tuple[list, list, list]:
    left, right = node.args
    lefts = [value(left, m) for m in runs]
    rights = [value(right, m) for m in runs]
    if node.op in (">", ">="):
        margins = [a - b for a, b in zip(lefts, rights, strict=True)]
    elif node.op in ("<", "<="):
        margins = [b - a for a, b in zip(lefts, rights, strict=True)]
    else:  # ==: for an equivalence, the signed difference; otherwise how far from equality
        margins = [a - b for a, b in zip(lefts, rights, strict=True)]
    return margins, lefts, rights


def comparison_effect(node, runs: Sequence[Mapping[str, float]], level: float = 0.95,
                      signed_equality: bool = False) -> Effect:
    margins, _, rights = _margins(node, runs)
    if node.op == "==" and not signed_equality:
        margins = [-abs(m) for m in margins]
    return Effect(_label(node, signed_equality), margins, reference_size(rights), level)


def reference_size(rights: Sequence[float]) -> float | None:
    """|mean| of the right-hand side over seeds, or None where it is not clear of 0: zero,
    not finite, or smaller than its own standard deviation over the seeds (a percentage of a
    reference that may be 0 means nothing)."""
    if not rights or not all(math.isfinite(b) for b in rights):
        return None
    mean, sd = mean_sd(rights)
    return abs(mean) if mean != 0 and abs(mean) > sd else None


def _label(node, signed_equality: bool = False) -> str:
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
    if node.op in (">", ">=") or (node.op == "==" and signed_equality):
        return f"{left} - {right}"
    if node.op in ("<", "<="):
        return f"{right} - {left}"
    return f"-|{left} - {right}|"


# -- the rules -----------------------------------------------------------------------------

def _interval_part(effect: Effect, test: str, per_seed: list[float],
                   deterministic: bool = False) -> Part:
    n = len(per_seed)
    if test == "sign":
        return _sign_part(effect, per_seed)
    if n < 2:
        return Part(INCONCLUSIVE, f"one seed (effect {_signed(effect.mean)}): an interval "
                    "needs at least two", effect)
    if all(v == 0 for v in per_seed):
        return Part(INCONCLUSIVE, f"tied at all {n} seeds: no difference to judge", effect)
    if no_spread(per_seed):
        return _without_spread(effect, deterministic, lambda v: v > 0, lambda v: v < 0)
    interval = f"95% CI [{effect.low:.4g}, {effect.high:.4g}] ({effect.method})"
    se = (effect.high - effect.low) / 2 / t_quantile(n - 1)
    p_against = t_p_value(effect.mean / se, n - 1) if effect.mean < 0 and se > 0 else 1.0
    if effect.low > 0:
        return Part(HOLDS, f"{interval} above 0", effect)
    if effect.high < 0:
        return Part(CONTRADICTED, f"{interval} below 0", effect, p_against)
    return Part(INCONCLUSIVE, f"{interval} spans 0", effect, p_against)


def _without_spread(effect: Effect, deterministic: bool, claimed, against) -> Part:
    """Every seed gave the same value: a deterministic arm (``deterministic: true``) is
    judged on that value; a stochastic one has no spread to judge (its interval would have
    width 0, and any difference, even 1e-12, would decide)."""
    n, value = len(effect.per_seed), effect.per_seed[0]
    if not deterministic:
        return Part(INCONCLUSIVE, f"the same value at all {n} seeds: no spread to judge (an "
                    "arm that ignores the seed declares deterministic: true)", effect)
    where = f"deterministic: {effect.label} = {_signed(value)} at every seed"
    if claimed(value):
        return Part(HOLDS, where, effect)
    if against(value):
        return Part(CONTRADICTED, where, effect, 0.0)
    return Part(INCONCLUSIVE, where + " (a tie)", effect)


def _sign_part(effect: Effect, per_seed: list[float]) -> Part:
    from scipy.stats import binomtest

    ahead = sum(v > 0 for v in per_seed)
    behind = sum(v < 0 for v in per_seed)
    untied = ahead + behind
    tally = (f"ahead at {ahead}, behind at {behind}, tied at {len(per_seed) - untied} of "
             f"{len(per_seed)} seeds")
    if untied == 0:
        return Part(INCONCLUSIVE, f"{tally}: no untied seed", effect)
    p = binomtest(ahead, untied, 0.5).pvalue
    test = f"{tally}; exact sign test on the untied seeds p = {p:.3g}"
    p_against = p if behind > ahead else 1.0
    if p < ALPHA:
        return Part(HOLDS if ahead > behind else CONTRADICTED, test, effect, p_against)
    return Part(INCONCLUSIVE, test, effect, p_against)


def _equivalence_part(node, effect: Effect, margins: Sequence[float],
                      deterministic: bool = False) -> Part:
    """``effect``: the per-seed difference d, positive on the claimed side (``a - b`` for
    ``>=`` and ``==``, ``b - a`` for ``<=``); ``margins``: the margin at each seed (the same
    at every seed where it is declared). Each side's per-seed values (``margin + d``, and for
    ``==`` also ``margin - d``) must be above 0 by a one-sided 5% t-test (the lower end of
    their 90% interval); a side whose interval lies wholly below 0 contradicts."""
    n = len(effect.per_seed)
    if n < 2:
        return Part(INCONCLUSIVE, "one seed: an equivalence needs an interval", effect)
    d = effect.per_seed
    sides = {f"{effect.label} + margin": [m + x for m, x in zip(margins, d, strict=True)]}
    if node.op == "==":
        sides[f"margin - ({effect.label})"] = [m - x for m, x in zip(margins, d, strict=True)]
    margin = sum(margins) / n
    measured = not no_spread(margins)
    shown = (f"margin {margin:.4g}" + (" (measured: the mean of its per-seed values)"
                                       if measured else ""))
    if all(no_spread(v) for v in sides.values()):
        values = {name: v[0] for name, v in sides.items()}
        where = ", ".join(f"{name} = {_signed(v)}" for name, v in values.items())
        if not deterministic:
            return Part(INCONCLUSIVE, f"the same value at all {n} seeds ({where}): no spread "
                        "to judge (an arm that ignores the seed declares deterministic: true)",
                        effect)
        if all(v > 0 for v in values.values()):
            return Part(HOLDS, f"deterministic: {where} at every seed; {shown}", effect)
        if any(v < 0 for v in values.values()):
            return Part(CONTRADICTED, f"deterministic: {where} at every seed; {shown}",
                        effect, 0.0)
        return Part(INCONCLUSIVE, f"deterministic: {where} (a tie); {shown}", effect)
    tests, lows, highs, p_against = [], [], [], 1.0
    for name, values in sides.items():
        mean, low, high = mean_interval(values, 0.90)
        se = (high - low) / 2 / t_quantile(n - 1, 0.90)
        p_against = min(p_against, t_p_value(-mean / se, n - 1, two_sided=False)
                        if se > 0 else float(mean >= 0))
        tests.append(f"{name} 90% CI [{low:.4g}, {high:.4g}]")
        lows.append(low)
        highs.append(high)
    interval = (f"{effect.label} 90% CI [{effect.low:.4g}, {effect.high:.4g}] "
                f"({effect.method}), {shown}; {'; '.join(tests)}")
    if all(low > 0 for low in lows):
        return Part(HOLDS, f"{interval}: inside the margin", effect, p_against)
    if any(high < 0 for high in highs):
        return Part(CONTRADICTED, f"{interval}: beyond the margin", effect, p_against)
    return Part(INCONCLUSIVE, f"{interval}: not shown inside the margin", effect, p_against)


def holm_rejected(parts: list[Part], alpha: float = ALPHA) -> list[Part]:
    """The parts whose "against" test Holm's step-down procedure rejects at family-wise
    level ``alpha`` (Holm 1979): the smallest p against alpha / k, the next against
    alpha / (k - 1), ..., stopping at the first that is not rejected. Only parts
    contradicted at their own level qualify. (statsmodels' ``multipletests`` gives the same
    rejections, a test checks, but costs a hundred times more in the power simulation's
    inner loop.)"""
    ordered = sorted(parts, key=lambda p: p.p_against)
    rejected = []
    for i, part in enumerate(ordered):
        if part.p_against > alpha / (len(parts) - i) or part.verdict != CONTRADICTED:
            break
        rejected.append(part)
    return rejected


def _combine_parts(parts: list[Part]) -> tuple[str, str, Effect]:
    """A conjunction: holds when every part holds (each at its own level: all must), is
    contradicted when a part is contradicted under a family-wise control across the parts
    (Holm), so that k null parts do not give k chances of a false "contradicted"; the
    detail names the parts that decided it."""
    if len(parts) == 1:
        return parts[0].verdict, parts[0].detail, parts[0].effect
    contradicted = holm_rejected(parts)
    for part in parts:  # against at its own level, but not across the parts
        if part.verdict == CONTRADICTED and part not in contradicted:
            part.verdict = INCONCLUSIVE
            part.detail += f"; not across the {len(parts)} comparisons (Holm)"
    open_parts = [p for p in parts if p.verdict != HOLDS]
    if contradicted:
        deciding, verdict = contradicted, CONTRADICTED
    elif open_parts:
        deciding, verdict = open_parts, INCONCLUSIVE
    else:
        deciding, verdict = parts, HOLDS
    detail = "; ".join(f"{p.effect.label}: {p.verdict}, {p.detail}" for p in deciding)
    if verdict != HOLDS:
        held = len(parts) - len(open_parts)
        detail = f"{held} of {len(parts)} comparisons hold; {detail}"
    weakest = min(deciding, key=lambda p: (p.effect.relative_mean
                                           if p.effect.relative_mean is not None
                                           else p.effect.mean))
    return verdict, detail, weakest.effect


def _counted(per_seed: list[bool], rule: str) -> tuple[str, str]:
    n, held = len(per_seed), sum(per_seed)
    if rule == "exact":
        if held == n:
            return HOLDS, f"holds at {held}/{n} seeds"
        return CONTRADICTED, f"fails at {n - held}/{n} seeds (a verified counterexample)"
    if held:
        return HOLDS, f"a verified instance at {held}/{n} seeds"
    return INCONCLUSIVE, f"not shown: no instance at these {n} seeds (never contradicted)"


def judge(claim: Mapping, runs: Sequence[Mapping[str, float]],
          verified: Sequence[bool] | None = None) -> Verdict:
    """The verdict of one claim (``holds_if``, ``rule``, ``margin``, ``test``) over the
    metrics of its seeds' runs; ``verified``, per seed, whether an existence instance the
    run reported was re-verified (an unverified one does not count)."""
    text, rule = claim.get("holds_if"), str(claim.get("rule") or "compare")
    if text is None:
        return Verdict(NOT_TESTED, "no run here tests it (see its scale note)", rule=rule)
    if not runs:
        return Verdict(NOT_RUN, "no finished run", rule=rule)
    check_rule(claim)
    node = parse(text)
    per_seed = [evaluate(node, m) for m in runs]
    if rule == "exists" and verified is not None:
        reported = sum(per_seed)
        per_seed = [held and ok for held, ok in zip(per_seed, verified, strict=True)]
    if rule in ("exact", "exists"):
        verdict, detail = _counted(per_seed, rule)
        if rule == "exists" and verified is not None and reported > sum(per_seed):
            detail += f" ({reported - sum(per_seed)} reported instance(s) failed re-verification)"
        return Verdict(verdict, detail, per_seed, rule=rule,
                       p_against=0.0 if verdict == CONTRADICTED else 1.0)
    parts, deterministic = [], bool(claim.get("deterministic"))
    for comparison in comparisons(node):
        if rule == "equivalence":
            effect = comparison_effect(comparison, runs, 0.90, signed_equality=True)
            parts.append(_equivalence_part(comparison, effect, margins_of(claim, runs),
                                           deterministic))
        else:
            effect = comparison_effect(comparison, runs)
            parts.append(_interval_part(effect, str(claim.get("test") or "interval"),
                                        effect.per_seed, deterministic))
    verdict, detail, effect = _combine_parts(parts)
    p_against = min(1.0, len(parts) * min(p.p_against for p in parts))  # Holm's first step
    return Verdict(verdict, detail, per_seed, effect, rule, parts if len(parts) > 1 else [],
                   p_against)


def margins_of(claim: Mapping, runs: Sequence[Mapping[str, float]]) -> list[float]:
    """An equivalence's margin at each seed: declared (``margin``, the same at every seed)
    or measured by each run (``margin_metric``)."""
    if claim.get("margin_metric"):
        node = parse_expression(str(claim["margin_metric"]))
        return [value(node, m) for m in runs]
    return [float(claim["margin"])] * len(runs)


def margin_of(claim: Mapping, runs: Sequence[Mapping[str, float]]) -> float:
    """An equivalence's margin as shown: declared, or the mean of its measured values."""
    margins = margins_of(claim, runs)
    return sum(margins) / len(margins)


def check_rule(claim: Mapping) -> None:
    """``ClaimSyntaxError`` when the claim's rule does not fit its condition."""
    text, rule = claim.get("holds_if"), str(claim.get("rule") or "compare")
    if rule not in RULES:
        raise ClaimSyntaxError(f"unknown rule '{rule}' ({', '.join(RULES)})")
    test = str(claim.get("test") or "interval")
    if test not in TESTS:
        raise ClaimSyntaxError(f"unknown test '{test}' ({', '.join(TESTS)})")
    if test != "interval" and rule != "compare":
        raise ClaimSyntaxError(f"test: {test} applies to the compare rule only")
    if text is None:
        return
    ops = {c.op for c in comparisons(parse(text))}
    if rule == "compare" and "==" in ops:
        raise ClaimSyntaxError(f"rule compare needs directional comparisons (< <= > >=), "
                               f"not '==' in '{text}': use exact or equivalence")
    margin, measured = claim.get("margin"), claim.get("margin_metric")
    if rule == "equivalence":
        if measured:
            parse_expression(str(measured))
            if margin is not None:
                raise ClaimSyntaxError("a margin is declared (margin) or measured "
                                       "(margin_metric), not both")
        elif margin is None or not float(margin) > 0:
            raise ClaimSyntaxError(f"rule equivalence needs a margin > 0 (with its reason), "
                                   f"'{text}' has {margin}")
    elif margin is not None or measured:
        raise ClaimSyntaxError(f"a margin belongs to rule equivalence, not {rule}")


@dataclass(frozen=True)
class PaperVerdict:
    """A paper's badge: its word, where some claims were not tested here how many held of
    how many counted claims, and which claims decided it (their positions in the list
    judged: the contradicted ones that pass Holm's first step, or the tested ones that do
    not hold; none when every claim holds)."""

    word: str  # holds | contradicted | partial | inconclusive | not run | not tested here
    held: int = 0
    counted: int = 0
    tested: int = 0
    deciding: tuple[int, ...] = ()

    @property
    def text(self) -> str:
        if self.word == HOLDS and self.tested < self.counted:
            return f"{HOLDS} ({self.held} of {self.counted} tested)"
        return self.word


def paper_verdict(claims: Sequence[tuple[str, float]], alpha: float = ALPHA) -> PaperVerdict:
    """One badge for a paper from its counted (non-sanity, preregistered) claims' verdicts
    and p-values against them (``(verdict, p_against)``): contradicted when a claim is
    contradicted under Holm's family-wise control across the tested claims (its first step:
    the smallest p-value against at most alpha / k of k tested claims), holds when every
    tested claim holds, partial when some hold, inconclusive when none holds or the
    contradicted ones are not contradicted across the claims. Claims not applicable to the
    runs do not count; a claim whose metric is missing at a seed keeps the paper from
    holding."""
    verdicts = [v for v, _ in claims if v != NOT_APPLICABLE]
    if any(v == NOT_RUN for v in verdicts):
        return PaperVerdict(NOT_RUN)
    tested = [(i, v, p) for i, (v, p) in enumerate(claims) if v in JUDGED]
    held = sum(v == HOLDS for _, v, _ in tested)
    record = dict(held=held, counted=len(verdicts), tested=len(tested))
    if not tested:
        return PaperVerdict(NOT_TESTED, **record)
    against = tuple(i for i, v, p in tested
                    if v == CONTRADICTED and p <= alpha / len(tested))
    if against:
        return PaperVerdict(CONTRADICTED, **record, deciding=against)
    if held == len(tested) and MISSING not in verdicts:
        return PaperVerdict(HOLDS, **record)
    return PaperVerdict(PARTIAL if held else INCONCLUSIVE, **record,
                        deciding=tuple(i for i, v, _ in tested if v != HOLDS))


def check_claims(key: str, claims: Sequence[Mapping], metrics: Mapping[str, float] | None = None
                 ) -> None:
    """``UserError`` naming the paper and the claim when a condition is not in the language,
    its rule does not fit it, or (given a run's ``metrics``) it names a metric that run did
    not write."""
    for claim in claims:
        text = claim.get("holds_if")
        try:
            check_rule(claim)
            node = parse(text) if text is not None else None
        except ClaimSyntaxError as err:
            raise UserError(f"paper {key}, claim {claim.get('id')}: {err}") from None
        if metrics is not None and node is not None:
            measured = claim.get("margin_metric")
            names = metric_names(node) | (metric_names(parse_expression(measured))
                                          if measured else set())
            unknown = sorted(names - set(metrics))
            if unknown:
                raise UserError(f"paper {key}, claim {claim.get('id')}: no metric "
                                f"{', '.join(unknown)} in this run's metrics.json")
