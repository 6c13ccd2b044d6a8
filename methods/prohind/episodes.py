"""Single- and multi-turn episodes as rollouts: the policy states its confidence and
answers; after a wrong answer the environment replies (``WRONG`` in tiny-lm's format, a
user turn such as "That is not correct. Try again." for a real chat model) and the policy
tries again, up to ``turns`` answers. In a tiny-lm ``tool`` episode the policy first calls
the lookup tool and the environment returns the problem with the hidden operand filled in.
The returned rollouts hold the whole episode after the prompt, with the environment's
tokens outside the completion mask (they get no gradient).

A task supplies ``prompt_ids``, ``probe_ids`` (the probing question "will you succeed?"),
``correct(completion)`` and ``stated_confidence(completion)``; an ``EpisodeFormat`` says
how long an answer may be and what the environment replies."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from data.confidence_tasks import (
    CALL,
    EOS,
    HIDDEN,
    NO,
    PAD,
    PROBE,
    WRONG,
    YES,
    tool_response,
)
from models.lm.rollout import Rollouts, Sampling, given_completions, sample_rollouts

FEEDBACK_TEXT = "That is not correct. Try again."
CONFIDENCE_INSTRUCTION = (
    "Before you solve it, say how likely you are to get it right: start your reply with "
    "'Confidence: k' where k is 0 (surely wrong) to 9 (surely right).")
PROBE_TEXT = "Will you answer this correctly? Reply with Yes or No only."


@dataclass(frozen=True)
class EpisodeFormat:
    answer_length: int  # new tokens per answer
    feedback: tuple[int, ...]  # the environment's reply to a wrong answer
    eos_id: int | None
    pad_id: int
    yes_id: int  # the probing question's answers
    no_id: int
    sampling: Sampling = field(default_factory=Sampling)
    confidence_first: bool = True  # tiny-lm: <conf_k> is one extra token before the answer
    tool: bool = False  # tiny-lm tool episodes: <conf_k>, CALL, the tool's response


def tiny_format(max_digits: int, tool: bool = False) -> EpisodeFormat:
    """tiny-lm's token format (``data/confidence_tasks.py``); the policy never writes the
    environment's tokens."""
    return EpisodeFormat(2 * max_digits + 1, (WRONG,), EOS, PAD, YES, NO,
                         Sampling(suppress=(WRONG, HIDDEN, PROBE, YES, NO)), tool=tool)


def text_format(tokenizer, chat_template: bool, max_new_tokens: int) -> EpisodeFormat:
    """A real model: the feedback is a user turn in the chat template (the assistant's
    end-of-turn is already in its completion), the probe's answers the first tokens of
    "Yes" and "No"."""
    from models.lm.prompting import pad_id

    if chat_template:
        answer = "@@the-answer@@"  # a marker: the reply is what the template puts after it
        answered = [{"role": "user", "content": "@@the-question@@"},
                    {"role": "assistant", "content": answer}]
        full = tokenizer.apply_chat_template(
            [*answered, {"role": "user", "content": FEEDBACK_TEXT}],
            add_generation_prompt=True, tokenize=False)
        reply = full[full.index(answer) + len(answer):]
        eos_text = tokenizer.decode([tokenizer.eos_token_id])
        reply = reply.removeprefix(eos_text)
    else:
        reply = f"\n{FEEDBACK_TEXT}\n"
    feedback = tuple(tokenizer(reply, add_special_tokens=False)["input_ids"])

    def first(word: str) -> int:
        return tokenizer(word, add_special_tokens=False)["input_ids"][0]

    return EpisodeFormat(max_new_tokens, feedback, tokenizer.eos_token_id, pad_id(tokenizer),
                         first("Yes"), first("No"), confidence_first=False)


@dataclass
class TextConfidencePrompt:
    """A real model's problem: ``prompt_ids`` ask for the stated confidence first, then the
    answer; ``probe_ids`` ask the probing question instead; the answer of each attempt is
    ``extract``-ed from the decoded text between the environment's replies."""

    prompt_ids: list[int]
    probe_ids: list[int]
    reference: str
    extract: Callable[[str], str | None]
    decode: Callable[[Sequence[int]], str]

    def stated_confidence(self, completion: Sequence[int]) -> float | None:
        """k / 9 of the first "Confidence: k" before any feedback (None if not stated)."""
        first_turn = self.decode(completion).split(FEEDBACK_TEXT)[0]
        found = re.search(r"Confidence:\s*\**\s*([0-9])", first_turn)
        return int(found.group(1)) / 9 if found else None

    def correct(self, completion: Sequence[int]) -> bool:
        attempts = self.decode(completion).split(FEEDBACK_TEXT)
        return any(self.extract(a) == self.reference for a in attempts)


def run_episodes(policy, tasks: Sequence, turns: int, fmt: EpisodeFormat,
                 generator: torch.Generator) -> Rollouts:
    """One episode per task (repeat a task for a group)."""
    if fmt.tool and any(t.tool_result is None for t in tasks):
        raise ValueError("tool episodes need tasks with a tool result")
    episodes: list[list[int]] = [[] for _ in tasks]
    generated: list[list[int]] = [[] for _ in tasks]

    def act(indices: list[int], length: int) -> None:
        prompts = [tasks[i].prompt_ids + episodes[i] for i in indices]
        out = sample_rollouts(policy, prompts, length, fmt.sampling, eos_id=fmt.eos_id,
                              pad_id=fmt.pad_id, generator=generator).completions()
        for i, tokens in zip(indices, out, strict=True):
            episodes[i] += tokens
            generated[i] += [1] * len(tokens)

    def respond(i: int, tokens: Sequence[int]) -> None:
        episodes[i] += tokens
        generated[i] += [0] * len(tokens)

    active = list(range(len(tasks)))
    if fmt.tool:
        act(active, 2)  # <conf_k>, then the action
        active = [i for i in active if episodes[i][1:2] == [CALL]]
        for i in active:
            respond(i, tool_response(tasks[i].tool_result, episodes[i][:1]))
        if active:
            act(active, fmt.answer_length)
    else:
        act(active, int(fmt.confidence_first) + fmt.answer_length)
    for _ in range(turns - 1):
        retry = [i for i in active if not tasks[i].correct(episodes[i])]
        if not retry:
            break
        for i in retry:
            respond(i, fmt.feedback)
        act(retry, fmt.answer_length)
    out = given_completions([t.prompt_ids for t in tasks], episodes, fmt.pad_id)
    for i, flags in enumerate(generated):
        out.completion_mask[i, : len(flags)] = torch.as_tensor(flags)
    return out
