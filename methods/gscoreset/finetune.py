"""K-step finetune of a pruned scene on the prescribed views (Lightning): weights folded into
opacity first, then Adam on (1 - lambda) L1 + lambda (1 - SSIM) with lambda = 0.2 and the
3DGS per-parameter learning rates (positions scaled by the scene extent)."""

from __future__ import annotations

import lightning as L
import torch
from torchmetrics.functional.image import structural_similarity_index_measure as ssim

from methods.gscoreset.rasterizer import Camera, Gaussians, render
from models.trainer import Compute, make_trainer, step_indices

LAMBDA_DSSIM = 0.2
LEARNING_RATES = {"means": 1.6e-4, "quats": 1e-3, "log_scales": 5e-3,
                  "opacity_logits": 5e-2, "colors": 2.5e-3}


def photometric_loss(image: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    l1 = (image - target).abs().mean()
    similarity = ssim(image.permute(2, 0, 1)[None], target.permute(2, 0, 1)[None],
                      data_range=1.0)
    return (1 - LAMBDA_DSSIM) * l1 + LAMBDA_DSSIM * (1 - similarity)


class SplatFinetune(L.LightningModule):
    def __init__(self, gaussians: Gaussians, cameras: list[Camera],
                 targets: list[torch.Tensor], extent: float):
        super().__init__()
        self.params = torch.nn.ParameterDict({
            k: torch.nn.Parameter(getattr(gaussians, k).detach().clone())
            for k in LEARNING_RATES})
        self.cameras, self.extent = cameras, extent
        self.register_buffer("targets", torch.stack(targets))

    def gaussians(self) -> Gaussians:
        return Gaussians(**{k: self.params[k] for k in LEARNING_RATES})

    def training_step(self, batch, _):
        view = int(batch) % len(self.cameras)
        image, _ = render(self.gaussians(), self.cameras[view])
        return photometric_loss(image.clamp(0, 1), self.targets[view])

    def configure_optimizers(self):
        groups = [{"params": [self.params[k]],
                   "lr": lr * (self.extent if k == "means" else 1.0)}
                  for k, lr in LEARNING_RATES.items()]
        return torch.optim.Adam(groups, eps=1e-15)


def finetune(gaussians: Gaussians, cameras: list[Camera], targets: list[torch.Tensor],
             steps: int, extent: float, compute: Compute | None = None,
             progress: bool = False) -> Gaussians:
    """The scene after ``steps`` optimizer steps (one prescribed view per step, in turn)."""
    if steps <= 0:
        return gaussians
    module = SplatFinetune(gaussians, cameras, targets, extent)
    make_trainer(compute, progress_bar=progress, max_steps=steps).fit(module,
                                                                      step_indices(steps))
    return module.gaussians().detach()
