"""Sensitivity-sampled weighted coresets of 3D Gaussian splats at a prescribed resolution
(abstract 5): a differentiable CPU rasterizer, the per-ray optical-depth objective,
sensitivities and samplers, the pruning baselines (opacity, LightGaussian, Mini-Splatting,
PUP-3DGS Fisher) and a K-step finetune."""

from methods.gscoreset.coreset import (
    SENSITIVITY_KINDS,
    Coreset,
    RayObjective,
    blending_totals,
    lightgaussian_scores,
    multinomial_sample,
    poisson_sample,
    pup_fisher,
    pup_fisher_scores,
    sample_size_bound,
    sensitivities,
    top_k,
)
from methods.gscoreset.rasterizer import (
    Camera,
    Gaussians,
    blending_statistics,
    optical_depth,
    project,
    render,
)


def finetune(*args, **kwargs):
    """The K-step Lightning finetune (imported lazily: Lightning is slow to import)."""
    from methods.gscoreset.finetune import finetune as run

    return run(*args, **kwargs)


__all__ = [
    "SENSITIVITY_KINDS", "Camera", "Coreset", "Gaussians", "RayObjective",
    "blending_statistics", "blending_totals", "finetune", "lightgaussian_scores",
    "multinomial_sample", "optical_depth", "poisson_sample", "project", "pup_fisher",
    "pup_fisher_scores", "render", "sample_size_bound", "sensitivities", "top_k",
]
