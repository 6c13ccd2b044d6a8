"""Schemas of gscoreset."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from omegaconf import MISSING

from experiments.schemas.shared import (
    DatasetConfig,
    MethodConfig,
    nonnegative,
    open_unit,
    positive,
    share,
    unit,
    within,
)


class SensitivityRule(StrEnum):
    max = "max"
    sum = "sum"
    mix = "mix"  # RECON



class CoresetMethod(StrEnum):
    """The selection rules compared (experiments/gscoreset.py ``method_scores``)."""

    sensitivity = "sensitivity"
    uniform = "uniform"
    uniform_unweighted = "uniform_unweighted"
    importance = "importance"
    opacity_topk = "opacity_topk"
    lightgaussian_topk = "lightgaussian_topk"
    minisplat_topk = "minisplat_topk"
    pup_topk = "pup_topk"  # with method.pup


@dataclass
class GscoresetConfig(MethodConfig):
    sensitivity: SensitivityRule = MISSING
    uniform_mix: float = unit()
    eta: float = positive()
    lightgaussian_with_t: bool = MISSING
    pup: bool = MISSING
    pup_patch: int = MISSING  # must divide the image size


@dataclass
class GuaranteeConfig:
    gaussians: int = MISSING
    size: int = MISSING
    views: int = MISSING
    eps: float = positive()
    delta: float = open_unit()
    trials: int = MISSING
    fractions: list[float] = share()


@dataclass
class GscoresetProtocol:
    budgets: list[float] = positive()
    finetune_budget: float = nonnegative()
    finetune_methods: list[CoresetMethod] = MISSING
    finetune_steps: int = MISSING
    guarantee: GuaranteeConfig = field(default_factory=GuaranteeConfig)


@dataclass
class ProceduralConfig(DatasetConfig):
    gaussians: int = MISSING
    size: int = MISSING
    prescribed_views: int = MISSING
    novel_views: int = MISSING
    distance: float = positive()
    fov: float = within(0, 180, low_open=True, high_open=True)


@dataclass
class PlyConfig(DatasetConfig):
    path: str = MISSING  # point_cloud.ply
    colmap: str = MISSING  # folder with cameras.txt and images.txt
    scale: float = MISSING
    max_views: int = MISSING


PROTOCOL = GscoresetProtocol
METHODS = {"gscoreset": GscoresetConfig}
DATASETS = {"procedural": ProceduralConfig, "ply": PlyConfig}
