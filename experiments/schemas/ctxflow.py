"""Method schema of ctxflow."""

from __future__ import annotations

from dataclasses import dataclass

from experiments.schemas import MethodConfig


@dataclass
class ContextFlowConfig(MethodConfig):
    attention_scale: float = 0.5  # logit scale: A = a sqrt(d) O (see random_flow_params)
    value_scale: float = 1.0  # operator norm of V (per unit depth: blocks use V / L)
    depth: int = 4  # L for the rate and dimension studies
    gd_steps: int = 100  # online gradient-descent iterations (backward study)
    gd_lr: float = 0.01


METHOD_SCHEMAS = {"context_flow": ContextFlowConfig}
