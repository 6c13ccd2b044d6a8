"""Schemas of sparseshap."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from omegaconf import MISSING

from experiments.schemas.shared import (
    DatasetConfig,
    MethodConfig,
    nonnegative,
    positive,
    unit,
    within,
)


class Decoder(StrEnum):
    lasso = "lasso"  # refits on LASSO-path supports + all players, best AIC
    omp = "omp"  # refit on `sparsity` OMP atoms
    none = "none"  # refit on all players (sampling change only)


class SizeDistribution(StrEnum):
    sparse = "sparse"
    dense = "dense"
    mixture = "mixture"


@dataclass
class SparseLeverageConfig(MethodConfig):
    sparsity: int = MISSING  # the assumed support size k of the sparse leverage score
    decoder: Decoder = MISSING
    size_distribution: SizeDistribution = MISSING
    mixture: float = unit()  # sparse share of the mixture size distribution
    penalty: float = nonnegative()  # model-size penalty per player of the support selection
    cv_folds: int = MISSING  # folds (complement pairs) deciding sparse vs dense; < 2: off


@dataclass
class ScalingConfig:
    seeds: int = MISSING  # sampling seeds of the budget-vs-n curve (exponent and interval)
    n_values: list[int] = MISSING
    s_values: list[int] = MISSING
    repetitions: int = MISSING
    budgets: list[int] = MISSING


@dataclass
class SparseshapProtocol:
    compare: bool = MISSING  # all three estimators, budget curves, real game, scaling fits
    repetitions: int = MISSING
    budget: int | None = within(1, None)  # null: 4 s^2 log n (the claim's budget)
    budget_multipliers: list[float] = positive()  # budget curve, in units of n
    real_budget_multiples: list[int] = MISSING  # real game budgets = multiple * n
    target_error: float = positive()
    scaling: ScalingConfig = MISSING


@dataclass
class SparseGameConfig:
    n: int = MISSING
    s: int = MISSING
    n_pairs: int = MISSING
    n_higher: int = MISSING
    interaction_scale: float = nonnegative()


@dataclass
class RealGameConfig:
    source: str = MISSING  # diabetes | breast_cancer | wine | openml:<name> | path/to/file.csv
    target: str | None = MISSING  # CSV label column (default: the last)
    explicands: int = MISSING


@dataclass
class ShapleyGamesConfig(DatasetConfig):
    sparse: SparseGameConfig = MISSING
    real: RealGameConfig = MISSING


PROTOCOL = SparseshapProtocol
METHODS = {"kernel_shap": MethodConfig, "leverage_shap": MethodConfig,
           "sparse_leverage_shap": SparseLeverageConfig}
DATASETS = {"shapley_games": ShapleyGamesConfig}
