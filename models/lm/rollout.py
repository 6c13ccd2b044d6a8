"""Batched sampling from any causal LM (rollouts) and teacher-forced log-probabilities.

Every sampling parameter is explicit: ``temperature``, ``top_k`` (0 = off) and ``top_p``
(1 = off); nothing is inherited from a checkpoint's generation config (transformers'
``generate`` would silently truncate to the top 50 tokens). The per-token log-probabilities
returned are those of the distribution the token was drawn from (after temperature and
truncation), so they equal a teacher-forced recomputation with the same settings.

Layout: prompts are left-padded to a common length P; completions (length T) follow, each
ending at its first EOS (included) or at ``max_new_tokens``; ``completion_mask`` marks the
generated tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass
class Sampling:
    temperature: float = 1.0
    top_k: int = 0  # 0: off
    top_p: float = 1.0  # 1: off
    suppress: tuple[int, ...] = ()  # tokens never sampled (an environment's own tokens)

    def log_probs(self, logits: torch.Tensor) -> torch.Tensor:
        """Log-probabilities of the sampling distribution (suppressed tokens removed, then
        temperature, top-k and top-p, as transformers orders its warpers)."""
        scores = logits.float() / self.temperature
        if self.suppress:
            scores[..., list(self.suppress)] = float("-inf")
        if self.top_k > 0:
            kth = torch.topk(scores, min(self.top_k, scores.shape[-1]), dim=-1).values[..., -1:]
            scores = scores.masked_fill(scores < kth, float("-inf"))
        if self.top_p < 1.0:
            sorted_scores, order = torch.sort(scores, dim=-1, descending=True)
            cumulative = torch.softmax(sorted_scores, dim=-1).cumsum(dim=-1)
            drop = cumulative - torch.softmax(sorted_scores, dim=-1) >= self.top_p
            scores = scores.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
        return torch.log_softmax(scores, dim=-1)


@dataclass
class Rollouts:
    sequences: torch.Tensor  # (B, P + T) prompt (left-padded) then completion
    attention_mask: torch.Tensor  # (B, P + T)
    completion_mask: torch.Tensor  # (B, T): 1 on generated tokens (EOS included): the loss
    # sees these; tokens an environment inserted are in the sequence but not in this mask
    logprobs: torch.Tensor  # (B, T): log-prob of each generated token, 0 where masked
    prompt_length: int  # P

    @property
    def completion_ids(self) -> torch.Tensor:
        return self.sequences[:, self.prompt_length:]

    def completions(self) -> list[list[int]]:
        """The tokens after each prompt (up to and including the last EOS; environment
        tokens of multi-turn episodes included)."""
        span = self.attention_mask[:, self.prompt_length:]
        return [ids[mask.bool()].tolist() for ids, mask in
                zip(self.completion_ids, span, strict=True)]


def left_pad(prompts: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask), prompts left-padded to the longest."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, prompt in enumerate(prompts):
        ids[i, width - len(prompt):] = torch.as_tensor(list(prompt))
        mask[i, width - len(prompt):] = 1
    return ids, mask


def position_ids(mask: torch.Tensor) -> torch.Tensor:
    """Positions of a (left-)padded batch: 0 at each row's first real token."""
    return (mask.cumsum(-1) - 1).clamp(min=0)


class _Decoder:
    """One model's next-token logits for a growing batch, with or without a KV cache."""

    def __init__(self, model, use_cache: bool) -> None:
        from transformers import DynamicCache

        self.model, self.use_cache = model, use_cache
        self.cache = DynamicCache() if use_cache else None

    def next_logits(self, ids: torch.Tensor, mask: torch.Tensor, new: int) -> torch.Tensor:
        """Logits after ``ids`` (the last ``new`` tokens not seen yet when cached)."""
        if self.use_cache:
            out = self.model(input_ids=ids[:, -new:], attention_mask=mask,
                             position_ids=position_ids(mask)[:, -new:], cache=self.cache,
                             use_cache=True, logits_to_keep=1)
            self.cache = out.cache
        else:
            out = self.model(input_ids=ids, attention_mask=mask, position_ids=position_ids(mask),
                             logits_to_keep=1)
        return out.logits[:, -1, :]


@torch.no_grad()
def sample_rollouts(model, prompts: Sequence[Sequence[int]], max_new_tokens: int,
                    sampling: Sampling | None = None, eos_id: int | None = None,
                    pad_id: int = 0, generator: torch.Generator | None = None,
                    use_cache: bool = True, combine=None) -> Rollouts:
    """Sample one completion per prompt (repeat a prompt for a group), batched; with
    ``use_cache`` the KV cache is extended one token per step, else every step recomputes
    the whole sequence (the same draws from the same ``generator``).

    ``model`` may be a list of models decoding in lockstep, each with its own cache;
    ``combine(list of logits) -> logits`` then defines the distribution sampled from (a
    mixture proposal), whose log-probs the rollouts hold."""
    sampling = sampling or Sampling()
    models = list(model) if isinstance(model, list | tuple) else [model]
    device = next(models[0].parameters()).device
    decoders = [_Decoder(m, use_cache) for m in models]
    ids, mask = (t.to(device) for t in left_pad(prompts, pad_id))
    prompt_length, batch = ids.shape[1], ids.shape[0]
    finished = torch.zeros(batch, dtype=torch.bool, device=device)
    completion_mask = torch.zeros((batch, max_new_tokens), dtype=torch.long, device=device)
    logprobs = torch.zeros((batch, max_new_tokens), device=device)
    new = prompt_length
    for t in range(max_new_tokens):
        logits = [d.next_logits(ids, mask, new) for d in decoders]
        lp = sampling.log_probs(logits[0] if combine is None else combine(logits))
        uniform = torch.rand(batch, generator=generator, device="cpu").to(device)
        cdf = lp.exp().cumsum(-1)
        token = torch.searchsorted(cdf, (uniform * cdf[:, -1])[:, None]).squeeze(-1)
        token = token.clamp(max=lp.shape[-1] - 1)
        token = torch.where(finished, torch.full_like(token, pad_id), token)
        completion_mask[:, t] = (~finished).long()
        logprobs[:, t] = torch.where(finished, torch.zeros(batch, device=device),
                                     lp.gather(-1, token[:, None]).squeeze(-1))
        ids = torch.cat([ids, token[:, None]], dim=1)
        mask = torch.cat([mask, (~finished).long()[:, None]], dim=1)
        new = 1
        if eos_id is not None:
            finished = finished | (token == eos_id)
        if finished.all():
            completion_mask = completion_mask[:, : t + 1]
            logprobs = logprobs[:, : t + 1]
            break
    return Rollouts(ids, mask, completion_mask, logprobs, prompt_length)


def given_completions(prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]],
                      pad_id: int = 0) -> Rollouts:
    """Rollouts holding given completions (teacher forcing: e.g. reference answers), in the
    layout ``sample_rollouts`` returns; their ``logprobs`` are left at 0."""
    ids, mask = left_pad(prompts, pad_id)
    width = max(len(c) for c in completions)
    tail = torch.full((len(completions), width), pad_id, dtype=torch.long)
    completion_mask = torch.zeros((len(completions), width), dtype=torch.long)
    for i, completion in enumerate(completions):
        tail[i, : len(completion)] = torch.as_tensor(list(completion))
        completion_mask[i, : len(completion)] = 1
    return Rollouts(torch.cat([ids, tail], dim=1), torch.cat([mask, completion_mask], dim=1),
                    completion_mask, torch.zeros(completion_mask.shape), ids.shape[1])


def completion_logits(model, rollouts: Rollouts) -> torch.Tensor:
    """Logits (B, T, vocab) predicting each completion token, from one teacher-forced pass
    (gradients flow: training losses use this)."""
    device = next(model.parameters()).device
    seq, mask = rollouts.sequences.to(device), rollouts.attention_mask.to(device)
    width = rollouts.completion_mask.shape[1]
    logits = model(input_ids=seq, attention_mask=mask, position_ids=position_ids(mask),
                   logits_to_keep=width + 1).logits
    return logits[:, :-1, :]


def teacher_forced_logprobs(model, rollouts: Rollouts, sampling: Sampling | None = None
                            ) -> torch.Tensor:
    """Per-token log-probs (B, T) of the completion tokens under ``model`` with the given
    sampling settings (0 where masked)."""
    sampling = sampling or Sampling()
    lp = sampling.log_probs(completion_logits(model, rollouts))
    tokens = rollouts.completion_ids[:, : lp.shape[1]].to(lp.device)
    picked = lp.gather(-1, tokens[..., None]).squeeze(-1)
    mask = rollouts.completion_mask.bool().to(lp.device)
    return torch.where(mask, picked, torch.zeros_like(picked))
