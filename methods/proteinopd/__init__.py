"""ProteinOPD (abstract 10): preference-specific teachers from one protein LM, and a shared
student distilled on its own samples towards their weighted geometric consensus."""

from methods.proteinopd.distillation import (
    MIXTURES,
    WEIGHTINGS,
    ConsensusOPDModule,
    ScalarizedRLModule,
    teacher_target,
    time_to_gain,
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
    "MIXTURES", "OBJECTIVES", "WEIGHTINGS", "ConsensusOPDModule", "DesignScore",
    "ScalarizedRLModule", "aliphatic_index", "gravy", "longest_homopolymer",
    "mean_pairwise_identity", "score", "standard_residues", "teacher_target", "time_to_gain",
]
