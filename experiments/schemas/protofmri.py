"""Schemas of protofmri."""

from __future__ import annotations

from dataclasses import dataclass
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
)


class PrototypeSelection(StrEnum):
    voxel_greedy = "voxel_greedy"  # forward selection on the training voxels (RECON)
    kmeans = "kmeans"  # k-means prototypes, no voxel data


class Readout(StrEnum):
    receptive_field = "receptive_field"  # each voxel pools the activation maps through its pRF
    max = "max"  # one global max per prototype, blind to position


@dataclass
class ProtoFMRIConfig(MethodConfig):
    backbone: str = MISSING  # random_cnn (offline) | a vision transformer's hub id
    channels: int = MISSING  # patch-token size of the frozen conv features
    colour_weight: float = nonnegative()  # weight of each patch's mean colour appended to its token
    prototypes: int = MISSING  # K
    selection: PrototypeSelection = MISSING  # how the K prototypes are learned
    candidates: int = MISSING  # voxel_greedy: size of the pushed k-means pool it selects from
    top_k: int = MISSING  # prototypes kept active per image (RECON)
    threshold_quantile: float = unit()  # theta_k: this quantile of s_k over training patches
    salient_fraction: float = share()  # k-means on this largest-norm share of patch tokens
    readout: Readout = MISSING  # how the voxel readout sees the prototype activations
    receptive_field_sigmas: list[float] = positive()  # candidate pRF widths, patch units


@dataclass
class ProtofmriProtocol:
    alphas: list[float] = positive()  # ridge grid, chosen per voxel by cross-validation
    folds: int = MISSING
    synthesis_images: int = MISSING  # scenes per concept in the closed-loop synthesis
    image_synthesis_images: int = MISSING  # test images per concept, pixel-space synthesis
    image_synthesis_steps: int = MISSING  # Adam steps on the pixels
    image_synthesis_lr: float = positive()
    image_synthesis_hold: float = nonnegative()  # weight holding the other prototypes in place


@dataclass
class StimulusWorldConfig(DatasetConfig):
    train_images: int = MISSING
    test_images: int = MISSING
    max_concepts: int = MISSING  # concepts per image: 1 .. this
    voxels: int = MISSING
    repeats: int = MISSING
    noise_ceiling: list[float] = unit()  # range of the voxels' true noise ceilings
    prf_sigma: float | None = positive()  # pRF width in pixels (null: responses see presence only)


@dataclass
class Algonauts2023Config(DatasetConfig):
    root: str = MISSING  # the challenge data folder (subj01 ... subj08 inside)
    subject: int = MISSING
    roi_class: str | None = MISSING  # e.g. prf-visualrois, floc-faces, streams (null: all)
    image_size: int = MISSING  # images are resized to this (64 for backbone=random_cnn)
    limit: int | None = MISSING  # the first images only (null: all)
    test_fraction: float = open_unit()  # held-out share of the images



@dataclass
class NSDConfig(DatasetConfig):
    root: str = MISSING  # the NSD release folder (nsddata, nsddata_betas, nsddata_stimuli)
    subject: int = MISSING
    sessions: int = MISSING  # the first sessions of 750 trials each (40 for subjects 1, 2, 5, 7)
    roi: str = MISSING  # func1pt8mm ROI volume, e.g. nsdgeneral
    image_size: int = MISSING
    limit: int | None = MISSING  # the first images only (null: all)
    test_fraction: float = open_unit()  # held-out share when the shared 1000 are not all or none


PROTOCOL = ProtofmriProtocol
METHODS = {"protofmri": ProtoFMRIConfig}
DATASETS = {"stimulus_world": StimulusWorldConfig, "algonauts2023": Algonauts2023Config,
            "nsd": NSDConfig}
