"""What distillation does to generations: accuracy, length, repetition, teacher NLL."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from models.lm.rollout import Rollouts, teacher_forced_logprobs


def repetition_rate(tokens: Sequence[int], n: int = 4) -> float:
    """Fraction of the n-grams of a sequence that already occurred earlier in it."""
    grams = [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]
    seen, repeated = set(), 0
    for gram in grams:
        repeated += gram in seen
        seen.add(gram)
    return repeated / len(grams) if grams else 0.0


def generation_metrics(tasks, rollouts: Rollouts, teacher) -> dict[str, float]:
    """Accuracy, mean generated length, mean 4-gram repetition rate and the teacher's mean
    per-token negative log-likelihood of the generated tokens."""
    completions = rollouts.completions()
    with torch.no_grad():
        nll = -teacher_forced_logprobs(teacher, rollouts)
    mask = rollouts.completion_mask.to(nll.device)
    return {"acc": float(np.mean([t.correct(c) for t, c in
                                  zip(tasks, completions, strict=True)])),
            "length": float(np.mean([len(c) for c in completions])),
            "repetition": float(np.mean([repetition_rate(c) for c in completions])),
            "teacher_nll": float((nll * mask).sum() / mask.sum())}
