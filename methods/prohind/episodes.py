"""Single- and multi-turn episodes as rollouts: the policy states its confidence and
answers; in a multi-turn episode the environment answers a wrong attempt with ``WRONG``
and the policy tries again, up to ``turns`` attempts. The returned rollouts hold the whole
episode after the prompt, with the environment's tokens outside the completion mask (they
get no gradient)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from data.confidence_tasks import EOS, PAD, WRONG, ConfidencePrompt, attempts
from models.lm.rollout import Rollouts, Sampling, given_completions, sample_rollouts

# the policy never writes the environment's token
EPISODE_SAMPLING = Sampling(suppress=(WRONG,))


def run_episodes(policy, tasks: Sequence[ConfidencePrompt], turns: int, max_digits: int,
                 generator: torch.Generator, sampling: Sampling = EPISODE_SAMPLING
                 ) -> Rollouts:
    """One episode per task (repeat a task for a group)."""
    answer_length = 2 * max_digits + 1
    first = sample_rollouts(policy, [t.prompt_ids for t in tasks], 1 + answer_length,
                            sampling, eos_id=EOS, pad_id=PAD, generator=generator)
    episodes = [list(c) for c in first.completions()]
    generated = [[1] * len(c) for c in episodes]
    for _ in range(turns - 1):
        retry = [i for i, (t, c) in enumerate(zip(tasks, episodes, strict=True))
                 if not t.correct(c)]
        if not retry:
            break
        prompts = [tasks[i].prompt_ids + episodes[i] + [WRONG] for i in retry]
        again = sample_rollouts(policy, prompts, answer_length, sampling, eos_id=EOS,
                                pad_id=PAD, generator=generator).completions()
        for i, attempt in zip(retry, again, strict=True):
            episodes[i] += [WRONG, *attempt]
            generated[i] += [0, *([1] * len(attempt))]
    out = given_completions([t.prompt_ids for t in tasks], episodes, PAD)
    for i, flags in enumerate(generated):
        out.completion_mask[i, : len(flags)] = torch.as_tensor(flags)
    return out


def attempt_count(completion: Sequence[int]) -> int:
    return len(attempts(completion))
