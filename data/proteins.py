"""Protein sequences for character-level protein LMs.

- ``synthetic_corpus``: a protein-like corpus generated here (no natural corpus ships in a
  package): every sequence comes from one of several "families", each a first-order Markov
  chain whose stationary composition is a Dirichlet perturbation of UniProtKB/Swiss-Prot's
  amino-acid composition (UniProtKB/Swiss-Prot statistics), so properties such as the aliphatic
  index or GRAVY vary between sequences as they do between natural families.
- ``read_fasta``: sequences from a FASTA file (a user's corpus for real models).
- ``Alphabet``: how sequences become tokens: ``CHARACTERS`` (the 20 standard amino acids,
  ``<eos>``, also the unconditional prompt as in ProtGPT2, and ``<pad>``) for the models
  trained here, ``tokenizer_alphabet`` for a hub model's tokenizer (ProtGPT2's BPE).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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


def standard_residues(sequence: str) -> str:
    """The sequence upper-cased, without characters other than the 20 standard residues
    (non-standard residues, line breaks, spaces)."""
    return "".join(a for a in sequence.upper() if a in AMINO_ACIDS)


def encode(sequence: str) -> list[int]:
    """Token ids of an amino-acid string (standard residues only)."""
    try:
        return [AMINO_ACIDS.index(a) for a in sequence]
    except ValueError:
        bad = sorted(set(sequence) - set(AMINO_ACIDS))
        raise UserError(f"non-standard residues {bad} in a sequence; clean it first "
                        "(standard_residues)") from None


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
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        raise UserError(f"{path} is not a text FASTA file (dataset.path): it holds binary "
                        "data") from None
    sequences, current = [], []
    for line in text.splitlines():
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


@dataclass(frozen=True)
class Alphabet:
    """Tokens of a protein LM: ``encode`` a residue string, ``decode`` ids to residues
    (up to the first ``eos``), and the ``eos`` / ``pad`` ids."""

    encode: Callable[[str], list[int]]
    decode: Callable[[Sequence[int]], str]
    eos: int
    pad: int


CHARACTERS = Alphabet(encode, decode, EOS, PAD)


def tokenizer_alphabet(tokenizer) -> Alphabet:
    """The alphabet of a transformers tokenizer (pad = eos when it has no pad token)."""
    eos = tokenizer.eos_token_id
    if eos is None:
        raise UserError("the protein LM's tokenizer has no EOS token (the unconditional prompt)")

    def encode_text(sequence: str) -> list[int]:
        return tokenizer(sequence, add_special_tokens=False)["input_ids"]

    def decode_text(ids: Sequence[int]) -> str:
        ids = list(ids)
        ids = ids[: ids.index(eos)] if eos in ids else ids
        return standard_residues(tokenizer.decode(ids, skip_special_tokens=True))

    pad = tokenizer.pad_token_id
    return Alphabet(encode_text, decode_text, eos, eos if pad is None else pad)


@dataclass
class ProteinPrompt:
    """The unconditional prompt: ``<eos>`` (ProtGPT2's convention)."""

    prompt_ids: list[int] = field(default_factory=lambda: [EOS])


@dataclass
class ProteinLMData:
    """Causal-LM training examples ``<eos> sequence <eos>`` (every token after the first
    scored), sequences cut to ``max_length`` residues, padded to the longest."""

    sequences: list[str]
    max_length: int
    alphabet: Alphabet = CHARACTERS

    def dataset(self):
        from datasets import Dataset

        a = self.alphabet
        encoded = [[a.eos, *a.encode(s[: self.max_length]), a.eos] for s in self.sequences]
        width = max(len(ids) for ids in encoded)
        rows = {"input_ids": [], "labels": [], "attention_mask": []}
        for ids in encoded:
            pad = width - len(ids)
            rows["input_ids"].append(ids + [a.pad] * pad)
            rows["labels"].append([-100] + ids[1:] + [-100] * pad)
            rows["attention_mask"].append([1] * len(ids) + [0] * pad)
        return Dataset.from_dict(rows)
