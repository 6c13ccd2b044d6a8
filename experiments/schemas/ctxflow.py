"""Schemas of ctxflow."""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import MISSING

from experiments.schemas.shared import DatasetConfig, MethodConfig, nonnegative, positive


@dataclass
class ContextFlowConfig(MethodConfig):
    attention_scale: float = nonnegative()  # logit scale: A = a sqrt(d) O (see random_flow_params)
    value_scale: float = nonnegative()  # operator norm of V (per unit depth: blocks use V / L)
    depth: int = MISSING  # L for the rate and dimension studies
    gd_steps: int = MISSING  # online gradient-descent iterations (backward study)
    gd_lr: float = positive()


@dataclass
class CtxflowProtocol:
    seeds: int = MISSING
    n_values: list[int] = MISSING
    depths: list[int] = MISSING
    depth_study_dim: int = MISSING
    dims: list[int] = MISSING
    dim_study_dims: list[int] = MISSING
    dim_study_n: int = MISSING
    backward_dim: int = MISSING
    wasserstein_max_n: int = MISSING  # exact W2 (POT) of the context measure up to this n


@dataclass
class GaussianContextConfig(DatasetConfig):
    n_queries: int = MISSING


PROTOCOL = CtxflowProtocol
METHODS = {"context_flow": ContextFlowConfig}
DATASETS = {"gaussian_context": GaussianContextConfig}
