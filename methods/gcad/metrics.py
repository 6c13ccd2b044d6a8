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
def response_logprobs(model, systems: list[list[int]], prompts: list[list[int]],
                      responses: list[list[int]], pad_id: int, batch_size: int
                      ) -> list[torch.Tensor]:
    """log p(response | system + prompt) token by token, per row (left-padded batches)."""
    device = next(model.parameters()).device
    out = []
    for start in range(0, len(responses), batch_size):
        chunk = slice(start, start + batch_size)
        rows = [s + p + r for s, p, r in zip(systems[chunk], prompts[chunk], responses[chunk],
                                             strict=True)]
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, row in enumerate(rows):
            ids[i, width - len(row):] = torch.tensor(row)
            mask[i, width - len(row):] = 1
        ids, mask = ids.to(device), mask.to(device)
        keep = max(len(r) for r in responses[chunk]) + 1  # the lm head only where scored
        logits = model(input_ids=ids, attention_mask=mask, logits_to_keep=keep,
                       position_ids=(mask.cumsum(-1) - 1).clamp(min=0)).logits
        logp = torch.log_softmax(logits[:, :-1].float(), -1).gather(
            -1, ids[:, width - keep + 1:, None]).squeeze(-1)
        for i, response in enumerate(responses[chunk]):
            out.append(logp[i, logp.shape[1] - len(response):].cpu() if response
                       else torch.zeros(0))
    return out


def score_dialogue(model, dialogue: Dialogue, persona_ids: list[list[int]], pad_id: int,
                   batch_size: int = 16) -> list[RowScores]:
    """Trait, coherence and repetition per row and turn. Each response is scored as the
    answer to its own user turn (the history is left out: a history full of the persona
    would teach it in context and hide both the trait and the decay). ``persona_ids[b]``
    is the system block of row b's persona, the trait's reference prompt."""
    n_turns = dialogue.contamination.shape[1]
    prompts, responses, persona = [], [], []
    for b in range(len(dialogue.ids)):
        for t in range(n_turns):
            here = dialogue.mask[b].bool() & (dialogue.turns[b] == t)
            roles = dialogue.roles[b]
            prompts.append(dialogue.ids[b][here & ((roles == USER) | (roles == HEADER))].tolist())
            responses.append(dialogue.ids[b][here & (roles == RESPONSE)].tolist())
            persona.append(persona_ids[b])
    plain = response_logprobs(model, [[] for _ in prompts], prompts, responses, pad_id,
                              batch_size)
    prompted = response_logprobs(model, persona, prompts, responses, pad_id, batch_size)
    scores = []
    for b in range(len(dialogue.ids)):
        rows = range(b * n_turns, (b + 1) * n_turns)
        nan = float("nan")
        scores.append(RowScores(
            trait=np.array([float((prompted[i] - plain[i]).mean()) if responses[i] else nan
                            for i in rows]),
            coherence=np.array([float(plain[i].mean()) if responses[i] else nan for i in rows]),
            repetition=np.array([repetition_rate(responses[i]) for i in rows]),
            tokens=[responses[i] for i in rows]))
    return scores


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
