"""Judge-free dialogue metrics, all measured with the frozen, unsteered model.

- trait expression of a response: mean over its tokens of
  log p(token | persona system prompt + user turn) - log p(token | user turn), the
  likelihood ratio of the persona prompt (how much more the prompted model agrees with what
  was said);
- coherence: mean log p(token | user turn) of the response under the unprompted model
  (minus log perplexity), with 4-gram repetition and distinct-2 beside it;
- coherence drift: the change of coherence over the dialogue (least-squares slope times
  turns - 1), coherence taken relative to the unsteered answer to the same user turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from methods.gcad.dialogue import HEADER, RESPONSE, USER, Dialogue
from models.lm.text_statistics import distinct_n, repetition_rate


@dataclass
class RowScores:
    """Per turn (T,) scores of one dialogue row."""

    trait: np.ndarray
    coherence: np.ndarray
    repetition: np.ndarray
    tokens: list[list[int]]  # the response tokens of each turn


@torch.no_grad()
def continuation_logprobs(model, prefix: list[int], continuations: list[list[int]],
                          pad_id: int) -> list[torch.Tensor]:
    """log p(c_t | prefix + c_<t) token by token for each continuation; the shared prefix
    is read once and its KV cache repeated over the batch (continuations right-padded)."""
    from transformers import DynamicCache

    device = next(model.parameters()).device
    cache = DynamicCache()
    first = torch.log_softmax(model(input_ids=torch.tensor([prefix], device=device),
                                    cache=cache, use_cache=True).logits[0, -1].float(), -1)
    width, n = max(len(c) for c in continuations), len(continuations)
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, c in enumerate(continuations):
        ids[i, :len(c)] = torch.tensor(c)
        mask[i, :len(c)] = 1
    ids, mask = ids.to(device), mask.to(device)
    cache.batch_repeat_interleave(n)
    logits = model(input_ids=ids, cache=cache, use_cache=True,
                   attention_mask=torch.cat([torch.ones(n, len(prefix), dtype=torch.long,
                                                        device=device), mask], 1),
                   position_ids=(len(prefix) + torch.arange(width, device=device))[None]
                   .expand(n, -1)).logits
    rest = torch.log_softmax(logits[:, :-1].float(), -1).gather(-1, ids[:, 1:, None])[..., 0]
    return [torch.cat([first[c[0]].reshape(1), rest[i, :len(c) - 1]]).cpu()
            for i, c in enumerate(continuations)]


def score_dialogue(model, dialogue: Dialogue, persona_ids: list[list[int]], pad_id: int
                   ) -> list[RowScores]:
    """Trait, coherence and repetition per row and turn. Each response is scored as the
    answer to its own user turn (the history is left out: a history full of the persona
    would teach it in context and hide both the trait and the decay). ``persona_ids[b]``
    is the system block of row b's persona, the trait's reference prompt."""
    batch, n_turns = dialogue.ids.shape[0], dialogue.contamination.shape[1]
    prompt, response = {}, {}
    for b in range(batch):
        roles = dialogue.roles[b]
        for t in range(n_turns):
            here = dialogue.mask[b].bool() & (dialogue.turns[b] == t)
            prompt[b, t] = dialogue.ids[b][here & ((roles == USER) | (roles == HEADER))].tolist()
            response[b, t] = dialogue.ids[b][here & (roles == RESPONSE)].tolist()
    plain, prompted = {}, {}
    for prefix_of, out in ((lambda b, t: prompt[b, t], plain),
                           (lambda b, t: persona_ids[b] + prompt[b, t], prompted)):
        groups: dict[tuple[int, ...], list[tuple[int, int]]] = {}
        for (b, t), tokens in response.items():
            if tokens:
                groups.setdefault(tuple(prefix_of(b, t)), []).append((b, t))
        for prefix, members in groups.items():
            scored = continuation_logprobs(model, list(prefix),
                                           [response[m] for m in members], pad_id)
            out.update(zip(members, scored, strict=True))
    nan = float("nan")
    return [RowScores(
        trait=np.array([float((prompted[b, t] - plain[b, t]).mean()) if response[b, t]
                        else nan for t in range(n_turns)]),
        coherence=np.array([float(plain[b, t].mean()) if response[b, t] else nan
                            for t in range(n_turns)]),
        repetition=np.array([repetition_rate(response[b, t]) for t in range(n_turns)]),
        tokens=[response[b, t] for t in range(n_turns)]) for b in range(batch)]


def drift(curve: np.ndarray) -> float:
    """Change over the dialogue: the least-squares slope per turn times (turns - 1)."""
    turns = np.arange(len(curve))
    ok = ~np.isnan(curve)
    if ok.sum() < 2:
        return float("nan")
    return float(np.polyfit(turns[ok], curve[ok], 1)[0] * (len(curve) - 1))


def summarize(rows: list[RowScores], reference: list[RowScores] | None = None
              ) -> dict[str, float | list[float]]:
    """Mean over rows (personas) of one variant: curves per turn and the headline numbers.
    With ``reference`` (the unsteered rows of the same personas, in the same order) the
    coherence is the gap to the unsteered answer to the same user turn, so that the turns'
    own difficulty cancels out of the drift."""
    trait = np.nanmean([r.trait for r in rows], axis=0)
    coherence = np.nanmean([r.coherence for r in rows], axis=0)
    if reference is not None:
        coherence = coherence - np.nanmean([r.coherence for r in reference], axis=0)
    return {"trait_curve": trait.tolist(), "coherence_curve": coherence.tolist(),
            "trait_turn1": float(trait[0]), "trait_turn_last": float(trait[-1]),
            "trait_mean": float(np.nanmean(trait)),
            "coherence_mean": float(np.nanmean(coherence)),
            "coherence_drift": drift(coherence),
            "repetition": float(np.nanmean([r.repetition for r in rows])),
            "distinct2": float(np.mean([distinct_n(r.tokens, 2) for r in rows]))}


def rising(levels: Sequence[float]) -> int:
    """The length of the rising part of a strength curve: up to its (first) maximum."""
    finite = [v if np.isfinite(v) else -np.inf for v in levels]
    return int(np.argmax(finite)) + 1


def at_level(levels: Sequence[float], values: Sequence[float], target: float) -> float:
    """``values`` (one per strength, increasing strengths, the first strength 0: no
    steering) linearly interpolated where the turn-1 trait ``levels`` first reaches
    ``target`` on the curve's rising part; nan when it never does. This compares methods at
    equal turn-1 trait, not at one coefficient."""
    for i in range(rising(levels)):
        if levels[i] >= target:
            if i == 0:
                return float(values[0])
            share = (target - levels[i - 1]) / (levels[i] - levels[i - 1])
            return float(values[i - 1] + share * (values[i] - values[i - 1]))
    return float("nan")


def common_level(curves: Sequence[Sequence[float]]) -> float:
    """The highest turn-1 trait every method reaches: the smallest of the curves' maxima."""
    return float(min(max(v for v in c if np.isfinite(v)) for c in curves))
