"""Schemas of gcad."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from omegaconf import MISSING

from experiments.schemas.shared import (
    DatasetConfig,
    MethodConfig,
    any_integer,
    nonnegative,
    positive,
)


class SteeringKind(StrEnum):
    none = "none"
    prompt = "prompt"  # the persona as the system prompt
    residual = "residual"  # a residual-stream vector at one layer
    attention = "attention"  # GCAD's attention delta


class SteeredPositions(StrEnum):
    response = "response"  # assistant tokens only
    all = "all"  # every token read


class Gate(StrEnum):
    mass = "mass"  # GCAD's gate by the system prompt's attention mass (RECON)
    constant = "constant"
    exact = "exact"


@dataclass
class SteeringConfig:
    """One steering variant (``methods/gcad/steering.py``)."""

    kind: SteeringKind = MISSING
    scale: float = MISSING  # the signal's multiplier (1: the mean contrastive difference)
    positions: SteeredPositions = MISSING
    gate: Gate = MISSING  # attention only


@dataclass
class GCADConfig(MethodConfig, SteeringConfig):
    pass


@dataclass
class GcadProtocol:
    baselines: dict[str, SteeringConfig] = MISSING  # compared with the method, name -> variant
    run_baselines: list[str] | None = None  # the baselines to run (null: all of them)
    personas: list[str] | None = None  # the dataset's personas to play (null: all of them)
    residual_layer: int = any_integer()  # residual steering's layer (negative: from the end)
    max_new_tokens: int = MISSING  # per assistant turn
    temperature: float = nonnegative()  # sampling (top_k off, top_p 1)
    # multipliers of the scales of residual steering and the method (1 is always run): the
    # methods compared at equal turn-1 trait, and the contamination-drift correlation
    strengths: list[float] = positive()


@dataclass
class PersonaDialoguesConfig(DatasetConfig):
    personas: dict[str, str] = MISSING  # name -> system prompt
    neutral: str = MISSING  # the contrast prompt of the extraction
    extraction_turns: list[str] = MISSING  # user turns of the extraction dialogue
    user_turns: list[str] = MISSING  # the scripted dialogue (the cache is carried)


PROTOCOL = GcadProtocol
METHODS = {"gcad": GCADConfig}
DATASETS = {"persona_dialogues": PersonaDialoguesConfig}
