"""Joint train-and-test robustness certificates from DP composition and randomized smoothing
(abstract 3): a mechanism's privacy profile delta(eps), composed over heterogeneous
components (PLD accounting), gives a certificate through its tradeoff function."""

from methods.dpcert.accounting import (
    EPS_GRID,
    dpa_poisoning_pld,
    dpsgd_group_pld,
    gaussian_pld,
    gaussian_profile,
    profile_of,
)
from methods.dpcert.certify import (
    certified_radii,
    clopper_pearson,
    cohen_radius,
    dpa_vote_certificate,
    is_certified,
    naive_certified,
    radius_by_bisection,
    top_two,
    toward_other_class,
    tradeoff,
)

__all__ = [
    "EPS_GRID", "certified_radii", "clopper_pearson", "cohen_radius", "dpa_poisoning_pld",
    "dpa_vote_certificate", "dpsgd_group_pld", "gaussian_pld", "gaussian_profile",
    "is_certified", "naive_certified", "profile_of", "radius_by_bisection", "top_two",
    "toward_other_class", "tradeoff",
]
