"""Proprio on a real Wan-family text-to-video pipeline (``diffusers``, e.g.
``Wan-AI/Wan2.1-T2V-1.3B-Diffusers``): the generator scores its own samples in its latent
space with the same residual as the small generator (``score.proprio_score``).

Wan's flow convention (diffusers' flow-matching schedulers): z_s = (1 - s) z0 + s eps, the
transformer predicts v = eps - z0 at timestep 1000 s, conditioned on the prompt's text
embeddings. Latents are the VAE's, normalised per channel ((z - mean) / std, as the
pipeline denormalises before decoding). The motion mask is computed on the decoded frames
and max-pooled onto the latent grid (Wan's VAE keeps the first frame and compresses every
``temporal`` further frames into one latent frame, ``spatial`` x ``spatial`` pixels into
one latent pixel). The paper's real generator (TurboWan2.2, distilled) may predict another
quantity: check the checkpoint's output before trusting its residual (RECON).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from methods.proprio.score import ScoreOptions, motion_mask, proprio_score, shared_perturbations


class WanVelocity(nn.Module):
    """The transformer as ``net(z, s, text_embeddings) -> v`` (the small generator's
    interface)."""

    def __init__(self, transformer) -> None:
        super().__init__()
        self.transformer = transformer

    def forward(self, z: torch.Tensor, s: torch.Tensor, condition: torch.Tensor
                ) -> torch.Tensor:
        dtype = self.transformer.dtype
        v = self.transformer(hidden_states=z.to(dtype), timestep=(1000 * s).to(z.device),
                             encoder_hidden_states=condition.to(dtype), return_dict=False)[0]
        return v.to(z.dtype)


def latent_mask(mask: torch.Tensor, temporal: int, spatial: int) -> torch.Tensor:
    """(B, T, H, W) pixel mask -> (B, 1, 1 + (T - 1) / temporal, H / spatial, W / spatial):
    latent frame 0 covers pixel frame 0, latent frame j the pixel frames of its group."""
    first, rest = mask[:, :1], mask[:, 1:]
    b, t, h, w = rest.shape
    groups = rest.reshape(b, t // temporal, temporal, h, w).amax(2)
    frames = torch.cat([first, groups], 1)
    pooled = F.max_pool2d(frames.reshape(-1, 1, h, w), spatial).reshape(
        b, frames.shape[1], h // spatial, w // spatial)
    return pooled[:, None]


@dataclass
class WanSelfScorer:
    """Scores, selects (best-of-N) and decodes a Wan pipeline's own samples."""

    pipe: object
    opts: ScoreOptions
    seed: int = 0

    def __post_init__(self) -> None:
        for component in self.pipe.components.values():  # frozen: no dropout anywhere
            if isinstance(component, nn.Module):
                component.eval().requires_grad_(False)
        self.net = WanVelocity(self.pipe.transformer)
        vae = self.pipe.vae.config
        self.temporal = int(self.pipe.vae_scale_factor_temporal)
        self.spatial = int(self.pipe.vae_scale_factor_spatial)
        self.mean = torch.tensor(vae.latents_mean).view(1, vae.z_dim, 1, 1, 1)
        self.std = torch.tensor(vae.latents_std).view(1, vae.z_dim, 1, 1, 1)

    @property
    def device(self):
        return self.pipe.transformer.device

    @torch.no_grad()
    def embed(self, prompts: list[str]) -> torch.Tensor:
        embeds, _ = self.pipe.encode_prompt(prompts, do_classifier_free_guidance=False,
                                            device=self.device)
        return embeds

    @torch.no_grad()
    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """(B, C, F, h, w) normalised latents -> (B, T, H, W, 3) frames in [0, 1]."""
        vae = self.pipe.vae
        z = latents.to(vae.dtype) * self.std.to(latents) + self.mean.to(latents)
        video = vae.decode(z.to(vae.dtype), return_dict=False)[0]  # (B, 3, T, H, W), [-1, 1]
        return ((video.float().clamp(-1, 1) + 1) / 2).permute(0, 2, 3, 4, 1)

    @torch.no_grad()
    def encode(self, frames: torch.Tensor) -> torch.Tensor:
        """(B, T, H, W, 3) frames in [0, 1] -> normalised latents (the posterior mode)."""
        vae = self.pipe.vae
        video = (frames.permute(0, 4, 1, 2, 3) * 2 - 1).to(vae.device, vae.dtype)
        z = vae.encode(video).latent_dist.mode().float()
        return (z - self.mean.to(z)) / self.std.to(z)

    def mask(self, latents: torch.Tensor) -> torch.Tensor | None:
        if not self.opts.mask:
            return None
        gray = self.decode(latents).mean(-1)
        return latent_mask(motion_mask(gray, self.opts), self.temporal, self.spatial)

    @torch.no_grad()
    def score(self, latents: torch.Tensor, embeds: torch.Tensor) -> torch.Tensor:
        """(B,) Proprio's R of each latent clip (lower = more plausible)."""
        eps = shared_perturbations(tuple(latents.shape[1:]), self.opts.perturbations,
                                   self.seed)
        mask = self.mask(latents)
        latents = latents.float()
        condition = embeds.expand(len(latents), *embeds.shape[1:])
        return proprio_score(self.net, latents, condition, eps, self.opts,
                             None if mask is None else mask.to(latents)).cpu()

    def best_of_n(self, prompt: str, n: int, generator: torch.Generator, **sample
                  ) -> dict[str, torch.Tensor]:
        """N samples of one prompt (``sample``: the pipeline's own arguments, e.g.
        num_frames, height, width, num_inference_steps, guidance_scale), their scores and
        the index of the best."""
        latents = self.pipe(prompt=[prompt] * n, output_type="latent", generator=generator,
                            **sample).frames
        scores = self.score(latents, self.embed([prompt]))
        return {"latents": latents, "scores": scores, "best": int(scores.argmin())}


def load_wan_pipeline(model_cfg, device: str):
    """A diffusers pipeline by hub id or local folder (the local cache first; offline or an
    unreachable hub: one line saying how to fetch it)."""
    import diffusers

    from models.lm.loader import load_by_name

    def load(local_only: bool):
        return diffusers.DiffusionPipeline.from_pretrained(
            str(model_cfg.hub_id), dtype=getattr(torch, model_cfg.dtype.name),
            local_files_only=local_only)

    pipe = load_by_name(str(model_cfg.hub_id), load, kind="pipeline")
    pipe.vae.to(torch.float32)  # decoding in float32 (as the Wan examples do)
    pipe.set_progress_bar_config(disable=True)
    return pipe.to(device)
