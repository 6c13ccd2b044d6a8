"""Confidence-filtered beam search (abstract 2) and the sequence-level baselines it is
compared with, over one next-token interface shared by an exact table policy and any
transformers causal LM."""

from methods.cfbeam.policy import CausalLMPolicy, NextTokenPolicy, TablePolicy, hard_instance
from methods.cfbeam.search import (
    AdaptiveSampling,
    Budget,
    beam_search,
    best_of_majority,
    best_of_n,
    bon_min_samples,
    coverage,
    majority_vote,
    sample_sequences,
)

__all__ = [
    "AdaptiveSampling", "Budget", "CausalLMPolicy", "NextTokenPolicy", "TablePolicy",
    "beam_search", "best_of_majority", "best_of_n", "bon_min_samples", "coverage",
    "hard_instance", "majority_vote", "sample_sequences",
]
