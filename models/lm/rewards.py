"""Outcome rewards for post-training, as components ``reward(task, completion) -> float``:
``task`` is an LM task prompt (``data/lm_tasks.py``: ``correct``, ``prompt_ids``)."""

from __future__ import annotations

from collections.abc import Sequence


class ExactVerifier:
    """1 if the completion's extracted answer equals the reference, else 0."""

    def __call__(self, task, completion: Sequence[int]) -> float:
        return float(task.correct(completion))
