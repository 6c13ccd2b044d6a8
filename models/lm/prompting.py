"""Prompts as token ids, and teacher-forced evaluation of a completion."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def encode_prompt(tokenizer, text: str, chat_template: bool) -> list[int]:
    """Token ids of a user prompt; with ``chat_template`` wrapped as one user turn followed
    by the assistant's generation prompt."""
    if chat_template:
        text = tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                             add_generation_prompt=True, tokenize=False)
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])
    return list(tokenizer(text)["input_ids"])


def teacher_forced_log_probs(model, prompts: Sequence[Sequence[int]],
                             targets: Sequence[Sequence[int]], pad_id: int = 0,
                             batch_size: int = 256) -> list[np.ndarray]:
    """Per-position next-token log-probabilities (target length, vocab) of each target given
    its prompt, from one right-padded forward pass per batch."""
    import torch

    device = next(model.parameters()).device
    out = []
    for start in range(0, len(prompts), batch_size):
        chunk = [list(p) + list(t) for p, t in zip(prompts[start:start + batch_size],
                                                   targets[start:start + batch_size],
                                                   strict=True)]
        width = max(len(s) for s in chunk)
        ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        for i, seq in enumerate(chunk):
            ids[i, : len(seq)] = torch.tensor(seq)
            mask[i, : len(seq)] = 1
        with torch.no_grad():
            logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits
        logp = torch.log_softmax(logits.float(), dim=-1).cpu().numpy()
        for i, (p, t) in enumerate(zip(prompts[start:start + batch_size],
                                       targets[start:start + batch_size], strict=True)):
            out.append(logp[i, len(p) - 1: len(p) + len(t) - 1])
    return out


def teacher_forced_accuracy(model, prompts, targets, pad_id: int = 0) -> np.ndarray:
    """Fraction of target positions where the model's most likely next token is the
    target token, one value per example."""
    logps = teacher_forced_log_probs(model, prompts, targets, pad_id)
    return np.array([float(np.mean(lp.argmax(-1) == np.asarray(t)))
                     for lp, t in zip(logps, targets, strict=True)])
