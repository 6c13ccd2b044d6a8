"""Mixture Proposal On-Policy Distillation (abstract 14): roll out from a student-anchored,
teacher-guided proposal, the geometric mixture of student and teacher, and distil on those
prefixes."""

from methods.mpopd.distillation import PROPOSALS, MPOPDModule, ProposalConfig
from methods.mpopd.metrics import generation_metrics
from methods.mpopd.mixture import MixtureProposal, geometric_mixture, kl, trust_region_beta

__all__ = [
    "PROPOSALS", "MPOPDModule", "MixtureProposal", "ProposalConfig", "generation_metrics",
    "geometric_mixture", "kl", "trust_region_beta",
]
