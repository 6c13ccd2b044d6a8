"""Beam search scored by the model's own log-likelihood, with an optional confidence filter
(CF-Beam), and the sequence-level baselines (Best-of-N, majority vote, Best-of-Majority).

Every method counts its sampled tokens and model forward calls (``Budget``) so comparisons
are at equal budget. The outcome reward is called on complete responses only.

RECON: the paper's exact filter rule is not public. Options (``filter``): ``none``
(vanilla LL-beam); ``freq``: keep a sampled token only if its empirical frequency among the
parent's N samples is >= tau (Best-of-Majority's frequency filter, per step); ``prob``:
keep it only if pi(token | prefix) >= tau. Ranking (``rank``): ``global_ll`` (top B by
cumulative log-likelihood over all parents) or ``per_parent`` (each parent keeps at most
ceil(B / #parents) of its candidates, then the global top B). Stopping at ``eos_id``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from methods.cfbeam.policy import NextTokenPolicy


@dataclass
class Budget:
    sampled_tokens: int = 0
    forward_calls: int = 0
    reward_calls: int = 0


@dataclass
class Beam:
    tokens: tuple[int, ...]
    score: float  # cumulative log-likelihood
    done: bool = False


@dataclass
class SearchResult:
    best: tuple[int, ...]
    finals: list[Beam]
    budget: Budget = field(default_factory=Budget)


def _candidates(lp: np.ndarray, n_samples: int | None, filt: str, tau: float,
                rng: np.random.Generator) -> list[tuple[int, float]]:
    """(token, empirical frequency) kept from one parent."""
    if n_samples is None:  # full expansion
        tokens = np.arange(len(lp))[np.isfinite(lp)]
        freq = np.exp(lp[tokens])
    else:
        probs = np.exp(lp - lp.max())
        probs /= probs.sum()
        draws = rng.choice(len(lp), size=n_samples, p=probs)
        tokens, counts = np.unique(draws, return_counts=True)
        freq = counts / n_samples
    if filt == "freq":
        keep = freq >= tau
    elif filt == "prob":
        keep = np.exp(lp[tokens]) >= tau
    elif filt == "none":
        keep = np.ones(len(tokens), dtype=bool)
    else:
        raise ValueError(f"unknown filter '{filt}'; known: none, freq, prob")
    return [(int(t), float(f)) for t, f in zip(tokens[keep], freq[keep], strict=True)]


def _ranked(pool: list[tuple[float, int, int]], beam_width: int, parents: int, rank: str
            ) -> list[tuple[float, int, int]]:
    """The ``beam_width`` best (score, parent, token) candidates: by cumulative
    log-likelihood (``global_ll``), or with at most ceil(B / parents) per parent first."""
    ordered = sorted(pool, key=lambda c: (-c[0], c[1], c[2]))
    if rank == "per_parent":
        quota = -(-beam_width // parents)
        kept: dict[int, int] = {}
        capped = []
        for cand in ordered:
            if kept.get(cand[1], 0) < quota:
                kept[cand[1]] = kept.get(cand[1], 0) + 1
                capped.append(cand)
        ordered = capped
    elif rank != "global_ll":
        raise ValueError(f"unknown rank '{rank}'; known: global_ll, per_parent")
    return ordered[:beam_width]


def beam_search(policy: NextTokenPolicy, beam_width: int, samples_per_beam: int | None,
                max_steps: int, reward: Callable[[tuple[int, ...]], float],
                rng: np.random.Generator, filt: str = "none", tau: float = 0.0,
                rank: str = "global_ll") -> SearchResult:
    """LL-beam search; ``samples_per_beam=None`` expands every token (exhaustive). The final
    beams (live and finished) are scored by ``reward``; the best one is returned."""
    budget = Budget()
    calls_before = policy.forward_calls
    beams = [Beam((), 0.0)]
    finished: list[Beam] = []
    for _ in range(max_steps):
        if not beams:
            break
        lp = policy.log_probs([b.tokens for b in beams])
        pool: list[tuple[float, int, int]] = []  # (cumulative score, parent, token)
        for i, beam in enumerate(beams):
            if samples_per_beam is not None:
                budget.sampled_tokens += samples_per_beam
            for token, _ in _candidates(lp[i], samples_per_beam, filt, tau, rng):
                pool.append((beam.score + float(lp[i, token]), i, token))
        next_beams = []
        for score, parent, token in _ranked(pool, beam_width, len(beams), rank):
            child = Beam(beams[parent].tokens + (token,), score)
            if policy.eos_id is not None and token == policy.eos_id:
                child.done = True
                finished.append(child)
            else:
                next_beams.append(child)
        beams = next_beams
    finals = finished + beams
    budget.forward_calls = policy.forward_calls - calls_before
    if not finals:
        return SearchResult((), [], budget)
    rewards = [reward(b.tokens) for b in finals]
    budget.reward_calls = len(finals)
    return SearchResult(finals[int(np.argmax(rewards))].tokens, finals, budget)


def sample_sequences(policy: NextTokenPolicy, n: int, max_steps: int,
                     rng: np.random.Generator, budget: Budget) -> list[tuple[int, ...]]:
    """n i.i.d. ancestral samples (exact probabilities, batched step by step)."""
    seqs: list[tuple[int, ...]] = [()] * n
    live = list(range(n))
    for _ in range(max_steps):
        if not live:
            break
        lp = policy.log_probs([seqs[i] for i in live])
        budget.sampled_tokens += len(live)
        still = []
        for row, i in enumerate(live):
            probs = np.exp(lp[row] - lp[row].max())
            token = int(rng.choice(len(probs), p=probs / probs.sum()))
            seqs[i] = seqs[i] + (token,)
            if policy.eos_id is None or token != policy.eos_id:
                still.append(i)
        live = still
    return seqs


def _independent_samples(policy, n, max_steps, rng) -> tuple[list[tuple[int, ...]], Budget]:
    """n ancestral samples with their budget (sampled tokens and forward calls)."""
    budget = Budget()
    calls_before = policy.forward_calls
    seqs = sample_sequences(policy, n, max_steps, rng, budget)
    budget.forward_calls = policy.forward_calls - calls_before
    return seqs, budget


def _pick(seqs: list[tuple[int, ...]], index: int, budget: Budget) -> SearchResult:
    return SearchResult(seqs[index], [Beam(s, 0.0) for s in seqs], budget)


def best_of_n(policy, n, max_steps, reward, rng) -> SearchResult:
    """Best-of-N: N full samples, the one with the highest outcome reward."""
    seqs, budget = _independent_samples(policy, n, max_steps, rng)
    rewards = [reward(s) for s in seqs]
    budget.reward_calls = n
    return _pick(seqs, int(np.argmax(rewards)), budget)


def majority_vote(policy, n, max_steps, answer: Callable[[tuple[int, ...]], object], rng
                  ) -> SearchResult:
    """Self-consistency: the sample whose extracted answer is the most frequent."""
    seqs, budget = _independent_samples(policy, n, max_steps, rng)
    answers = [answer(s) for s in seqs]
    mode = Counter(answers).most_common(1)[0][0]
    return _pick(seqs, answers.index(mode), budget)


def best_of_majority(policy, n, max_steps, reward, answer, rng, alpha: float
                     ) -> SearchResult:
    """Best-of-Majority (Di et al.): keep samples whose answer has frequency >= alpha, then
    the highest reward among them (the mode if none passes)."""
    seqs, budget = _independent_samples(policy, n, max_steps, rng)
    answers = [answer(s) for s in seqs]
    freq = Counter(answers)
    keep = [i for i, a in enumerate(answers) if freq[a] / n >= alpha]
    if not keep:
        keep = [answers.index(freq.most_common(1)[0][0])]
    rewards = [reward(seqs[i]) for i in keep]
    budget.reward_calls = len(keep)
    return _pick(seqs, keep[int(np.argmax(rewards))], budget)


def coverage(policy: NextTokenPolicy, target: Sequence[int]) -> tuple[float, float]:
    """Teacher-forced coverage of a response: token-level C* = max_h 1/pi(y_h | y_<h) and
    path-level C_seq = 1/pi(y) = prod_h 1/pi(y_h | y_<h), from one batched pass."""
    prefixes = [tuple(target[:h]) for h in range(len(target))]
    lp = policy.log_probs(prefixes)
    step = np.array([lp[h, t] for h, t in enumerate(target)])
    return float(np.exp(-step.min())), float(np.exp(-step.sum()))


def bon_min_samples(coverage_c: float, steps: int, success: float) -> float:
    """Best-of-N with an exact reward succeeds w.p. 1 - (1 - 1/C_seq)^N, C_seq = C^steps:
    the smallest N reaching ``success``."""
    p = float(coverage_c) ** -steps
    return float(np.ceil(np.log(1 - success) / np.log1p(-p)))
