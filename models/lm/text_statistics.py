"""Judge-free statistics of generated token sequences."""

from __future__ import annotations

from collections.abc import Sequence


def repetition_rate(tokens: Sequence[int], n: int = 4) -> float:
    """Fraction of the n-grams of a sequence that already occurred earlier in it."""
    grams = [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]
    seen, repeated = set(), 0
    for gram in grams:
        repeated += gram in seen
        seen.add(gram)
    return repeated / len(grams) if grams else 0.0


def distinct_n(sequences: Sequence[Sequence[int]], n: int = 2) -> float:
    """Distinct-n: unique n-grams over all n-grams of the sequences (0 when there are none)."""
    grams = [tuple(s[i:i + n]) for s in sequences for i in range(len(s) - n + 1)]
    return len(set(grams)) / len(grams) if grams else 0.0
