"""Provably minimal sufficient explanations for networks with restricted feature
interactions (abstract 7): exact for additive models and sparse interaction graphs, an
interaction-aware sufficient notion for any interaction order, and a verifier-driven
baseline for general networks."""

from methods.sufexplain.explain import (
    Explanation,
    components,
    exact_explanation,
    free_box,
    interaction_aware_explanation,
    is_sufficient,
    nam_explanation,
    pattern_loss,
    perturbation_box,
    sensitivity_order,
    verix_explanation,
    worst_case,
)
from methods.sufexplain.models import AdditiveNet, MLPNet, accuracy, train_classifier
from methods.sufexplain.networks import AdditiveModel, ReluNet, exact_min_1d
from methods.sufexplain.verify import interval_minimum, milp_minimum

__all__ = [
    "AdditiveModel", "AdditiveNet", "Explanation", "MLPNet", "ReluNet", "accuracy",
    "components", "exact_explanation", "exact_min_1d", "free_box", "interaction_aware_explanation",
    "interval_minimum", "is_sufficient", "milp_minimum", "nam_explanation", "pattern_loss",
    "perturbation_box", "sensitivity_order", "train_classifier", "verix_explanation",
    "worst_case",
]
