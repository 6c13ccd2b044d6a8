"""Schemas of gscoreset."""

from __future__ import annotations

from dataclasses import dataclass, field

from omegaconf import MISSING

from experiments.schemas.shared import DatasetConfig, MethodConfig


@dataclass
class GscoresetConfig(MethodConfig):
    sensitivity: str = MISSING  # max | sum | mix (RECON)
    uniform_mix: float = MISSING
    eta: float = MISSING
    lightgaussian_with_t: bool = MISSING
    pup: bool = MISSING
    pup_patch: int = MISSING  # must divide the image size


@dataclass
class GuaranteeConfig:
    gaussians: int = MISSING
    size: int = MISSING
    views: int = MISSING
    eps: float = MISSING
    delta: float = MISSING
    trials: int = MISSING
    fractions: list[float] = MISSING


@dataclass
class GscoresetProtocol:
    budgets: list[float] = MISSING
    finetune_budget: float = MISSING
    finetune_methods: list[str] = MISSING
    finetune_steps: int = MISSING
    guarantee: GuaranteeConfig = field(default_factory=GuaranteeConfig)


@dataclass
class ProceduralConfig(DatasetConfig):
    gaussians: int = MISSING
    size: int = MISSING
    prescribed_views: int = MISSING
    novel_views: int = MISSING
    distance: float = MISSING
    fov: float = MISSING


@dataclass
class PlyConfig(DatasetConfig):
    path: str = MISSING  # point_cloud.ply
    colmap: str = MISSING  # folder with cameras.txt and images.txt
    scale: float = MISSING
    max_views: int = MISSING


PROTOCOL = GscoresetProtocol
METHODS = {"gscoreset": GscoresetConfig}
DATASETS = {"procedural": ProceduralConfig, "ply": PlyConfig}
