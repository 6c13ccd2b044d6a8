"""Schemas of glycandock."""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import MISSING

from experiments.schemas.shared import DatasetConfig, MethodConfig, nonnegative, positive, unit


@dataclass
class GlycandockConfig(MethodConfig):
    topology_features: list[str] = MISSING  # anomer | sugar | stereo | tree | distance
    lambda_energy: float = nonnegative()


@dataclass
class GlycandockProtocol:
    arms: list[str] = MISSING  # base | topology | energy | both | chi_minimum
    epochs: int = MISSING
    batch_size: int = MISSING
    lr: float = positive()
    hidden: int = MISSING
    export_protenix: int = MISSING


@dataclass
class ComplexesConfig(DatasetConfig):
    families: int = MISSING
    held_out_families: int = MISSING
    topologies: int = MISSING
    max_residues: int = MISSING
    held_out_topology_fraction: float = unit()
    kt: float = positive()
    train_complexes: int = MISSING
    test_complexes: int = MISSING


@dataclass
class StructurePairsConfig(DatasetConfig):
    root: str = MISSING
    reference: str = MISSING  # the reference file's stem in each case folder


@dataclass
class ProtGlycanDockConfig(DatasetConfig):
    hub_id: str = MISSING
    split: str | None = MISSING
    limit: int = MISSING
    predictions_root: str | None = MISSING


PROTOCOL = GlycandockProtocol
METHODS = {"glycandock": GlycandockConfig}
DATASETS = {"complexes": ComplexesConfig, "structure_pairs": StructurePairsConfig,
            "protglycandock": ProtGlycanDockConfig}
