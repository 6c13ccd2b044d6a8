"""Schemas of proprio."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from omegaconf import MISSING

from experiments.schemas.shared import (
    DatasetConfig,
    MethodConfig,
    nonnegative,
    positive,
    unit,
    within,
)


class RefineSpace(StrEnum):
    noise = "noise"  # gradient steps on the sampler's initial noise
    clip = "clip"  # gradient steps on the free frames of the clip


class Architecture(StrEnum):
    mlp = "mlp"  # the whole clip as one vector (methods/proprio/generator.py VelocityNet)
    transformer = "transformer"  # attention across frames, a token per frame


@dataclass
class ProprioConfig(MethodConfig):
    sigmas: list[float] = nonnegative()
    perturbations: int = MISSING
    beta: float = MISSING
    mask: bool = MISSING
    mask_threshold: float = nonnegative()


@dataclass
class GeneratorSettings:
    architecture: Architecture = MISSING
    steps: int = MISSING
    batch: int = MISSING
    hidden: int = MISSING  # mlp: the width
    token_width: int = MISSING  # transformer: the width of a frame token
    blocks: int = MISSING
    condition_frames: int = within(1, None)  # image-to-video: the frames given
    lr: float = positive()


@dataclass
class RefineSettings:
    space: RefineSpace = MISSING
    steps: int = MISSING
    lr: float = positive()
    proximity: float = nonnegative()


@dataclass
class VideoSampling:
    """A real text-to-video pipeline's sampling (its own arguments)."""

    samples_per_prompt: int = MISSING  # N of best-of-N
    num_frames: int = MISSING
    height: int = MISSING
    width: int = MISSING
    num_inference_steps: int = MISSING
    guidance_scale: float = nonnegative()


@dataclass
class ProprioProtocol:
    generator: GeneratorSettings = field(default_factory=GeneratorSettings)
    sampler_steps: int = MISSING
    shift: float = MISSING
    eval_clips: int = MISSING
    discriminator_clips: int = MISSING
    conditions: int = MISSING
    samples_per_condition: int = MISSING
    refine: RefineSettings = field(default_factory=RefineSettings)
    video: VideoSampling = field(default_factory=VideoSampling)  # model=wan* only


@dataclass
class BouncingBallsConfig(DatasetConfig):
    frames: int = MISSING
    size: int = MISSING
    radius: float = positive()
    g: float = nonnegative()
    restitution: float = unit()


@dataclass
class PhysicsIQConfig(DatasetConfig):
    real_root: str = MISSING
    generated_root: str = MISSING
    seconds: float = positive()
    downscale: int = MISSING


@dataclass
class VideoPromptsConfig(DatasetConfig):
    hub_id: str = MISSING  # a prompt set by name (VideoPhy-2's test split by default)
    split: str = MISSING
    prompt_column: str = MISSING
    prompts_file: str | None = MISSING  # or a local text file, one prompt per line
    limit: int = MISSING


PROTOCOL = ProprioProtocol
METHODS = {"proprio": ProprioConfig}
DATASETS = {"bouncing_balls": BouncingBallsConfig, "physics_iq": PhysicsIQConfig,
            "videophy2": VideoPromptsConfig}
