"""The next-token interface: log pi(. | prompt, prefix) for generated prefixes.

Two implementations: ``TablePolicy`` (an exact tabular policy over a token tree, numpy) and
``CausalLMPolicy`` (any transformers causal LM, full-precision log-softmax of the logits:
no top-k, top-p or temperature warping, so log-probabilities are the model's own).

Searches advance step-synchronously with ``start`` / ``step``: ``step(state, parents,
tokens)`` extends the prefixes ``parents`` of the current state by one token each and
returns the new state with its next-token log-probabilities. ``CausalLMPolicy`` keeps the
KV cache in the state, reordered along with the beams, and computes logits for the last
position only, so one step costs one forward pass over one token per live prefix.
``log_probs(prefixes)`` recomputes arbitrary prefixes from scratch (teacher forcing).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np


class NextTokenPolicy(Protocol):
    vocab_size: int
    eos_id: int | None
    forward_calls: int  # prefixes evaluated so far

    def log_probs(self, prefixes: Sequence[tuple[int, ...]]) -> np.ndarray:
        """(len(prefixes), vocab_size) next-token log-probabilities."""

    def start(self) -> tuple[Any, np.ndarray]:
        """The state holding the empty prefix, and its (1, vocab) log-probabilities."""

    def step(self, state: Any, parents: np.ndarray, tokens: np.ndarray
             ) -> tuple[Any, np.ndarray]:
        """Prefixes ``state[parents[i]] + (tokens[i],)``, and their log-probabilities."""


class TablePolicy:
    """pi given by a function prefix -> probability vector (an explicit token tree)."""

    def __init__(self, next_probs: Callable[[tuple[int, ...]], np.ndarray], vocab_size: int,
                 eos_id: int | None = None) -> None:
        self.next_probs, self.vocab_size, self.eos_id = next_probs, vocab_size, eos_id
        self.forward_calls = 0

    def log_probs(self, prefixes: Sequence[tuple[int, ...]]) -> np.ndarray:
        self.forward_calls += len(prefixes)
        with np.errstate(divide="ignore"):
            return np.log(np.array([self.next_probs(tuple(p)) for p in prefixes]))

    def start(self) -> tuple[list[tuple[int, ...]], np.ndarray]:
        return [()], self.log_probs([()])

    def step(self, state, parents, tokens):
        prefixes = [state[p] + (int(t),) for p, t in zip(parents, tokens, strict=True)]
        return prefixes, self.log_probs(prefixes)


def hard_instance(coverage_c: int, hard_steps: int, lure_branching: int = 1
                  ) -> tuple[TablePolicy, tuple[int, ...]]:
    """The instance where log-likelihood beam search needs Omega(C^2) samples.

    Token 0 is optimal; on the optimal prefix pi(0) = 1/C and m = C/2 lure tokens 1..m each
    have probability (1 - 1/C)/m > 1/C. A lure leads to a dead sub-tree: deterministic
    (token 0 with probability 1) when ``lure_branching`` = 1, else uniform over
    ``lure_branching`` tokens at every step (stochastic lures: every dead prefix still
    out-scores the optimal one when lure_branching < C/2). y* = (0,) * hard_steps,
    C*(x) = C and C_seq(x) = C^hard_steps.
    """
    m = max(1, coverage_c // 2)
    vocab = max(m + 1, lure_branching)
    on_path = np.zeros(vocab)
    on_path[0], on_path[1:m + 1] = 1.0 / coverage_c, (1 - 1.0 / coverage_c) / m
    dead = np.zeros(vocab)
    dead[:lure_branching] = 1.0 / lure_branching

    def next_probs(prefix: tuple[int, ...]) -> np.ndarray:
        return on_path if all(t == 0 for t in prefix) else dead

    return TablePolicy(next_probs, vocab), (0,) * hard_steps


@dataclass
class LMState:
    """Live prefixes of a ``CausalLMPolicy`` search and their KV cache (one row each)."""

    prefixes: list[tuple[int, ...]]
    cache: Any = field(repr=False)


class CausalLMPolicy:
    """A transformers causal LM conditioned on one prompt (token ids)."""

    def __init__(self, model, prompt_ids: Sequence[int], eos_id: int | None,
                 pad_id: int = 0, batch_size: int = 64) -> None:
        import torch

        self.model, self.prompt = model, list(prompt_ids)
        self.eos_id, self.pad_id, self.batch_size = eos_id, pad_id, batch_size
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        self.device = next(model.parameters()).device
        self.forward_calls = 0
        self._torch = torch

    def _log_softmax(self, logits) -> np.ndarray:
        torch = self._torch
        return torch.log_softmax(logits[:, -1, :].float(), dim=-1).cpu().numpy()[
            :, : self.vocab_size]

    def start(self) -> tuple[LMState, np.ndarray]:
        torch = self._torch
        from transformers import DynamicCache

        cache = DynamicCache()
        self.forward_calls += 1
        with torch.no_grad():
            out = self.model(input_ids=torch.tensor([self.prompt], device=self.device),
                             cache=cache, use_cache=True, logits_to_keep=1)
        return LMState([()], out.cache), self._log_softmax(out.logits)

    def step(self, state: LMState, parents, tokens) -> tuple[LMState, np.ndarray]:
        torch = self._torch
        parents = np.asarray(parents, dtype=np.int64)
        prefixes = [state.prefixes[p] + (int(t),) for p, t in zip(parents, tokens, strict=True)]
        cache = state.cache
        cache.reorder_cache(torch.as_tensor(parents, device=self.device))
        position = len(self.prompt) + len(prefixes[0]) - 1
        self.forward_calls += len(prefixes)
        with torch.no_grad():
            out = self.model(
                input_ids=torch.as_tensor(np.asarray(tokens)[:, None], device=self.device),
                position_ids=torch.full((len(prefixes), 1), position, device=self.device),
                cache=cache, use_cache=True, logits_to_keep=1)
        return LMState(prefixes, out.cache), self._log_softmax(out.logits)

    def log_probs(self, prefixes: Sequence[tuple[int, ...]]) -> np.ndarray:
        """Full recomputation for arbitrary prefixes (left-padded batches)."""
        torch = self._torch
        self.forward_calls += len(prefixes)
        out = []
        for start in range(0, len(prefixes), self.batch_size):
            chunk = [self.prompt + list(p) for p in prefixes[start:start + self.batch_size]]
            width = max(len(s) for s in chunk)
            ids = torch.full((len(chunk), width), self.pad_id, dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for i, seq in enumerate(chunk):  # left padding: the last position is the next one
                ids[i, width - len(seq):] = torch.tensor(seq)
                mask[i, width - len(seq):] = 1
            position = (mask.cumsum(-1) - 1).clamp(min=0)
            with torch.no_grad():
                logits = self.model(input_ids=ids.to(self.device),
                                    attention_mask=mask.to(self.device),
                                    position_ids=position.to(self.device),
                                    logits_to_keep=1).logits
            out.append(self._log_softmax(logits))
        return np.concatenate(out)
