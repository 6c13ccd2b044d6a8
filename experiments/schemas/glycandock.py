"""Schemas of glycandock."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from omegaconf import MISSING

from experiments.schemas.shared import DatasetConfig, MethodConfig, nonnegative, positive, unit


class TopologyFeature(StrEnum):
    anomer = "anomer"  # alpha/beta of each linkage
    sugar = "sugar"  # the monosaccharide's identity
    stereo = "stereo"  # chirality at each ring carbon
    tree = "tree"  # branch depth and parent linkage position
    distance = "distance"  # through-bond distances between residues


class Arm(StrEnum):
    base = "base"  # the pose model alone
    topology = "topology"  # + topological features
    energy = "energy"  # + the CHI energy term
    both = "both"  # + both
    chi_minimum = "chi_minimum"  # the base pose with every linkage at its CHI minimum


@dataclass
class GlycandockConfig(MethodConfig):
    topology_features: list[TopologyFeature] = MISSING
    lambda_energy: float = nonnegative()


@dataclass
class GlycandockProtocol:
    arms: list[Arm] = MISSING
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
