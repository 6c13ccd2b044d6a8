"""A small image-to-video rectified-flow generator (pixel space, no VAE), trained with
Lightning on bouncing-ball clips, and its Euler sampler.

Conventions follow Wan / DiffSynth's FlowMatch scheduler: x_s = (1 - s) x0 + s eps, the
network predicts the velocity v = eps - x0 at noise level s in [0, 1], sampling integrates
x <- x + v (s_next - s) from s = 1 to 0 on a grid warped by ``shift``:
s' = shift s / (1 + (shift - 1) s). The condition is the first ``condition_frames`` frames
(image-to-video, 2 by default): the network sees them at every step and the sampler writes
them into the result.

Two CI-sized networks, both predicting the clean clip: ``VelocityNet`` treats the whole clip
as one vector (an MLP with a sinusoidal noise-level embedding, the condition frames and
residual blocks; 2000 steps take about 100 s on one CPU thread); ``FrameTransformer``
attends across frames (one token per frame), the temporal structure a video model has.
"""

from __future__ import annotations

import math

import lightning as L
import torch
from torch import nn

from common.streams import Streams
from data.bouncing_balls import BallWorld, real_clips
from models.trainer import Compute, make_trainer, step_indices

MIN_SIGMA = 1e-3


def noise_embedding(s: torch.Tensor, dim: int = 32) -> torch.Tensor:
    freqs = torch.exp(torch.linspace(0, math.log(1000.0), dim // 2, device=s.device))
    angle = s[:, None] * freqs[None] * math.pi
    return torch.cat([torch.sin(angle), torch.cos(angle)], -1)


class _CleanClipVelocity(nn.Module):
    """v(x_s, s, condition) for clips of shape (frames, size, size), parametrised through the
    clean-clip estimate ``denoise`` = x0_hat: v = (x_s - x0_hat) / s, the velocity of the
    straight path through x_s and x0_hat."""

    def forward(self, x: torch.Tensor, s: torch.Tensor, condition: torch.Tensor
                ) -> torch.Tensor:
        scale = s.clamp(min=MIN_SIGMA).reshape(-1, 1, 1, 1)
        return (x - self.denoise(x, s, condition)) / scale


class VelocityNet(_CleanClipVelocity):
    """An MLP on the flattened clip predicts x0_hat (a bottleneck is fine for clips on a
    low-dim manifold; it could not pass the noise through)."""

    def __init__(self, frames: int, size: int, hidden: int, blocks: int,
                 condition_frames: int = 2):
        super().__init__()
        self.shape, self.condition_frames = (frames, size, size), condition_frames
        d = frames * size * size
        c = condition_frames * size * size
        self.inp = nn.Linear(d + c + 32, hidden)
        self.blocks = nn.ModuleList(nn.Sequential(nn.LayerNorm(hidden), nn.Linear(hidden, hidden),
                                                  nn.SiLU(), nn.Linear(hidden, hidden))
                                    for _ in range(blocks))
        self.out = nn.Linear(hidden, d)

    def denoise(self, x: torch.Tensor, s: torch.Tensor, condition: torch.Tensor
                ) -> torch.Tensor:
        """x0_hat(x_s, s, condition)."""
        b = x.shape[0]
        h = self.inp(torch.cat([x.reshape(b, -1), condition.reshape(b, -1),
                                noise_embedding(s)], -1))
        for block in self.blocks:
            h = h + block(h)
        return self.out(h).reshape(b, *self.shape)


class FrameTransformer(_CleanClipVelocity):
    """A transformer over the clip's frames predicts x0_hat: one token per frame (its noisy
    pixels, the condition frame or zeros, and a flag for given frames), a learned frame
    position and the noise-level embedding added, ``blocks`` pre-norm encoder layers of
    width ``width`` (4 heads), and each token read back to its frame's pixels."""

    def __init__(self, frames: int, size: int, width: int, blocks: int,
                 condition_frames: int = 2):
        super().__init__()
        self.shape, self.condition_frames = (frames, size, size), condition_frames
        pixels = size * size
        self.inp = nn.Linear(2 * pixels + 1, width)
        self.position = nn.Parameter(torch.zeros(frames, width))
        self.noise = nn.Linear(32, width)
        layer = nn.TransformerEncoderLayer(width, 4, 4 * width, dropout=0.0,
                                           activation="gelu", batch_first=True,
                                           norm_first=True)
        self.layers = nn.TransformerEncoder(layer, blocks, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(width)
        self.out = nn.Linear(width, pixels)

    def denoise(self, x: torch.Tensor, s: torch.Tensor, condition: torch.Tensor
                ) -> torch.Tensor:
        b, frames = x.shape[:2]
        given = torch.zeros_like(x)
        given[:, :condition.shape[1]] = condition
        flag = torch.zeros(b, frames, 1, dtype=x.dtype, device=x.device)
        flag[:, :condition.shape[1]] = 1.0
        tokens = torch.cat([x.flatten(2), given.flatten(2), flag], -1)
        h = self.inp(tokens) + self.position + self.noise(noise_embedding(s))[:, None]
        return self.out(self.norm(self.layers(h))).reshape(b, *self.shape)


ARCHITECTURES = {"mlp": VelocityNet, "transformer": FrameTransformer}


def condition_of(clips: torch.Tensor, frames: int) -> torch.Tensor:
    return clips[:, :frames]


class FlowModule(L.LightningModule):
    def __init__(self, net: VelocityNet, world: BallWorld, batch: int, lr: float, seed: int):
        super().__init__()
        self.net, self.world, self.batch, self.lr = net, world, batch, lr
        self.rng = Streams(seed).numpy("training clips")

    def training_step(self, _, __):
        x0 = torch.tensor(real_clips(self.world, self.batch, self.rng), device=self.device)
        eps = torch.randn_like(x0)
        s = torch.rand(self.batch, device=self.device)
        xs = (1 - s)[:, None, None, None] * x0 + s[:, None, None, None] * eps
        # the velocity loss weighted by s^2: |s (v_hat - v)|^2 = |x0_hat - x0|^2
        cond = condition_of(x0, self.net.condition_frames)
        return ((self.net.denoise(xs, s, cond) - x0) ** 2).mean()

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=self.lr)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, self.trainer.max_steps)
        return [opt], [{"scheduler": sched, "interval": "step"}]


def build_generator(world: BallWorld, architecture: str, hidden: int, blocks: int,
                    condition_frames: int) -> _CleanClipVelocity:
    return ARCHITECTURES[architecture](world.frames, world.size, hidden, blocks,
                                       condition_frames)


def train_generator(world: BallWorld, steps: int, batch: int, hidden: int, blocks: int,
                    lr: float, seed: int, compute: Compute | None = None,
                    progress: bool = False, architecture: str = "mlp",
                    condition_frames: int = 2) -> _CleanClipVelocity:
    with Streams(seed).torch_default("initialisation and training noise"):
        net = build_generator(world, architecture, hidden, blocks, condition_frames)
        module = FlowModule(net, world, batch, lr, seed)
        make_trainer(compute, progress_bar=progress, max_steps=steps).fit(module,
                                                                          step_indices(steps))
    return net.cpu().eval()


def sigma_grid(steps: int, shift: float) -> torch.Tensor:
    s = torch.linspace(1.0, 0.0, steps + 1)
    return shift * s / (1 + (shift - 1) * s)


def sample(net: VelocityNet, condition: torch.Tensor, noise: torch.Tensor, steps: int,
           shift: float) -> torch.Tensor:
    """Euler integration from ``noise`` (B, frames, H, W) at s = 1 to a clip at s = 0; the
    condition frames are then set to the condition. Differentiable in ``noise``."""
    x = noise
    grid = sigma_grid(steps, shift)
    for s, s_next in zip(grid[:-1], grid[1:], strict=True):
        x = x + net(x, s.expand(len(x)), condition) * (s_next - s)
    return torch.cat([condition, x[:, condition.shape[1]:]], 1)


def held_out_flow_loss(net: _CleanClipVelocity, clips: torch.Tensor, seed: int,
                       levels: tuple[float, ...] = (0.1, 0.3, 0.5, 0.7, 0.9)) -> float:
    """The training loss |x0_hat - x0|^2 on held-out clips, averaged over fixed noise levels
    with fixed noise (the same for every generator of a comparison)."""
    eps = torch.randn(clips.shape, generator=torch.Generator().manual_seed(seed))
    cond = condition_of(clips, net.condition_frames)
    with torch.no_grad():
        losses = [((net.denoise((1 - s) * clips + s * eps, torch.full((len(clips),), s), cond)
                    - clips) ** 2).mean() for s in levels]
    return float(torch.stack(losses).mean())
