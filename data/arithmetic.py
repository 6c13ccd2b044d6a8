"""Multi-digit addition with a scratchpad, as a `datasets.Dataset`, for tiny language models.

Token ids: digits 0-9, length tokens 10..21 (L = 1..12), '=' 22, EOS 23, PAD 24.
Prompt: [len(L)] a_0 b_0 a_1 b_1 ... (least significant first, zero-padded to 12 digits) [=].
Completion (the scratchpad, horizon L): s_0 c_0 s_1 c_1 ... s_{L-1} c_{L-1} [EOS], where s_i
is the sum digit and c_i the carry out. Padding the operands to 12 digits puts every
scratchpad step at a fixed offset from its operands, which a 2-layer model learns quickly.

Controllable low-probability steps: in training data each sum digit is replaced, with
probability ``noise``, by a uniformly random other digit, so the trained model gives the
correct digit probability about 1 - noise at every sum step (C* ~ 1 / (1 - noise)) while the
path probability of the correct scratchpad decays like (1 - noise)^L.
"""

from __future__ import annotations

import numpy as np

MAX_DIGITS = 12
LEN0, EQUALS, EOS, PAD = 10, 22, 23, 24
VOCAB_SIZE = 25


def encode_problem(a: int, b: int, digits: int, width: int = MAX_DIGITS) -> list[int]:
    """Prompt token ids for a + b with ``digits``-digit operands, zero-padded to ``width``."""
    a_d = [(a // 10**i) % 10 for i in range(width)]
    b_d = [(b // 10**i) % 10 for i in range(width)]
    return [LEN0 + digits - 1] + [t for pair in zip(a_d, b_d, strict=True) for t in pair] + [
        EQUALS]


def scratchpad(a: int, b: int, digits: int) -> list[int]:
    """The correct completion: (sum digit, carry) per position, then EOS."""
    out, carry = [], 0
    for i in range(digits):
        total = (a // 10**i) % 10 + (b // 10**i) % 10 + carry
        carry = total // 10
        out += [total % 10, carry]
    return out + [EOS]


def answer_of(completion: tuple[int, ...] | list[int]) -> int | None:
    """The integer a scratchpad encodes (None if malformed)."""
    steps = [t for t in completion if t != EOS]
    if len(steps) % 2 or any(t > 9 for t in steps) or not steps:
        return None
    digits = steps[0::2] + [steps[-1]]
    return int("".join(str(d) for d in reversed(digits)))


def addition_problems(n: int, digits: int, rng: np.random.Generator) -> list[tuple[int, int]]:
    low = 10 ** (digits - 1) if digits > 1 else 0
    return [(int(rng.integers(low, 10**digits)), int(rng.integers(low, 10**digits)))
            for _ in range(n)]


def sequence_length(max_digits: int) -> int:
    """Prompt + scratchpad + EOS tokens at the longest horizon."""
    return 1 + 2 * MAX_DIGITS + 1 + 2 * max_digits + 1


def training_dataset(n: int, max_digits: int, noise: float, rng: np.random.Generator,
                     loop_fraction: float = 0.0):
    """A `datasets.Dataset` of padded training sequences (input_ids, labels with -100 on the
    prompt and padding), every length 1..max_digits equally often. With probability
    ``loop_fraction`` a target repeats one (sum digit, carry) pair 1-3 extra times (a
    degenerate, looping writer: such outputs are longer and wrong)."""
    from datasets import Dataset

    if not 1 <= max_digits <= MAX_DIGITS:
        raise ValueError(f"max_digits must be in 1..{MAX_DIGITS}, got {max_digits}")
    length = sequence_length(max_digits) + (6 if loop_fraction else 0)
    ids, labels = [], []
    for _ in range(n):
        digits = int(rng.integers(1, max_digits + 1))
        a, b = addition_problems(1, digits, rng)[0]
        prompt, target = encode_problem(a, b, digits), scratchpad(a, b, digits)
        for i in range(0, 2 * digits, 2):  # noisy sum digits: lower pi(y*) at every step
            if rng.random() < noise:
                target[i] = int((target[i] + rng.integers(1, 10)) % 10)
        if loop_fraction and rng.random() < loop_fraction:
            i = 2 * int(rng.integers(0, digits))
            target = target[: i + 2] + target[i:i + 2] * int(rng.integers(1, 4)) + target[i + 2:]
        seq = prompt + target
        pad = length - len(seq)
        ids.append(seq + [PAD] * pad)
        labels.append([-100] * len(prompt) + target + [-100] * pad)
    return Dataset.from_dict({"input_ids": ids, "labels": labels})


class ArithmeticTokenizer:
    """Token ids <-> text for the addition vocabulary."""

    pad_token_id = PAD
    eos_token_id = EOS

    def decode(self, ids) -> str:
        names = {EQUALS: "=", EOS: "<eos>", PAD: ""}
        return "".join(names.get(i, f"[L{i - LEN0 + 1}]" if LEN0 <= i < EQUALS else str(i))
                       for i in ids)
