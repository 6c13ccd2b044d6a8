"""Sequence properties used as design objectives, each oriented so that higher is better.

- ``thermostability``: the aliphatic index (Ikai 1980), 100 (x_A + 2.9 x_V + 3.9 (x_I + x_L))
  with x the mole fractions;
- ``solubility``: minus GRAVY, the mean Kyte-Doolittle hydropathy;
- ``stability``: minus the instability index (Guruprasad et al. 1990; biopython's table);
- ``charge``: the net charge at pH 7 (biopython's pKa table).

Non-standard residues (X, B, Z, U, O, ...) are removed before scoring
(``standard_residues``): biopython raises on them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from data.proteins import standard_residues

# Kyte & Doolittle (1982) hydropathy
KYTE_DOOLITTLE = {"A": 1.8, "R": -4.5, "N": -3.5, "D": -3.5, "C": 2.5, "Q": -3.5, "E": -3.5,
                  "G": -0.4, "H": -3.2, "I": 4.5, "L": 3.8, "K": -3.9, "M": 1.9, "F": 2.8,
                  "P": -1.6, "S": -0.8, "T": -0.7, "W": -0.9, "Y": -1.3, "V": 4.2}


def aliphatic_index(sequence: str) -> float:
    n = len(sequence)
    count = sequence.count
    return 100 * (count("A") + 2.9 * count("V") + 3.9 * (count("I") + count("L"))) / n


def gravy(sequence: str) -> float:
    return sum(KYTE_DOOLITTLE[a] for a in sequence) / len(sequence)


def instability_index(sequence: str) -> float:
    from Bio.SeqUtils.ProtParam import ProteinAnalysis

    return float(ProteinAnalysis(sequence).instability_index())


def charge_at_ph7(sequence: str) -> float:
    from Bio.SeqUtils.ProtParam import ProteinAnalysis

    return float(ProteinAnalysis(sequence).charge_at_pH(7.0))


OBJECTIVES: dict[str, Callable[[str], float]] = {
    "thermostability": aliphatic_index,
    "solubility": lambda s: -gravy(s),
    "stability": lambda s: -instability_index(s),
    "charge": charge_at_ph7,
}


def score(sequences: Sequence[str], objective: str, min_length: int = 2) -> np.ndarray:
    """The objective of each sequence after cleaning; NaN for sequences shorter than
    ``min_length`` residues (no property is defined for them)."""
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective '{objective}'; known: {', '.join(OBJECTIVES)}")
    fn = OBJECTIVES[objective]
    out = []
    for sequence in sequences:
        clean = standard_residues(sequence)
        out.append(fn(clean) if len(clean) >= min_length else np.nan)
    return np.array(out, dtype=float)


def longest_homopolymer(sequence: str) -> int:
    """The longest run of one repeated residue."""
    best = run = 0
    for i, a in enumerate(sequence):
        run = run + 1 if i and a == sequence[i - 1] else 1
        best = max(best, run)
    return best


def mean_pairwise_identity(sequences: Sequence[str], pairs: int,
                           rng: np.random.Generator) -> float:
    """Mean fraction of identical positions (over the shorter length) of random pairs."""
    usable = [s for s in sequences if s]
    if len(usable) < 2:
        return float("nan")
    values = []
    for _ in range(pairs):
        i, j = rng.choice(len(usable), 2, replace=False)
        a, b = usable[i], usable[j]
        n = min(len(a), len(b))
        values.append(sum(x == y for x, y in zip(a[:n], b[:n], strict=True)) / n)
    return float(np.mean(values))


class DesignScore:
    """sum_k w_k z_k of a sequence, z_k the objective standardized by a reference corpus's
    mean and standard deviation; invalid sequences (shorter than ``min_length``, or not
    ended) score ``invalid``."""

    def __init__(self, objectives: Sequence[str], weights: Sequence[float],
                 reference: Sequence[str], min_length: int, invalid: float = -3.0) -> None:
        if len(objectives) != len(weights):
            raise ValueError(f"{len(objectives)} objectives but {len(weights)} weights")
        self.objectives, self.min_length, self.invalid = list(objectives), min_length, invalid
        self.weights = np.asarray(weights, dtype=float)
        table = np.stack([score(reference, k, min_length) for k in self.objectives])
        self.mean, self.std = np.nanmean(table, 1), np.nanstd(table, 1)

    def standardized(self, sequences: Sequence[str]) -> np.ndarray:
        """(K, N) z-scores (NaN for invalid sequences)."""
        table = np.stack([score(sequences, k, self.min_length) for k in self.objectives])
        return (table - self.mean[:, None]) / self.std[:, None]

    def __call__(self, sequences: Sequence[str], finished: Sequence[bool] | None = None
                 ) -> np.ndarray:
        """Scores; a sequence that is too short or (``finished`` False) never ended scores
        ``invalid``."""
        total = self.weights @ np.nan_to_num(self.standardized(sequences), nan=0.0)
        valid = np.array([len(standard_residues(s)) >= self.min_length for s in sequences])
        if finished is not None:
            valid &= np.asarray(finished, dtype=bool)
        return np.where(valid, total, self.invalid)
