"""Verifiable addition with a prospective confidence token, single- and multi-turn.

A completion is ``<conf_k> s_0 c_0 ... s_{L-1} c_{L-1} EOS``: the model states its
confidence k in 0..9 (p = k / 9) before it answers. Difficulty is graded by the number of
digits (1..max_digits). Two multi-turn episodes, the confidence stated once, first:

- ``retry``: a wrong answer is answered by the environment with ``WRONG`` and the model
  tries again (up to ``turns`` attempts); the episode succeeds if any attempt is right.
- ``tool`` (a tool-use agent): the second operand is hidden in the prompt (``HIDDEN``
  tokens); the agent must call the lookup tool (``CALL``), the environment returns the
  problem with the operand filled in (the full prompt) and repeats the agent's stated
  confidence token after it, the agent
  answers, and a wrong answer gets ``WRONG`` and another attempt: call, answer, retry (up
  to ``turns`` answers). The result keeps the prompt's layout, so every answer step sits
  at the same offset from its operands as in a single-turn episode. An episode whose second token is
  not ``CALL`` (a malformed action) ends there and fails.

The prospective prediction can also be read as P(``YES``) after the probing question
``PROBE`` ("will you succeed?") appended to the prompt (the yes-probability predictor).

Token ids extend the addition vocabulary (``data/arithmetic.py``, 0..24): confidence
tokens 25..34, ``WRONG`` 35, ``CALL`` 36, ``HIDDEN`` 37, ``PROBE`` 38, ``YES`` 39, ``NO``
40. Operands are zero-padded to ``max_digits`` (short prompts).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from data import arithmetic

CONF0 = arithmetic.VOCAB_SIZE  # <conf_0> .. <conf_9>
WRONG = CONF0 + 10
CALL, HIDDEN, PROBE, YES, NO = range(WRONG + 1, WRONG + 6)
VOCAB_SIZE = NO + 1
EPISODES = ("retry", "tool")
EOS, PAD = arithmetic.EOS, arithmetic.PAD


def confidence_of(token: int) -> float | None:
    """p = k / 9 for ``<conf_k>``, None for any other token."""
    return (token - CONF0) / 9 if CONF0 <= token < CONF0 + 10 else None


def attempts(completion: Sequence[int], tool_result: Sequence[int] | None = None
             ) -> list[list[int]]:
    """The answer attempts of a completion: after the confidence token (and, in a tool
    episode, the call and the environment's response), split at WRONG. A tool episode
    without the call has no attempt."""
    body = list(completion[1:]) if completion and confidence_of(completion[0]) is not None \
        else list(completion)
    if tool_result is not None:
        call = [CALL, *tool_response(tool_result, completion[:1])]
        if body[:len(call)] != call:
            return []
        body = body[len(call):]
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
    """An addition problem: ``prompt_ids``, ``reference`` (a + b), ``digits``; in a tool
    episode ``tool_result`` holds what the lookup tool returns."""

    prompt_ids: list[int]
    reference: int
    digits: int
    tool_result: list[int] | None = None

    def answer_correct(self, attempt: Sequence[int]) -> bool:
        return arithmetic.answer_of(list(attempt)) == self.reference

    def correct(self, completion: Sequence[int]) -> bool:
        """Success: any attempt of the completion is right."""
        return any(self.answer_correct(a) for a in attempts(completion, self.tool_result))

    def stated_confidence(self, completion: Sequence[int]) -> float | None:
        return confidence_of(completion[0]) if completion else None

    @property
    def probe_ids(self) -> list[int]:
        """The prompt with the probing question; the next token answers YES or NO."""
        return [*self.prompt_ids, PROBE]


def tool_response(tool_result: Sequence[int], stated: Sequence[int]) -> list[int]:
    """What the environment inserts after the call: the tool's result, then the agent's
    stated confidence token again, so the answer follows the filled-in problem exactly as
    in a single-turn episode (every answer step at the same offset from its operands)."""
    return [*tool_result, *stated]


def encode_tool_problem(a: int, b: int, digits: int, width: int) -> tuple[list[int], list[int]]:
    """(the prompt with b's digits hidden, the tool's result: the prompt with b filled in)."""
    full = arithmetic.encode_problem(a, b, digits, width)
    prompt = list(full)
    prompt[2:2 + 2 * width:2] = [HIDDEN] * width
    return prompt, full


def make_prompt(a: int, b: int, digits: int, max_digits: int, tool: bool = False
                ) -> ConfidencePrompt:
    if tool:
        prompt, result = encode_tool_problem(a, b, digits, max_digits)
        return ConfidencePrompt(prompt, a + b, digits, result)
    return ConfidencePrompt(arithmetic.encode_problem(a, b, digits, max_digits), a + b, digits)


def graded_prompts(digit_grid: Sequence[int], count: int, max_digits: int,
                   rng: np.random.Generator, tool: bool = False) -> list[ConfidencePrompt]:
    """``count`` problems with a digit count drawn uniformly from ``digit_grid`` (with the
    second operand behind the lookup tool when ``tool``)."""
    out = []
    for _ in range(count):
        digits = int(rng.choice(list(digit_grid)))
        (a, b), = arithmetic.addition_problems(1, digits, rng)
        out.append(make_prompt(a, b, digits, max_digits, tool))
    return out


FOREIGN_CONFIDENCE_SHARE = 0.5  # calibrated data: answers after a stated k it does not learn


@dataclass
class ConfidenceAdditionTask:
    """tiny-lm's SFT task: ``<conf_k>`` then the scratchpad, with sum digits replaced at
    random with probability ``noise`` (so harder sums fail more often) and k drawn from
    ``confidence_range`` independently of the problem (an uncalibrated start). Of the
    examples, a fraction ``retry_fraction`` are two-attempt traces (a wrong attempt,
    ``WRONG``, another attempt), ``tool_fraction`` are tool episodes (``CALL``, the tool's
    result, which is not a training target, then the answer) and ``probe_fraction`` answer
    the probing question (``PROBE`` -> ``YES`` with probability k / 9), so the model knows
    every episode's format. ``calibrated`` (a teacher's data) states k = round(9 q) and
    answers the probe YES with probability q, q = (1 - noise)^digits the chance that the
    data's answer is right; in a share ``FOREIGN_CONFIDENCE_SHARE`` of its answers the stated
    k is drawn from ``confidence_range`` instead and is not a training target, so that the
    teacher answers well after any k a student's rollout states (with k = round(9 q) alone
    it only ever sees k of 8 and 9, and distils off-distribution answers after the rest)."""

    max_digits: int
    train_examples: int
    noise: float
    confidence_range: tuple[int, int]
    retry_fraction: float = 0.3
    tool_fraction: float = 0.0
    probe_fraction: float = 0.0
    calibrated: bool = False
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
        problem = 2 * self.max_digits + 2  # the prompt, and the tool's result
        return problem + 1 + 1 + (problem + 1) + 2 * attempt + 1  # + call, response

    @property
    def config(self) -> dict:
        return {"name": "confidence_addition", "max_digits": self.max_digits,
                "train_examples": self.train_examples, "noise": self.noise,
                "confidence_range": list(self.confidence_range),
                "retry_fraction": self.retry_fraction, "tool_fraction": self.tool_fraction,
                "probe_fraction": self.probe_fraction, "calibrated": self.calibrated}

    def success_chance(self, digits: int) -> float:
        """q = (1 - noise)^digits: the chance that the data's answer is right."""
        return (1 - self.noise) ** digits

    def training_confidence(self, digits: int, rng: np.random.Generator) -> int:
        """k of the training example's ``<conf_k>``."""
        if self.calibrated:
            return round(9 * self.success_chance(digits))
        low, high = self.confidence_range
        return int(rng.integers(low, high + 1))

    def training_data(self, rng: np.random.Generator):
        from datasets import Dataset

        ids, labels = [], []
        low, high = self.confidence_range
        for _ in range(self.train_examples):
            digits = int(rng.integers(1, self.max_digits + 1))
            (a, b), = arithmetic.addition_problems(1, digits, rng)
            problem = make_prompt(a, b, digits, self.max_digits,
                                  tool=rng.random() < self.tool_fraction)
            k = self.training_confidence(digits, rng)
            k_scored = True
            if self.calibrated and rng.random() < FOREIGN_CONFIDENCE_SHARE:
                k, k_scored = int(rng.integers(low, high + 1)), False
            if rng.random() < self.probe_fraction:
                yes = rng.random() < (self.success_chance(digits) if self.calibrated else k / 9)
                prompt, target, scored = problem.probe_ids, [YES if yes else NO], [True]
            else:
                prompt, target = problem.prompt_ids, self._attempt(a, b, digits, rng)
                if rng.random() < self.retry_fraction:
                    wrong = arithmetic.scratchpad(a, b, digits)
                    position = 2 * int(rng.integers(0, digits))
                    wrong[position] = int((wrong[position] + rng.integers(1, 10)) % 10)
                    target = [*wrong, WRONG, *target]
                scored = [True] * len(target)
                if problem.tool_result is not None:  # the tool's answer is not predicted
                    response = tool_response(problem.tool_result, [CONF0 + k])
                    target = [CALL, *response, *target]
                    scored = [True] + [False] * len(response) + scored
                target, scored = [CONF0 + k, *target], [k_scored, *scored]
            pad = self.max_length - len(prompt) - len(target)
            ids.append(prompt + target + [PAD] * pad)
            labels.append([-100] * len(prompt) + [t if keep else -100 for t, keep in
                                                  zip(target, scored, strict=True)]
                          + [-100] * pad)
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
        (the prompts end with one the training data states: the middle of the trained range,
        or the calibrated k)."""
        out = {}
        for digits in self.horizons:
            stated = CONF0 + (self.training_confidence(digits, rng) if self.calibrated
                              else sum(self.confidence_range) // 2)
            pairs = arithmetic.addition_problems(self.held_out_per_horizon, digits, rng)
            out[digits] = ([arithmetic.encode_problem(a, b, digits, self.max_digits) + [stated]
                            for a, b in pairs],
                           [arithmetic.scratchpad(a, b, digits) for a, b in pairs])
        return out
