"""Contextual flow maps (abstract 18): a token evolving with its context measure through
attention blocks (a McKean-Vlasov system); finite context of n particles vs the exact
infinite-context (Gaussian) population flow."""

from methods.ctxflow.flow import (
    FlowParams,
    finite_context_flow,
    flow_lipschitz,
    gaussian_context_flow,
    random_flow_params,
)
from methods.ctxflow.regression import (
    icl_loss_finite,
    icl_loss_gaussian,
    online_gd_deviation,
)

__all__ = [
    "FlowParams", "finite_context_flow", "flow_lipschitz", "gaussian_context_flow",
    "icl_loss_finite", "icl_loss_gaussian", "online_gd_deviation", "random_flow_params",
]
