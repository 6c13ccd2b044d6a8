"""Multi-digit addition with a scratchpad, as a `datasets.Dataset`, for tiny language models.

Token ids: digits 0-9, length tokens 10..21 (L = 1..12), '=' 22, EOS 23, PAD 24.
Prompt: [len(L)] a_0 b_0 a_1 b_1 ... (least significant first, zero-padded to 12 digits) [=].
Completion (the scratchpad, horizon L): s_0 c_0 s_1 c_1 ... s_{L-1} c_{L-1} [EOS], where s_i
is the sum digit and c_i the carry out; the verbose scratchpad also copies the operand
digits into every step, a_i b_i s_i c_i (4L + 1 tokens: 33-49 for 8-12 digits, a task with
long answers). Padding the operands to 12 digits puts every scratchpad step at a fixed
offset from its operands, which a 2-layer model learns quickly.

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


def step_width(verbose: bool) -> int:
    """Tokens per scratchpad step: (sum, carry), or (a, b, sum, carry) when verbose."""
    return 4 if verbose else 2


def scratchpad(a: int, b: int, digits: int, verbose: bool = False) -> list[int]:
    """The correct completion: (sum digit, carry) per position (verbose: the operand digits
    first), then EOS."""
    out, carry = [], 0
    for i in range(digits):
        a_i, b_i = (a // 10**i) % 10, (b // 10**i) % 10
        total = a_i + b_i + carry
        carry = total // 10
        out += ([a_i, b_i] if verbose else []) + [total % 10, carry]
    return out + [EOS]


def answer_of(completion: tuple[int, ...] | list[int], verbose: bool = False) -> int | None:
    """The integer a scratchpad encodes (None if malformed)."""
    steps = [t for t in completion if t != EOS]
    width = step_width(verbose)
    if len(steps) % width or any(t > 9 for t in steps) or not steps:
        return None
    digits = steps[width - 2::width] + [steps[-1]]
    return int("".join(str(d) for d in reversed(digits)))


def addition_problems(n: int, digits: int, rng: np.random.Generator) -> list[tuple[int, int]]:
    low = 10 ** (digits - 1) if digits > 1 else 0
    return [(int(rng.integers(low, 10**digits)), int(rng.integers(low, 10**digits)))
            for _ in range(n)]


def sequence_length(max_digits: int, verbose: bool = False) -> int:
    """Prompt + scratchpad + EOS tokens at the longest horizon."""
    return 1 + 2 * MAX_DIGITS + 1 + step_width(verbose) * max_digits + 1


def padded_length(max_digits: int, verbose: bool = False, loop_fraction: float = 0.0,
                  loop_until: int | None = None) -> int:
    """The length of ``training_dataset``'s sequences (the model's context)."""
    length = sequence_length(max_digits, verbose)
    if not loop_fraction:
        return length
    if loop_until:
        return max(length, 2 + 2 * MAX_DIGITS + loop_until)
    return length + 3 * step_width(verbose)  # up to three repeated steps


def loop(target: list[int], step: int, width: int, rng: np.random.Generator,
         until: int | None = None) -> list[int]:
    """``target`` with its scratchpad step ``step`` repeated: 1-3 extra times, or (``until``)
    over and over up to ``until`` completion tokens, without EOS (a writer that never stops)."""
    i = width * step
    head, unit = target[: i + width], target[i:i + width]
    if until is None:
        return head + unit * int(rng.integers(1, 4)) + target[i + width:]
    repeats = -(-max(0, until - len(head)) // width)
    return (head + unit * repeats)[:until]


def training_dataset(n: int, max_digits: int, noise: float, rng: np.random.Generator,
                     loop_fraction: float = 0.0, verbose: bool = False,
                     loop_until: int | None = None):
    """A `datasets.Dataset` of padded training sequences (input_ids, labels with -100 on the
    prompt and padding), every length 1..max_digits equally often. With probability
    ``loop_fraction`` a target repeats one scratchpad step (a degenerate, looping writer:
    such outputs are longer and wrong): 1-3 extra times, or with ``loop_until`` until the
    completion has that many tokens, without EOS."""
    from datasets import Dataset

    if not 1 <= max_digits <= MAX_DIGITS:
        raise ValueError(f"max_digits must be in 1..{MAX_DIGITS}, got {max_digits}")
    width = step_width(verbose)
    length = padded_length(max_digits, verbose, loop_fraction, loop_until)
    ids, labels = [], []
    for _ in range(n):
        digits = int(rng.integers(1, max_digits + 1))
        a, b = addition_problems(1, digits, rng)[0]
        prompt, target = encode_problem(a, b, digits), scratchpad(a, b, digits, verbose)
        for i in range(width - 2, width * digits, width):  # noisy sum digits: lower pi(y*)
            if rng.random() < noise:
                target[i] = int((target[i] + rng.integers(1, 10)) % 10)
        if loop_fraction and rng.random() < loop_fraction:
            target = loop(target, int(rng.integers(0, digits)), width, rng, loop_until)
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
