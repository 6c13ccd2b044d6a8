"""The next-token interface: log pi(. | prompt, prefix) for a batch of generated prefixes.

Two implementations: ``TablePolicy`` (an exact tabular policy over a token tree, numpy) and
``CausalLMPolicy`` (any transformers causal LM, full-precision log-softmax of the logits:
no top-k, top-p or temperature warping, so log-probabilities are the model's own).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np


class NextTokenPolicy(Protocol):
    vocab_size: int
    eos_id: int | None
    forward_calls: int  # prefixes evaluated so far

    def log_probs(self, prefixes: Sequence[tuple[int, ...]]) -> np.ndarray:
        """(len(prefixes), vocab_size) next-token log-probabilities."""


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


def hard_instance(coverage_c: int, hard_steps: int) -> tuple[TablePolicy, tuple[int, ...]]:
    """The instance where log-likelihood beam search needs Omega(C^2) samples.

    Token 0 is optimal; on the optimal prefix pi(0) = 1/C and m = C/2 lure tokens 1..m each
    have probability (1 - 1/C)/m > 1/C. A lure leads to a dead sub-tree that is
    deterministic afterwards (token 0 with probability 1), so every dead prefix keeps a
    higher likelihood than the optimal one. y* = (0,) * hard_steps; C*(x) = C and
    C_seq(x) = C^hard_steps.
    """
    m = max(1, coverage_c // 2)
    on_path = np.array([1.0 / coverage_c] + [(1 - 1.0 / coverage_c) / m] * m)
    dead = np.zeros(m + 1)
    dead[0] = 1.0

    def next_probs(prefix: tuple[int, ...]) -> np.ndarray:
        return on_path if all(t == 0 for t in prefix) else dead

    return TablePolicy(next_probs, m + 1), (0,) * hard_steps


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

    def log_probs(self, prefixes: Sequence[tuple[int, ...]]) -> np.ndarray:
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
                                    position_ids=position.to(self.device)).logits[:, -1, :]
            out.append(torch.log_softmax(logits.float(), dim=-1).cpu().numpy())
        return np.concatenate(out)[:, : self.vocab_size]
