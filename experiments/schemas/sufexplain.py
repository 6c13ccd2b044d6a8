"""Schemas of sufexplain."""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import MISSING

from experiments.schemas.shared import DatasetConfig, MethodConfig, nonnegative, open_unit, positive


@dataclass
class SufExplainConfig(MethodConfig):
    hidden: list[int] = MISSING  # hidden sizes of every feature and pair net
    edges: int = MISSING  # |E|: pairs of the NA2M's interaction graph
    max_component: int = MISSING  # the graph's components stay this small (exact algorithm)


@dataclass
class SufexplainProtocol:
    points: int = MISSING  # test points explained
    eps: float = positive()  # perturbation radius (standardized units; .inf: whole domain)
    explain_mlp: bool = MISSING  # also run the baseline on the plain MLP (general network)
    mlp_hidden: list[int] = MISSING
    epochs: int = MISSING
    batch_size: int = MISSING
    lr: float = positive()
    weight_decay: float = nonnegative()
    output_penalty: float = nonnegative()  # NAM's penalty on the mean squared term outputs
    # a real binary task (a binary_tabular source) the NAM, NA2M and MLP are also trained
    # and compared on (acc_<model>_real); null: none
    real_data: str | None = None


@dataclass
class BinaryTabularConfig(DatasetConfig):
    source: str = MISSING  # breast_cancer | digits_<a>_<b> | openml:<name> | a .csv path
    test_fraction: float = open_unit()


@dataclass
class PlantedConfig(BinaryTabularConfig):
    samples: int = MISSING
    features: int = MISSING
    pairs: int = MISSING  # feature pairs whose product carries the label
    noise: float = nonnegative()  # logit noise


PROTOCOL = SufexplainProtocol
METHODS = {"sufexplain": SufExplainConfig}
DATASETS = {"planted": PlantedConfig, "binary_tabular": BinaryTabularConfig}
