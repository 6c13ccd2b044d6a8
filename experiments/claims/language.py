"""The claim language: a claim's ``holds_if`` is a condition over the metrics a default run
writes, in a small language that is parsed, never ``eval``-ed::

    condition  := comparison ("and" comparison)*
    comparison := sum ("<" | "<=" | ">" | ">=" | "==") sum
    sum        := product (("+" | "-") product)*
    product    := unary (("*" | "/") unary)*
    unary      := "-" unary | NUMBER | METRIC | "abs" "(" sum ")" | "(" sum ")"

Metric names are the keys of ``metrics.json``; nothing else is a name (no attribute access,
no indexing, no call but ``abs``). How seeds combine into a verdict is verdicts.py.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from common.errors import UserError

COMPARISONS = ("<=", ">=", "==", "<", ">")
_TOKEN = re.compile(r"\s*(?:(?P<number>\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)"
                    r"|(?P<name>[A-Za-z_][A-Za-z0-9_]*)|(?P<op><=|>=|==|[-+*/()<>]))")


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


@functools.lru_cache(maxsize=1024)
def parse(text: str) -> Node:
    """The condition's tree; ``ClaimSyntaxError`` (one line) when it is not in the language.
    Trees are immutable, so one parse serves every caller."""
    return _Parser(text).condition()


@functools.lru_cache(maxsize=1024)
def parse_expression(text: str) -> Node:
    """An arithmetic expression over metrics (a measured margin), no comparison."""
    parser = _Parser(text)
    node = parser.sum()
    if parser.peek() is not None:
        raise ClaimSyntaxError(f"unexpected '{parser.peek()}' in '{text}'")
    return node


def metric_names(node: Node) -> set[str]:
    if node.op == "metric":
        return {node.args[0]}
    if node.op == "number":
        return set()
    return set().union(*(metric_names(a) for a in node.args))


def value(node: Node, metrics: Mapping[str, float]) -> float:
    """An arithmetic expression's value on one run's metrics."""
    op, args = node.op, node.args
    if op == "number":
        return args[0]
    if op == "metric":
        return float(metrics[args[0]])
    if op == "neg":
        return -value(args[0], metrics)
    if op == "abs":
        return abs(value(args[0], metrics))
    a, b = value(args[0], metrics), value(args[1], metrics)
    if op == "/":
        return a / b if b != 0 else math.copysign(math.inf, a) if a else math.nan
    return {"+": a + b, "-": a - b, "*": a * b}[op]


def comparisons(node: Node) -> list[Node]:
    """The comparisons a condition is the conjunction of."""
    return list(node.args) if node.op == "and" else [node]


def evaluate(node: Node, metrics: Mapping[str, float]) -> bool:
    """The condition on one run's metrics (every metric it names must be present)."""
    if node.op == "and":
        return all(evaluate(part, metrics) for part in node.args)
    a, b = value(node.args[0], metrics), value(node.args[1], metrics)
    return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "==": a == b}[node.op]
