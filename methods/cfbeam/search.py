"""Beam search scored by the model's own log-likelihood, with an optional confidence filter
(CF-Beam), and the sequence-level baselines (Best-of-N, majority vote, Best-of-Majority).

Every method counts its sampled tokens and model forward calls (``Budget``) so comparisons
are at equal budget. The outcome reward is called on complete responses only.

Beam bookkeeping follows transformers' ``generate(num_beams=B, length_penalty=0,
early_stopping="never")``: the top K = (1 + [EOS in the vocabulary]) B candidates by
cumulative log-likelihood; those among the top B that end (EOS, or the last step) join a
pool of the B best finished responses; the top B that do not end stay live; the search
stops when no live beam can beat the worst finished one. With exhaustive expansion
(``samples_per_beam=None``) it returns exactly what ``generate`` returns.

RECON: the paper's exact confidence filter is not public. Options:

- ``filter``: ``none`` (vanilla LL-beam); ``freq``: keep a sampled token only if its
  empirical frequency among the parent's draws is >= ``tau`` (Best-of-Majority's frequency
  filter, per step); ``prob``: keep it only if pi(token | prefix) >= ``tau``. ``tau`` is a
  fixed configured value (it never reads the instance's coverage).
- ``rank``: ``global_ll`` (top B by cumulative log-likelihood over all parents) or
  ``per_parent`` (each parent keeps at most ceil(B / #parents) candidates first).
- ``adaptive`` (``AdaptiveSampling``): instead of N draws per parent, draw in rounds and
  stop early once the node is confidently near-deterministic: a one-sided (1 - ``alpha``)
  Clopper-Pearson lower bound on the probability of its most frequent token reaches
  ``stop_mass``; other nodes draw up to ``max_samples``. A deterministic continuation stops
  after ceil(log(alpha) / log(stop_mass)) draws (5 for the defaults); a high-entropy node
  draws the full cap. The budget counts every draw.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
from scipy.stats import beta

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


@dataclass
class SearchResult:
    best: tuple[int, ...]
    finals: list[Beam]
    budget: Budget = field(default_factory=Budget)


@dataclass(frozen=True)
class AdaptiveSampling:
    """Per-node sampling that stops early on confident nodes (see the module)."""

    max_samples: int = 64
    stop_mass: float = 0.5
    alpha: float = 0.05
    round_size: int = 4

    @property
    def min_samples(self) -> int:
        """Draws after which a node whose draws all agree stops."""
        return int(np.ceil(np.log(self.alpha) / np.log(self.stop_mass)))

    def confident(self, top: np.ndarray, drawn: np.ndarray) -> np.ndarray:
        """Is the Clopper-Pearson lower bound of top / drawn >= stop_mass?"""
        return _lower_bounds(self.alpha, self.max_samples)[drawn, top] >= self.stop_mass


@lru_cache(maxsize=16)
def _lower_bounds(alpha: float, max_samples: int) -> np.ndarray:
    """Table [n, k] of one-sided (1 - alpha) Clopper-Pearson lower bounds for k of n."""
    n, k = np.meshgrid(np.arange(max_samples + 1), np.arange(max_samples + 1), indexing="ij")
    with np.errstate(invalid="ignore"):
        table = np.where((k > 0) & (k <= n), beta.ppf(alpha, np.maximum(k, 1),
                                                      np.maximum(n - k + 1, 1)), 0.0)
    return np.nan_to_num(table)


def probabilities(lp: np.ndarray) -> np.ndarray:
    """Rows of exp(lp), renormalized in float64 so that every row but its last entry sums
    to at most 1 (``Generator.multinomial`` checks that; with a 49k-token vocabulary the
    rounding of a plain renormalization can exceed it)."""
    lp = np.asarray(lp, dtype=np.float64)
    p = np.exp(lp - lp.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    head = p[..., :-1].sum(axis=-1)
    over = head > 1.0
    if np.any(over):
        p[over, :-1] /= head[over, None]
    return p


def draw_counts(lp: np.ndarray, samples: int | None, adaptive: AdaptiveSampling | None,
                rng: np.random.Generator) -> np.ndarray:
    """Next-token draw counts per row of ``lp``: ``samples`` each, or adaptively."""
    probs = probabilities(lp)
    if adaptive is None:
        return rng.multinomial(samples, probs)
    counts = rng.multinomial(min(adaptive.min_samples, adaptive.max_samples), probs)
    active = np.arange(len(probs))
    while len(active):
        top, drawn = counts[active].max(axis=1), counts[active].sum(axis=1)
        active = active[~adaptive.confident(top, drawn) & (drawn < adaptive.max_samples)]
        if len(active):
            step = np.minimum(adaptive.round_size, adaptive.max_samples - counts[active].sum(1))
            counts[active] += rng.multinomial(step, probs[active])
    return counts


def _kept(counts: np.ndarray | None, lp: np.ndarray, filt: str, tau: float) -> np.ndarray:
    """Boolean (parents, vocab): the candidates each parent offers after the filter."""
    if counts is None:  # exhaustive expansion
        return np.isfinite(lp)
    seen = counts > 0
    if filt == "none":
        return seen
    if filt == "freq":
        return seen & (counts >= tau * counts.sum(axis=1, keepdims=True))
    if filt == "prob":
        return seen & (np.exp(lp) >= tau)
    raise ValueError(f"unknown filter '{filt}'; known: none, freq, prob")


def _ranked(scores: np.ndarray, kept: np.ndarray, beam_width: int, rank: str) -> np.ndarray:
    """Flat candidate indices (parent * vocab + token), best first: by cumulative
    log-likelihood (``global_ll``), or with at most ceil(B / parents) per parent first."""
    flat = np.flatnonzero(kept)
    order = flat[np.argsort(-scores.ravel()[flat], kind="stable")]
    if rank == "per_parent":
        parents, vocab = scores.shape
        quota = -(-beam_width // parents)
        parent_of = order // vocab
        position = np.zeros(len(order), dtype=np.int64)
        for p in np.unique(parent_of):
            position[parent_of == p] = np.arange(int(np.sum(parent_of == p)))
        order = order[position < quota]
    elif rank != "global_ll":
        raise ValueError(f"unknown rank '{rank}'; known: global_ll, per_parent")
    return order


def beam_search(policy: NextTokenPolicy, beam_width: int, samples_per_beam: int | None,
                max_steps: int, reward: Callable[[tuple[int, ...]], float],
                rng: np.random.Generator, filt: str = "none", tau: float = 0.0,
                rank: str = "global_ll", adaptive: AdaptiveSampling | None = None
                ) -> SearchResult:
    """LL-beam search; ``samples_per_beam=None`` expands every token (exhaustive), else
    each live beam draws ``samples_per_beam`` next tokens (or ``adaptive`` ones). The
    finished beams are scored by ``reward``; the best one is returned."""
    budget = Budget()
    calls_before = policy.forward_calls
    state, lp = policy.start()
    live = [Beam((), 0.0)]
    finished: list[Beam] = []
    keep = beam_width * (2 if policy.eos_id is not None else 1)
    for step in range(max_steps):
        counts = None
        if samples_per_beam is not None or adaptive is not None:
            counts = draw_counts(lp, samples_per_beam, adaptive, rng)
            budget.sampled_tokens += int(counts.sum())
        scores = np.array([b.score for b in live])[:, None] + lp
        order = _ranked(scores, _kept(counts, lp, filt, tau), beam_width, rank)[:keep]
        parents, tokens = np.divmod(order, lp.shape[1])
        ends = (tokens == policy.eos_id) | (step == max_steps - 1)
        for r in np.flatnonzero(ends[:beam_width]):
            finished.append(Beam(live[parents[r]].tokens + (int(tokens[r]),),
                                 float(scores.flat[order[r]])))
        finished = sorted(finished, key=lambda b: -b.score)[:beam_width]
        going = np.flatnonzero(~ends)[:beam_width]
        if not len(going) or (len(finished) == beam_width
                              and scores.flat[order[going[0]]] <= finished[-1].score):
            break
        live = [Beam(live[parents[r]].tokens + (int(tokens[r]),), float(scores.flat[order[r]]))
                for r in going]
        state, lp = policy.step(state, parents[going], tokens[going])
    finals = finished or live
    budget.forward_calls = policy.forward_calls - calls_before
    rewards = [reward(b.tokens) for b in finals]
    budget.reward_calls = len(finals)
    return SearchResult(finals[int(np.argmax(rewards))].tokens, finals, budget)


def sample_sequences(policy: NextTokenPolicy, n: int, max_steps: int,
                     rng: np.random.Generator, budget: Budget) -> list[tuple[int, ...]]:
    """n i.i.d. ancestral samples (exact probabilities, batched step by step)."""
    seqs: list[tuple[int, ...]] = [()] * n
    state, lp = policy.start()
    live = np.zeros(n, dtype=np.int64)  # row of each live sample in the state
    owners = np.arange(n)  # which sample each live row belongs to
    for step in range(max_steps):
        probs = probabilities(lp[live])
        tokens = (rng.random(len(probs))[:, None] > np.cumsum(probs, axis=1)).sum(axis=1)
        tokens = np.minimum(tokens, probs.shape[1] - 1)
        budget.sampled_tokens += len(tokens)
        for i, t in zip(owners, tokens, strict=True):
            seqs[i] = seqs[i] + (int(t),)
        going = tokens != policy.eos_id if policy.eos_id is not None else np.ones(
            len(tokens), dtype=bool)
        if not going.any() or step == max_steps - 1:
            break
        state, lp = policy.step(state, live[going], tokens[going])
        owners = owners[going]
        live = np.arange(len(owners))
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


def square_beam(n: int) -> tuple[int, int]:
    """A per-step budget of ``n`` samples as a beam: width round(sqrt(n)), n // width
    samples per beam (how the sampling-only methods' budget maps onto beam search)."""
    width = max(1, int(round(np.sqrt(n))))
    return width, max(1, n // width)
