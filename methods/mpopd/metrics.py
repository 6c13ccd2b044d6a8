"""What distillation does to generations: accuracy, length, repetition, teacher NLL."""

from __future__ import annotations

import numpy as np
import torch

from models.lm.rollout import Rollouts, teacher_forced_logprobs
from models.lm.text_statistics import repetition_rate


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
