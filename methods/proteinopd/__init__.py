"""ProteinOPD (abstract 10): preference-specific teachers from one protein LM, and a shared
student distilled on its own samples towards their weighted geometric consensus."""

from methods.proteinopd.distillation import (
    COST_UNITS,
    MIXTURES,
    WEIGHTINGS,
    ConsensusOPDModule,
    ScalarizedRLModule,
    cost_to_gain,
    teacher_target,
)
from methods.proteinopd.properties import (
    OBJECTIVES,
    DesignScore,
    aliphatic_index,
    gravy,
    longest_homopolymer,
    mean_pairwise_identity,
    score,
    standard_residues,
)

__all__ = [
    "COST_UNITS", "MIXTURES", "OBJECTIVES", "WEIGHTINGS", "ConsensusOPDModule", "DesignScore",
    "ScalarizedRLModule", "aliphatic_index", "gravy", "longest_homopolymer",
    "mean_pairwise_identity", "score", "standard_residues", "teacher_target", "cost_to_gain",
]
