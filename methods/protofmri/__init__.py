"""Prototype-based interpretable fMRI encoding (abstract 8): frozen patch features, a sparse
layer of visual prototypes and a linear voxel readout, whose activations name the concepts
in a stimulus and whose weights give each voxel's selectivity."""

from methods.protofmri.analysis import (
    attributions,
    auroc,
    auroc_table,
    concept_tuning,
    match_concepts,
    noise_ceiling,
    patch_grid,
    pearson,
    pointing_chance,
    pointing_game,
    tuning_recovery,
)
from methods.protofmri.model import (
    HubPatchFeatures,
    MaxReadout,
    PatchFeatures,
    PooledReadout,
    PrototypeLayer,
    Ridge,
    fit_pooled_readout,
    fit_prototypes,
    patch_features,
    push,
    random_fourier_features,
    ridge_cv,
    ridge_fit,
    select_prototypes,
    synthesize,
)

__all__ = [
    "HubPatchFeatures", "MaxReadout", "PatchFeatures", "PooledReadout", "PrototypeLayer",
    "Ridge", "attributions", "auroc", "auroc_table", "concept_tuning", "fit_pooled_readout",
    "fit_prototypes", "match_concepts", "noise_ceiling",
    "patch_features", "patch_grid", "pearson", "pointing_chance", "pointing_game", "push",
    "random_fourier_features", "ridge_cv", "ridge_fit",
    "select_prototypes", "synthesize", "tuning_recovery",
]
