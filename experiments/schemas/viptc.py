"""Schemas of viptc."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from omegaconf import MISSING

from experiments.schemas.shared import DatasetConfig, MethodConfig, nonnegative, positive


class Divergence(StrEnum):
    kl = "kl"
    mse = "mse"


class Anchor(StrEnum):
    none = "none"
    rgb = "rgb"
    ir = "ir"


class TopologyForm(StrEnum):
    frobenius = "frobenius"
    kl = "kl"


class TopologyReading(StrEnum):
    batch = "batch"  # CM-PTC relates the batch's class means across modalities
    history = "history"  # each modality's batch means against its frozen prototypes



class ArmName(StrEnum):
    finetune = "finetune"
    joint = "joint"  # all tasks' data at once (the upper bound)
    feature_kd = "feature_kd"
    cka_kd = "cka_kd"
    sptc = "sptc"
    cmptc = "cmptc"
    both = "both"  # S-PTC + CM-PTC


class ReidDomain(StrEnum):
    regdb = "regdb"
    sysu = "sysu"
    llcm = "llcm"

@dataclass
class ViptcConfig(MethodConfig):
    lambda_sptc: float = nonnegative()
    lambda_cmptc: float = nonnegative()
    lambda_kd: float = nonnegative()
    tau: float = positive()
    divergence: Divergence = MISSING
    anchor: Anchor = MISSING
    form: TopologyForm = MISSING
    cmptc_topology: TopologyReading = MISSING  # what CM-PTC's topology matrices relate
    margin: float = nonnegative()
    backbone: str = MISSING  # small_cnn | a vision model's hub id or local folder
    width: int = MISSING
    dim: int = MISSING


@dataclass
class ViptcProtocol:
    arms: list[ArmName] = MISSING
    seeds: int = MISSING
    epochs: int = MISSING
    lr: float = positive()
    ids_per_batch: int = MISSING
    per_modality: int = MISSING
    workers: int = MISSING  # processes for the (seed, arm) jobs (1: in the run's process)


@dataclass
class SyntheticConfig(DatasetConfig):
    tasks: int = MISSING
    train_ids: int = MISSING
    test_ids: int = MISSING
    images_per_id: int = MISSING
    height: int = MISSING
    width: int = MISSING
    noise: float = nonnegative()
    pretrain_ids: int = MISSING  # identities of a pretraining domain (0: train from scratch)


@dataclass
class ViReidConfig(DatasetConfig):
    order: list[ReidDomain] = MISSING
    regdb_root: str | None = MISSING  # needed when regdb is in order
    sysu_root: str | None = MISSING
    llcm_root: str | None = MISSING
    trial: int = MISSING
    height: int = MISSING
    width: int = MISSING
    max_images_per_id: int = MISSING


PROTOCOL = ViptcProtocol
METHODS = {"viptc": ViptcConfig}
DATASETS = {"synthetic": SyntheticConfig, "vi_reid": ViReidConfig}
