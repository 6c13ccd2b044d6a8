"""Verifiable addition with a prospective confidence token, single- and multi-turn.

A completion is ``<conf_k> s_0 c_0 ... s_{L-1} c_{L-1} EOS``: the model states its
confidence k in 0..9 (p = k / 9) before it answers. Difficulty is graded by the number of
digits (1..max_digits). In the multi-turn episode a wrong answer is answered by the
environment with ``WRONG`` and the model tries again (up to ``turns`` attempts); the
episode succeeds if any attempt is right, and the confidence is stated once, before the
first attempt.

Token ids extend the addition vocabulary (``data/arithmetic.py``, 0..24): confidence
tokens 25..34, ``WRONG`` 35. Operands are zero-padded to ``max_digits`` (short prompts).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from data import arithmetic

CONF0 = arithmetic.VOCAB_SIZE  # <conf_0> .. <conf_9>
WRONG = CONF0 + 10
VOCAB_SIZE = WRONG + 1
EOS, PAD = arithmetic.EOS, arithmetic.PAD


def confidence_of(token: int) -> float | None:
    """p = k / 9 for ``<conf_k>``, None for any other token."""
    return (token - CONF0) / 9 if CONF0 <= token < CONF0 + 10 else None


def attempts(completion: Sequence[int]) -> list[list[int]]:
    """The answer attempts of a completion: after the confidence token, split at WRONG."""
    body = list(completion[1:]) if completion and confidence_of(completion[0]) is not None \
        else list(completion)
    out, current = [], []
    for token in body:
        if token == WRONG:
            out.append(current)
            current = []
        else:
            current.append(token)
    return [*out, current]


@dataclass
class ConfidencePrompt:
    """An addition problem: ``prompt_ids``, ``reference`` (a + b), ``digits``."""

    prompt_ids: list[int]
    reference: int
    digits: int

    def answer_correct(self, attempt: Sequence[int]) -> bool:
        return arithmetic.answer_of(list(attempt)) == self.reference

    def correct(self, completion: Sequence[int]) -> bool:
        """Success: any attempt of the completion is right."""
        return any(self.answer_correct(a) for a in attempts(completion))


def graded_prompts(digit_grid: Sequence[int], count: int, max_digits: int,
                   rng: np.random.Generator) -> list[ConfidencePrompt]:
    """``count`` problems with a digit count drawn uniformly from ``digit_grid``."""
    out = []
    for _ in range(count):
        digits = int(rng.choice(list(digit_grid)))
        (a, b), = arithmetic.addition_problems(1, digits, rng)
        out.append(ConfidencePrompt(arithmetic.encode_problem(a, b, digits, max_digits),
                                    a + b, digits))
    return out


@dataclass
class ConfidenceAdditionTask:
    """tiny-lm's SFT task: ``<conf_k>`` then the scratchpad, with sum digits replaced at
    random with probability ``noise`` (so harder sums fail more often) and k drawn from
    ``confidence_range`` independently of the problem (an uncalibrated start). A fraction
    ``retry_fraction`` of the examples are two-attempt traces (a wrong attempt, ``WRONG``,
    another attempt), so the model knows how to continue a multi-turn episode."""

    max_digits: int
    train_examples: int
    noise: float
    confidence_range: tuple[int, int]
    retry_fraction: float = 0.3
    horizons: list[int] = field(default_factory=list)
    held_out_per_horizon: int = 64
    vocab_size: int = VOCAB_SIZE
    pad_id: int = PAD
    tokenizer: Any = field(default_factory=arithmetic.ArithmeticTokenizer)
    code_module: Any = None

    def __post_init__(self) -> None:
        import sys

        self.horizons = self.horizons or list(range(1, self.max_digits + 1))
        self.code_module = sys.modules[__name__]

    @property
    def max_length(self) -> int:
        attempt = 2 * self.max_digits + 1
        return 2 * self.max_digits + 2 + 1 + 2 * attempt + 1

    @property
    def config(self) -> dict:
        return {"name": "confidence_addition", "max_digits": self.max_digits,
                "train_examples": self.train_examples, "noise": self.noise,
                "confidence_range": list(self.confidence_range),
                "retry_fraction": self.retry_fraction}

    def training_data(self, rng: np.random.Generator):
        from datasets import Dataset

        low, high = self.confidence_range
        ids, labels = [], []
        for _ in range(self.train_examples):
            digits = int(rng.integers(1, self.max_digits + 1))
            (a, b), = arithmetic.addition_problems(1, digits, rng)
            prompt = arithmetic.encode_problem(a, b, digits, self.max_digits)
            target = self._attempt(a, b, digits, rng)
            if rng.random() < self.retry_fraction:
                wrong = arithmetic.scratchpad(a, b, digits)
                position = 2 * int(rng.integers(0, digits))
                wrong[position] = int((wrong[position] + rng.integers(1, 10)) % 10)
                target = [*wrong, WRONG, *target]
            target = [CONF0 + int(rng.integers(low, high + 1)), *target]
            pad = self.max_length - len(prompt) - len(target)
            ids.append(prompt + target + [PAD] * pad)
            labels.append([-100] * len(prompt) + target + [-100] * pad)
        return Dataset.from_dict({"input_ids": ids, "labels": labels})

    def _attempt(self, a: int, b: int, digits: int, rng: np.random.Generator) -> list[int]:
        """The scratchpad with each sum digit replaced at random with probability noise."""
        target = arithmetic.scratchpad(a, b, digits)
        for i in range(0, 2 * digits, 2):
            if rng.random() < self.noise:
                target[i] = int((target[i] + rng.integers(1, 10)) % 10)
        return target

    def held_out(self, rng: np.random.Generator) -> dict[int, tuple[list, list]]:
        """{digits: (prompts, noise-free scratchpads)}; the confidence token is not scored
        (the prompts end with it, at the middle of the trained range)."""
        middle = CONF0 + sum(self.confidence_range) // 2
        out = {}
        for digits in self.horizons:
            pairs = arithmetic.addition_problems(self.held_out_per_horizon, digits, rng)
            out[digits] = ([arithmetic.encode_problem(a, b, digits, self.max_digits) + [middle]
                            for a, b in pairs],
                           [arithmetic.scratchpad(a, b, digits) for a, b in pairs])
        return out
