"""Sparse Leverage SHAP (abstract 1) with Kernel SHAP and Leverage SHAP as baselines.

Shapley values solve the constrained weighted regression
    min_phi sum_{z != 0, 1} w(|z|) (z^T phi - (v(z) - v(0)))^2  s.t.  1^T phi = v(1) - v(0),
w(s) = (n - 1) / (C(n, s) s (n - s)); estimators sample coalitions z, evaluate v, and solve it.
"""

from methods.sparseshap.estimators import (
    ESTIMATORS,
    kernel_shap,
    leverage_shap,
    sparse_leverage_shap,
)
from methods.sparseshap.games import CountingValueFunction, exact_shapley
from methods.sparseshap.leverage import sparse_leverage_bruteforce, sparse_leverage_by_size

__all__ = [
    "ESTIMATORS", "CountingValueFunction", "exact_shapley", "kernel_shap", "leverage_shap",
    "sparse_leverage_bruteforce", "sparse_leverage_by_size", "sparse_leverage_shap",
]
