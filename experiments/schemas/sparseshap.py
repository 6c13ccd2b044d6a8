"""Method schemas of sparseshap."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from experiments.schemas import MethodConfig


class Decoder(Enum):
    lasso = "lasso"  # refits on LASSO-path supports + all players, best AIC
    omp = "omp"  # refit on `sparsity` OMP atoms
    none = "none"  # refit on all players (sampling change only)


class SizeDistribution(Enum):
    sparse = "sparse"
    dense = "dense"
    mixture = "mixture"


@dataclass
class SparseLeverageConfig(MethodConfig):
    sparsity: int = 5  # the assumed support size k of the sparse leverage score
    decoder: Decoder = Decoder.lasso
    size_distribution: SizeDistribution = SizeDistribution.mixture
    mixture: float = 0.5  # sparse share of the mixture size distribution
    penalty: float = 2.0  # model-size penalty per player of the support selection
    cv_folds: int = 5  # folds (over complement pairs) deciding sparse vs dense fit; < 2: off


METHOD_SCHEMAS = {"kernel_shap": MethodConfig, "leverage_shap": MethodConfig,
                  "sparse_leverage_shap": SparseLeverageConfig}
