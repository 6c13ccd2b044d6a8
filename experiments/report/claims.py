"""Claims as data: each paper's ``paper.claims`` (``conf/paper/<key>.yaml``) and their verdicts.

A claim's ``holds_if`` is a condition over the metrics a default run writes, in a small
language that is parsed, never ``eval``-ed::

    condition  := comparison ("and" comparison)*
    comparison := sum ("<" | "<=" | ">" | ">=" | "==") sum
    sum        := product (("+" | "-") product)*
    product    := unary (("*" | "/") unary)*
    unary      := "-" unary | NUMBER | METRIC | "abs" "(" sum ")" | "(" sum ")"

Metric names are the keys of ``metrics.json``; nothing else is a name (no attribute access,
no indexing, no call but ``abs``). Seeds combine by ``over_seeds``:

- ``all``: the condition holds at every seed;
- ``mean_ci``: for one comparison ``a > b`` (or ``<``, ``>=``, ``<=``), the paired
  differences ``a - b`` over seeds have a two-sided 95% t-interval on the claimed side of 0
  (at least two seeds).

A claim with ``holds_if: null`` cannot be tested by the CPU default (a real-scale number); it
is reported as "not tested here", with its ``scale`` note, never as holding.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from common.errors import UserError

COMPARISONS = ("<=", ">=", "==", "<", ">")
_TOKEN = re.compile(r"\s*(?:(?P<number>\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)"
                    r"|(?P<name>[A-Za-z_][A-Za-z0-9_]*)|(?P<op><=|>=|==|[-+*/()<>]))")

HOLDS, FAILS, NOT_TESTED, NOT_RUN = "holds", "does not hold", "not tested here", "not run"


class ClaimSyntaxError(UserError):
    """A ``holds_if`` that is not in the claim language."""


@dataclass(frozen=True)
class Node:
    """One node of a parsed condition: ``op`` is number, metric, abs, neg, an arithmetic or
    comparison operator, or ``and``; ``args`` its operands (or its value)."""

    op: str
    args: tuple


def tokenize(text: str) -> list[str]:
    tokens, position = [], 0
    text = text.rstrip()
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None or match.end() == position:
            raise ClaimSyntaxError(f"unexpected {text[position:].strip()[:12]!r} in "
                                   f"'{text}' (allowed: metric names, numbers, + - * /, "
                                   f"< <= > >= ==, abs(), and)")
        tokens.append(match.group(match.lastgroup))
        position = match.end()
    return tokens


class _Parser:
    def __init__(self, text: str):
        self.text, self.tokens, self.at = text, tokenize(text), 0

    def peek(self) -> str | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if token is None or (expected is not None and token != expected):
            want = f"'{expected}'" if expected else "more"
            raise ClaimSyntaxError(f"expected {want} in '{self.text}'"
                                   + (f", found '{token}'" if token else " at its end"))
        self.at += 1
        return token

    def condition(self) -> Node:
        parts = [self.comparison()]
        while self.peek() == "and":
            self.take()
            parts.append(self.comparison())
        if self.peek() is not None:
            raise ClaimSyntaxError(f"unexpected '{self.peek()}' in '{self.text}'")
        return parts[0] if len(parts) == 1 else Node("and", tuple(parts))

    def comparison(self) -> Node:
        left = self.sum()
        op = self.peek()
        if op not in COMPARISONS:
            raise ClaimSyntaxError(f"'{self.text}' needs a comparison (< <= > >= ==)"
                                   + (f", found '{op}'" if op else ""))
        self.take()
        return Node(op, (left, self.sum()))

    def sum(self) -> Node:
        node = self.product()
        while self.peek() in ("+", "-"):
            node = Node(self.take(), (node, self.product()))
        return node

    def product(self) -> Node:
        node = self.unary()
        while self.peek() in ("*", "/"):
            node = Node(self.take(), (node, self.unary()))
        return node

    def unary(self) -> Node:
        token = self.take()
        if token == "-":
            return Node("neg", (self.unary(),))
        if token == "(":
            node = self.sum()
            self.take(")")
            return node
        if token[0].isdigit() or token[0] == ".":
            return Node("number", (float(token),))
        if token == "abs":
            self.take("(")
            node = self.sum()
            self.take(")")
            return Node("abs", (node,))
        if token in ("and",) or not re.fullmatch(r"[A-Za-z_]\w*", token):
            raise ClaimSyntaxError(f"unexpected '{token}' in '{self.text}'")
        if self.peek() == "(":
            raise ClaimSyntaxError(f"'{token}(' in '{self.text}': only abs() may be called")
        return Node("metric", (token,))


def parse(text: str) -> Node:
    """The condition's tree; ``ClaimSyntaxError`` (one line) when it is not in the language."""
    return _Parser(text).condition()


def metric_names(node: Node) -> set[str]:
    if node.op == "metric":
        return {node.args[0]}
    if node.op == "number":
        return set()
    return set().union(*(metric_names(a) for a in node.args))


def _value(node: Node, metrics: Mapping[str, float]) -> float:
    op, args = node.op, node.args
    if op == "number":
        return args[0]
    if op == "metric":
        return float(metrics[args[0]])
    if op == "neg":
        return -_value(args[0], metrics)
    if op == "abs":
        return abs(_value(args[0], metrics))
    a, b = _value(args[0], metrics), _value(args[1], metrics)
    if op == "/":
        return a / b if b != 0 else math.copysign(math.inf, a) if a else math.nan
    return {"+": a + b, "-": a - b, "*": a * b}[op]


def evaluate(node: Node, metrics: Mapping[str, float]) -> bool:
    """The condition on one run's metrics (every metric it names must be present)."""
    if node.op == "and":
        return all(evaluate(part, metrics) for part in node.args)
    a, b = _value(node.args[0], metrics), _value(node.args[1], metrics)
    return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "==": a == b}[node.op]


@dataclass
class Verdict:
    verdict: str  # holds | does not hold | not tested here | not run
    detail: str  # what decided it (k of n seeds, the interval)
    per_seed: list[bool]


def t_quantile_975(dof: int) -> float:
    from scipy.stats import t

    return float(t.ppf(0.975, dof))


def combine(text: str | None, over_seeds: str, runs: Sequence[Mapping[str, float]]
            ) -> Verdict:
    """The verdict of one claim over the metrics of its seeds' runs."""
    if text is None:
        return Verdict(NOT_TESTED, "no run here tests it (see its scale note)", [])
    if not runs:
        return Verdict(NOT_RUN, "no finished run", [])
    node = parse(text)
    per_seed = [evaluate(node, m) for m in runs]
    if over_seeds == "all":
        held = sum(per_seed)
        return Verdict(HOLDS if held == len(runs) else FAILS,
                       f"{held} of {len(runs)} seeds", per_seed)
    if over_seeds != "mean_ci":
        raise UserError(f"unknown over_seeds '{over_seeds}' (all, mean_ci)")
    if node.op not in ("<", "<=", ">", ">="):
        raise ClaimSyntaxError(f"over_seeds: mean_ci needs one comparison a > b, not '{text}'")
    diffs = [_value(node.args[0], m) - _value(node.args[1], m) for m in runs]
    if node.op in ("<", "<="):
        diffs = [-d for d in diffs]
    if len(diffs) < 2:
        return Verdict(FAILS, "mean_ci needs at least two seeds", per_seed)
    mean = sum(diffs) / len(diffs)
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1))
    half = t_quantile_975(len(diffs) - 1) * sd / math.sqrt(len(diffs))
    low, high = mean - half, mean + half
    side = "> 0" if low > 0 else "includes 0" if high >= 0 else "< 0"
    return Verdict(HOLDS if low > 0 else FAILS,
                   f"paired difference {mean:.4g}, 95% CI [{low:.4g}, {high:.4g}] {side}",
                   per_seed)


def paper_verdict(verdicts: Sequence[str]) -> str:
    """One badge for a paper: holds, partial, does not hold, not tested here, or not run."""
    tested = [v for v in verdicts if v in (HOLDS, FAILS)]
    if any(v == NOT_RUN for v in verdicts):
        return NOT_RUN
    if not tested:
        return NOT_TESTED
    held = sum(v == HOLDS for v in tested)
    return HOLDS if held == len(tested) else FAILS if held == 0 else "partial"


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
            if claim.get("over_seeds") == "mean_ci" and node.op not in ("<", "<=", ">", ">="):
                raise ClaimSyntaxError(f"over_seeds: mean_ci needs one comparison a > b, "
                                       f"not '{text}'")
        except ClaimSyntaxError as err:
            raise UserError(f"paper {key}, claim {claim.get('id')}: {err}") from None
        if metrics is not None:
            unknown = sorted(metric_names(node) - set(metrics))
            if unknown:
                raise UserError(f"paper {key}, claim {claim.get('id')}: no metric "
                                f"{', '.join(unknown)} in this run's metrics.json")
