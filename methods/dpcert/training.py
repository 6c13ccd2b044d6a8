"""Many small models trained at once with Lightning: a DPA ensemble (one MLP per hash
partition) and a population of DP-SGD models (to estimate p_A over training randomness).

Both hold their models as batched parameter tensors (model axis first), so one optimizer
step trains all of them.
"""

from __future__ import annotations

import warnings

import lightning as L
import numpy as np
import torch
from torch import nn

from common.errors import UserError
from common.streams import Streams
from models.trainer import Compute, make_trainer, step_indices


def hash_partition(x: np.ndarray, k: int) -> np.ndarray:
    """DPA's content hash (Levine and Feizi): sum of the pixels quantized to 0..255, mod k.
    A sample's partition depends on its content only, so inserting or deleting r samples
    changes at most r partitions."""
    return (np.rint(np.asarray(x) * 255).astype(np.int64).sum(axis=1) % k).astype(int)


class BatchedMLP(nn.Module):
    """``models`` independent one-hidden-layer MLPs (hidden=0: softmax regression)."""

    def __init__(self, models: int, dim: int, hidden: int, classes: int,
                 generator: torch.Generator) -> None:
        super().__init__()

        def init(*shape, fan_in):
            return nn.Parameter(torch.randn(*shape, generator=generator) / fan_in**0.5)

        self.hidden = hidden
        if hidden:
            self.w1, self.b1 = init(models, dim, hidden, fan_in=dim), init(models, 1, hidden,
                                                                            fan_in=1e6)
            self.w2 = init(models, hidden, classes, fan_in=hidden)
        else:
            self.w2 = init(models, dim, classes, fan_in=dim)
        self.b2 = nn.Parameter(torch.zeros(models, 1, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, d) shared by all models or (M, B, d) -> logits (M, B, classes)."""
        if x.dim() == 2:
            x = x.expand(self.b2.shape[0], *x.shape)
        h = torch.relu(x @ self.w1 + self.b1) if self.hidden else x
        return h @ self.w2 + self.b2


class DPAEnsemble(L.LightningModule):
    """k MLPs, model j trained full-batch on partition j (cross-entropy, Adam)."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, partition: np.ndarray, k: int,
                 hidden: int, classes: int, lr: float, streams: Streams,
                 noise_sigma: float = 0.0) -> None:
        super().__init__()
        self.noise_sigma = noise_sigma  # Gaussian augmentation, as smoothing needs
        self.gen = streams.torch("augmentation")
        self.register_buffer("x", x)
        self.register_buffer("y", y)
        mask = torch.zeros(k, len(y))
        mask[torch.as_tensor(partition), torch.arange(len(y))] = 1.0
        self.register_buffer("mask", mask)
        self.net = BatchedMLP(k, x.shape[1], hidden, classes, streams.torch("init"))
        self.lr = lr

    def training_step(self, batch, batch_idx):
        k = self.mask.shape[0]
        noise = torch.randn((k, *self.x.shape), generator=self.gen).to(self.device)
        logits = self.net(self.x + self.noise_sigma * noise)  # (k, N, C)
        loss = nn.functional.cross_entropy(logits.transpose(1, 2), self.y.expand(
            logits.shape[0], -1), reduction="none")
        per_model = (loss * self.mask).sum(1) / self.mask.sum(1).clamp(min=1)
        return per_model.sum()

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.lr)


class DPSGDPopulation(L.LightningModule):
    """M softmax-regression models trained with DP-SGD (Abadi et al.): Poisson sampling at
    rate q, per-example gradients (closed form for softmax regression: x (p - onehot)^T)
    clipped to norm C, Gaussian noise N(0, sigma^2 C^2), divided by the expected batch size.
    Own per-example clipping rather than Opacus: the whole population is one batched model,
    which Opacus's per-module hooks do not handle."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, models: int, classes: int,
                 noise_multiplier: float, clip: float, sampling_rate: float, lr: float,
                 streams: Streams, noise_sigma: float = 0.0) -> None:
        super().__init__()
        self.noise_sigma = noise_sigma  # per-example Gaussian augmentation
        self.automatic_optimization = False
        self.register_buffer("x", x)
        self.register_buffer("onehot", nn.functional.one_hot(y, classes).float())
        self.net = BatchedMLP(models, x.shape[1], 0, classes, streams.torch("init"))
        self.noise_multiplier, self.clip = noise_multiplier, clip
        self.q, self.lr = sampling_rate, lr
        self.gen = streams.torch("sampling and noise")

    def training_step(self, batch, batch_idx):
        m, n = self.net.w2.shape[0], len(self.x)
        take = torch.rand(m, n, generator=self.gen) < self.q  # Poisson sampling per model
        model_idx, example_idx = (t.to(self.device) for t in torch.nonzero(take, as_tuple=True))
        with torch.no_grad():
            noise = torch.randn((len(model_idx), self.x.shape[1]), generator=self.gen)
            x = self.x[example_idx] + self.noise_sigma * noise.to(self.device)
            w, b = self.net.w2[model_idx], self.net.b2[model_idx, 0]  # (S, d, C), (S, C)
            probs = torch.softmax(torch.einsum("sd,sdc->sc", x, w) + b, dim=-1)
            err = probs - self.onehot[example_idx]  # (S, C)
            # per-example gradient norm of [x (p - y)^T, (p - y)]: |p - y| sqrt(|x|^2 + 1)
            norms = err.norm(dim=-1) * torch.sqrt((x**2).sum(-1) + 1)
            err = err * torch.clamp(self.clip / norms.clamp(min=1e-12), max=1.0)[:, None]
            grad_w = torch.zeros_like(self.net.w2).index_add_(
                0, model_idx, torch.einsum("sd,sc->sdc", x, err))
            grad_b = torch.zeros_like(self.net.b2).index_add_(0, model_idx, err[:, None, :])
            sd = self.noise_multiplier * self.clip
            grad_w += sd * torch.randn(grad_w.shape, generator=self.gen).to(self.device)
            grad_b += sd * torch.randn(grad_b.shape, generator=self.gen).to(self.device)
            expected = self.q * n
            self.net.w2 -= self.lr * grad_w / expected
            self.net.b2 -= self.lr * grad_b / expected

    def configure_optimizers(self):
        return None


def fit(module: L.LightningModule, steps: int, compute: Compute | None = None
        ) -> L.LightningModule:
    """Run ``steps`` optimizer steps with the project's Lightning Trainer on one device (the
    population updates by hand, so multi-process strategies do not apply)."""
    compute = compute or Compute()
    if compute.strategy not in ("auto", "single_device"):
        raise UserError(f"dpcert trains its model populations on one device; use "
                        f"trainer=auto, cpu or gpu, not strategy {compute.strategy}")
    trainer = make_trainer(compute, max_epochs=1)
    loader = step_indices(steps)
    with warnings.catch_warnings():  # DP-SGD updates by hand: no optimizer, on purpose
        warnings.filterwarnings("ignore", message=".*configure_optimizers.*")
        trainer.fit(module, loader)
    return module


@torch.no_grad()
def margin_descent_direction(net: BatchedMLP, x: np.ndarray, predicted: np.ndarray
                             ) -> np.ndarray:
    """Per point, the unit l2 direction of steepest descent of the models' mean logit margin
    of the predicted class over the best other class, at the point: the strongest
    first-order attack on the trained models (one normalized gradient step)."""
    device = net.b2.device
    with torch.enable_grad():  # also where the caller evaluates without gradients
        xt = torch.as_tensor(x, dtype=torch.float32, device=device).requires_grad_(True)
        logits = net(xt)  # (M, points, classes)
        label = torch.as_tensor(predicted, device=device)[None, :, None].expand(
            logits.shape[0], -1, 1)
        own = logits.gather(-1, label).squeeze(-1)
        other = logits.scatter(-1, label, float("-inf")).amax(-1)
        (down,) = torch.autograd.grad(-(own - other).mean(0).sum(), xt)
    down = down.cpu().numpy()
    return down / np.maximum(np.linalg.norm(down, axis=1, keepdims=True), 1e-12)


def smoothed_votes(net: BatchedMLP, x: np.ndarray, sigma: float, draws: int, classes: int,
                   generator: torch.Generator) -> np.ndarray:
    """Counts (points, classes) of each model's prediction on ``draws`` Gaussian-noised
    copies of each point: one (model, noise) draw per model per copy."""
    device = net.b2.device
    xt = torch.as_tensor(x, dtype=torch.float32)
    counts = torch.zeros(len(x), classes, dtype=torch.long, device=device)
    for _ in range(draws):
        noise = torch.randn((net.b2.shape[0], *xt.shape), generator=generator)
        noisy = (xt + sigma * noise if sigma > 0 else xt.expand_as(noise)).to(device)
        pred = net(noisy).argmax(-1)  # (M, points): every model sees its own noise
        counts += nn.functional.one_hot(pred, classes).sum(0)
    return counts.cpu().numpy()
