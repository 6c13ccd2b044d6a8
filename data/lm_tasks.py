"""Language-model tasks: typed prompts with their reference answers and answer extractors,
and the training tasks that tiny-lm is trained on.

- ``addition``: scratchpad addition in tiny-lm's own token format (``data/arithmetic.py``);
  also a ``TrainingTask`` (training split + held-out examples per horizon).
- ``addition_text``: "What is a+b?" for real chat models (offline); answer = last integer.
- ``gsm8k``, ``math500``: by hub id through ``datasets.load_dataset``; GSM8K's reference is
  the number after ``####`` and the answer the completion's last number, MATH-500's the
  content of the last ``\\boxed{...}``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from common.errors import UserError
from data import arithmetic


@dataclass
class LMPrompt:
    """One prompt: ``correct(completion)`` compares ``extract(completion)`` with
    ``reference``; ``target_ids`` is a known correct completion (for teacher forcing)."""

    prompt_ids: list[int]
    reference: str
    extract: Callable[[Sequence[int]], str | None]
    eos_id: int | None
    max_new_tokens: int
    horizon: int = 1
    target_ids: list[int] | None = None

    def correct(self, completion: Sequence[int]) -> bool:
        return self.extract(completion) == self.reference


@dataclass
class AdditionTask:
    """The training task of tiny-lm on scratchpad addition (``dataset=addition``)."""

    max_digits: int
    train_examples: int
    noise: float
    horizons: list[int]
    held_out_per_horizon: int = 64
    loop_fraction: float = 0.0  # share of targets that repeat one scratchpad step ...
    loop_until: int | None = None  # ... up to this many completion tokens (None: 1-3 times)
    verbose: bool = False  # the verbose scratchpad (operand digits copied into every step)
    vocab_size: int = arithmetic.VOCAB_SIZE
    pad_id: int = arithmetic.PAD
    tokenizer: Any = field(default_factory=arithmetic.ArithmeticTokenizer)
    code_module: Any = arithmetic

    @property
    def config(self) -> dict:
        config = {"name": "addition", "max_digits": self.max_digits,
                  "train_examples": self.train_examples, "noise": self.noise}
        optional = {"loop_fraction": self.loop_fraction, "loop_until": self.loop_until,
                    "verbose": self.verbose}
        return config | {k: v for k, v in optional.items() if v}  # defaults keep old keys

    @property
    def max_length(self) -> int:
        return arithmetic.padded_length(self.max_digits, self.verbose, self.loop_fraction,
                                        self.loop_until)

    def training_data(self, rng: np.random.Generator):
        return arithmetic.training_dataset(self.train_examples, self.max_digits,
                                           self.noise, rng, self.loop_fraction, self.verbose,
                                           self.loop_until)

    def held_out(self, rng: np.random.Generator) -> dict[int, tuple[list, list]]:
        """{horizon: (prompts, noise-free scratchpads)} on fresh operands."""
        out = {}
        for horizon in self.horizons:
            pairs = arithmetic.addition_problems(self.held_out_per_horizon, horizon, rng)
            out[horizon] = ([arithmetic.encode_problem(a, b, horizon) for a, b in pairs],
                            [arithmetic.scratchpad(a, b, horizon, self.verbose)
                             for a, b in pairs])
        return out


def training_task(dataset_cfg) -> AdditionTask | None:
    """The task tiny-lm trains on for this dataset (None: the dataset has no training split)."""
    if dataset_cfg.name == "addition":
        return AdditionTask(int(dataset_cfg.max_digits), int(dataset_cfg.train_examples),
                            float(dataset_cfg.noise), list(dataset_cfg.horizons))
    return None


def _scratchpad_answer(completion: Sequence[int], verbose: bool = False) -> str | None:
    value = arithmetic.answer_of(list(completion), verbose)
    return None if value is None else str(value)


def addition_prompts(dataset_cfg, rng: np.random.Generator) -> list[LMPrompt]:
    """``dataset_cfg.prompts_per_horizon`` fresh problems per horizon in ``horizons``."""
    return scratchpad_prompts(list(dataset_cfg.horizons), int(dataset_cfg.prompts_per_horizon),
                              rng)


def scratchpad_prompts(horizons: Sequence[int], per_horizon: int, rng: np.random.Generator,
                       verbose: bool = False) -> list[LMPrompt]:
    """Scratchpad-addition prompts for tiny-lm: ``per_horizon`` problems of each digit count
    (``verbose``: answers in the verbose scratchpad, ``data/arithmetic.py``)."""
    prompts = []
    extract = functools.partial(_scratchpad_answer, verbose=verbose)
    width = arithmetic.step_width(verbose)
    for horizon in map(int, horizons):
        for a, b in arithmetic.addition_problems(per_horizon, horizon, rng):
            prompts.append(LMPrompt(arithmetic.encode_problem(a, b, horizon), str(a + b),
                                    extract, arithmetic.EOS, width * horizon + 1, horizon,
                                    arithmetic.scratchpad(a, b, horizon, verbose)))
    return prompts


def last_number(text: str) -> str | None:
    """The last number in ``text`` without thousands separators or a trailing period."""
    found = re.findall(r"-?\d[\d,]*\.?\d*", text)
    return found[-1].replace(",", "").rstrip(".") if found else None


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (nested braces allowed), spaces removed."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 1, start + len("\\boxed{")
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j].replace(" ", "")
    return None


def _decoded(tokenizer, extract: Callable[[str], str | None]):
    def answer(completion: Sequence[int]) -> str | None:
        return extract(tokenizer.decode(list(completion), skip_special_tokens=True))

    return answer


@dataclass
class TextQuestion:
    """A real model's question: ``reference`` and the ``extract``-or of answers from text."""

    question: str
    reference: str
    extract: Callable[[str], str | None]
    horizon: int = 1


def text_questions(dataset_cfg, rng: np.random.Generator) -> list[TextQuestion]:
    """``addition_text`` questions generated here, else GSM8K / MATH-500 by hub id."""
    if dataset_cfg.name == "addition_text":
        out = []
        for horizon in dataset_cfg.horizons:
            for a, b in arithmetic.addition_problems(int(dataset_cfg.prompts_per_horizon),
                                                     int(horizon), rng):
                out.append(TextQuestion(f"What is {a}+{b}? Answer with the number.",
                                        str(a + b), last_number, int(horizon)))
        return out
    from data.hub import load_hub_dataset

    rows = load_hub_dataset(dataset_cfg.hub_id, dataset_cfg.config, split=dataset_cfg.split)
    rows = rows.select(range(min(int(dataset_cfg.limit), len(rows))))
    if dataset_cfg.name == "math500":
        return [TextQuestion(r["problem"] + "\nPut the final answer in \\boxed{}.",
                             str(r["answer"]).replace(" ", ""), last_boxed) for r in rows]
    return [TextQuestion(r["question"],
                         str(r["answer"]).split("####")[-1].strip().replace(",", ""),
                         last_number) for r in rows]


def text_prompts(dataset_cfg, tokenizer, chat_template: bool, rng: np.random.Generator
                 ) -> list[LMPrompt]:
    """Prompts for a real model (``text_questions`` encoded, with the chat template)."""
    from models.lm.prompting import encode_prompt

    return [LMPrompt(encode_prompt(tokenizer, q.question, chat_template), q.reference,
                     _decoded(tokenizer, q.extract), tokenizer.eos_token_id,
                     int(dataset_cfg.max_new_tokens), q.horizon)
            for q in text_questions(dataset_cfg, rng)]


def lm_prompts(dataset_cfg, model_cfg, tokenizer, rng: np.random.Generator) -> list[LMPrompt]:
    """The evaluation prompts of ``dataset_cfg`` for ``model_cfg`` (checks they match)."""
    tiny = model_cfg.source == "tiny_lm"
    if dataset_cfg.name == "addition":
        if not tiny:
            raise UserError("dataset=addition is tiny-lm's token format; use "
                            "dataset=addition_text (or gsm8k/math500) with a real model")
        return addition_prompts(dataset_cfg, rng)
    if tiny:
        raise UserError(f"tiny-lm only knows dataset=addition, not '{dataset_cfg.name}'")
    if dataset_cfg.name not in ("addition_text", "gsm8k", "math500"):
        raise UserError(f"dataset={dataset_cfg.name} is not a language-model task; known: "
                        "addition, addition_text, gsm8k, math500")
    return text_prompts(dataset_cfg, tokenizer, bool(model_cfg.chat_template), rng)



def split_held_out(items: Sequence, held_out: int, dataset_name: str) -> tuple[list, list]:
    """The first ``held_out`` items for evaluation, the rest for training; one line when none
    is left for training."""
    items = list(items)
    if len(items) <= held_out:
        raise UserError(f"dataset={dataset_name} has {len(items)} prompts, none left for "
                        f"training after protocol.eval_prompts={held_out}")
    return items[:held_out], items[held_out:]
