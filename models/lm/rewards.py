"""Outcome rewards for post-training, as components ``reward(task, completion) -> float``:
``task`` is an LM task prompt (``data/lm_tasks.py``: ``correct``, ``prompt_ids``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class ExactVerifier:
    """1 if the completion's extracted answer equals the reference, else 0."""

    def __call__(self, task, completion: Sequence[int]) -> float:
        return float(task.correct(completion))


class NoisyVerifier:
    """The exact verdict, flipped with probability ``flip`` (an imperfect verifier)."""

    def __init__(self, flip: float, rng: np.random.Generator) -> None:
        self.flip, self.rng = flip, rng

    def __call__(self, task, completion: Sequence[int]) -> float:
        correct = task.correct(completion)
        return float(correct != (self.rng.random() < self.flip))


class RewardModel:
    """A sequence-classification reward model by hub id or folder: the policy's prompt +
    completion is decoded with the policy's tokenizer, re-encoded with the reward model's,
    and scored by its first logit."""

    def __init__(self, name: str, policy_tokenizer, device: str = "cpu") -> None:
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.model = AutoModelForSequenceClassification.from_pretrained(name).to(device).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(name)
        self.policy_tokenizer, self.device = policy_tokenizer, device

    def __call__(self, task, completion: Sequence[int]) -> float:
        import torch

        text = self.policy_tokenizer.decode(list(task.prompt_ids) + list(completion),
                                            skip_special_tokens=True)
        inputs = self.tokenizer(text, return_tensors="pt").to(self.device)
        with torch.no_grad():
            return float(self.model(**inputs).logits[0, 0])
