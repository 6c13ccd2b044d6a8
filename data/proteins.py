"""Protein sequences for character-level protein LMs.

- ``synthetic_corpus``: a protein-like corpus generated here (no natural corpus ships in a
  package): every sequence comes from one of several "families", each a first-order Markov
  chain whose stationary composition is a Dirichlet perturbation of UniProtKB/Swiss-Prot's
  amino-acid composition (UniProtKB/Swiss-Prot statistics), so properties such as the aliphatic
  index or GRAVY vary between sequences as they do between natural families.
- ``read_fasta``: sequences from a FASTA file (a user's corpus for real models).
- The character vocabulary: the 20 standard amino acids, ``<eos>`` (also the unconditional
  prompt, as in ProtGPT2) and ``<pad>``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from common.errors import UserError

AMINO_ACIDS = "ACDEFGHIKLMNPQRSTVWY"
EOS, PAD = 20, 21
VOCAB_SIZE = 22
# UniProtKB/Swiss-Prot amino-acid composition (%), in AMINO_ACIDS order
SWISSPROT_COMPOSITION = np.array([8.25, 1.38, 5.46, 6.72, 3.86, 7.07, 2.27, 5.91, 5.80, 9.64,
                                  2.41, 4.06, 4.74, 3.93, 5.53, 6.65, 5.36, 6.86, 1.10, 2.92])


def encode(sequence: str) -> list[int]:
    """Token ids of an amino-acid string (standard residues only)."""
    try:
        return [AMINO_ACIDS.index(a) for a in sequence]
    except ValueError:
        bad = sorted(set(sequence) - set(AMINO_ACIDS))
        raise UserError(f"non-standard residues {bad} in a sequence; clean it first "
                        "(methods.proteinopd.properties.standard_residues)") from None


def decode(ids: Sequence[int]) -> str:
    """The amino-acid string of token ids, stopping at the first ``<eos>``; ``<pad>`` dropped."""
    out = []
    for i in ids:
        if i == EOS:
            break
        if i < len(AMINO_ACIDS):
            out.append(AMINO_ACIDS[i])
    return "".join(out)


def synthetic_corpus(count: int, rng: np.random.Generator, families: int = 6,
                     min_length: int = 30, max_length: int = 60,
                     concentration: float = 40.0, stickiness: float = 0.15) -> list[str]:
    """``count`` sequences from ``families`` Markov chains: family f draws a composition
    pi_f ~ Dirichlet(concentration * Swiss-Prot composition) and transition rows
    (1 - stickiness) pi_f + stickiness e_a (residues repeat a little, as in low-complexity
    regions); lengths uniform in [min_length, max_length]. A smaller concentration spreads
    the families' compositions further apart."""
    base = SWISSPROT_COMPOSITION / SWISSPROT_COMPOSITION.sum()
    chains = []
    for _ in range(families):
        pi = rng.dirichlet(concentration * base)
        chains.append((pi, (1 - stickiness) * pi[None, :] + stickiness * np.eye(len(pi))))
    out = []
    for _ in range(count):
        pi, transition = chains[rng.integers(families)]
        length = int(rng.integers(min_length, max_length + 1))
        state = rng.choice(20, p=pi)
        residues = [state]
        for _ in range(length - 1):
            state = rng.choice(20, p=transition[state])
            residues.append(state)
        out.append("".join(AMINO_ACIDS[r] for r in residues))
    return out


def read_fasta(path: str | Path) -> list[str]:
    """The sequences of a FASTA file (upper-cased, line breaks joined)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"FASTA file {path} not found (dataset.path)")
    sequences, current = [], []
    for line in path.read_text().splitlines():
        if line.startswith(">"):
            if current:
                sequences.append("".join(current))
            current = []
        elif line.strip():
            current.append(line.strip().upper())
    if current:
        sequences.append("".join(current))
    if not sequences:
        raise UserError(f"{path} holds no FASTA records")
    return sequences


@dataclass
class ProteinPrompt:
    """The unconditional prompt: ``<eos>`` (ProtGPT2's convention)."""

    prompt_ids: list[int] = field(default_factory=lambda: [EOS])


@dataclass
class ProteinLMData:
    """Causal-LM training examples ``<eos> sequence <eos>`` (every token after the first
    scored), padded to ``max_length`` + 2."""

    sequences: list[str]
    max_length: int

    def dataset(self):
        from datasets import Dataset

        width = self.max_length + 2
        rows = {"input_ids": [], "labels": [], "attention_mask": []}
        for sequence in self.sequences:
            ids = [EOS, *encode(sequence[: self.max_length]), EOS]
            pad = width - len(ids)
            rows["input_ids"].append(ids + [PAD] * pad)
            rows["labels"].append([-100] + ids[1:] + [-100] * pad)
            rows["attention_mask"].append([1] * len(ids) + [0] * pad)
        return Dataset.from_dict(rows)
