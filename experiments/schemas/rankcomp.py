"""Schemas of rankcomp."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from omegaconf import MISSING

from experiments.schemas.shared import DatasetConfig, MethodConfig, nonnegative, unit


class Quota(StrEnum):
    hare = "hare"  # a group of >= l n / k voters deserves l outputs
    droop = "droop"  # a group of > l n / (k + 1) voters deserves l outputs


class Reading(StrEnum):
    top = "top"  # an output represents C if its first candidate is in C
    prefix = "prefix"  # ... if it ranks C in its top |C| positions



class Culture(StrEnum):
    """prefsampling's ordinal cultures (data/profiles.py)."""

    impartial = "impartial"
    mallows = "mallows"
    urn = "urn"
    single_peaked_walsh = "single_peaked_walsh"
    single_peaked_conitzer = "single_peaked_conitzer"
    single_crossing = "single_crossing"


@dataclass
class RankCompressionConfig(MethodConfig):
    k: int = MISSING  # number of output rankings
    psc_quota: Quota = MISSING
    psc_reading: Reading = MISSING


@dataclass
class StressConfig:
    n_voters: int = MISSING
    n_candidates: int = MISSING
    instances: int = MISSING


@dataclass
class ImpossibilityConfig:
    max_n: int = MISSING
    tries: int = MISSING
    sizes: list[list[int]] = MISSING  # [candidates m, outputs k] pairs


@dataclass
class TimingConfig:
    n_values: list[int] = MISSING
    m_values: list[int] = MISSING
    n_fixed: int = MISSING
    m_fixed: int = MISSING


@dataclass
class RankcompProtocol:
    stress: StressConfig = MISSING  # the largest instances checked
    impossibility: ImpossibilityConfig = MISSING
    timing: TimingConfig = MISSING


@dataclass
class RankingCulturesConfig(DatasetConfig):
    cultures: list[Culture] = MISSING
    n_voters: int = MISSING
    n_candidates: int = MISSING
    instances: int = MISSING
    mallows_phi: float = unit()
    urn_alpha: float = nonnegative()


@dataclass
class PreflibConfig(DatasetConfig):
    path: str = MISSING  # a PrefLib .soc/.soi file


PROTOCOL = RankcompProtocol
METHODS = {"rank_compression": RankCompressionConfig}
DATASETS = {"ranking_cultures": RankingCulturesConfig, "preflib": PreflibConfig}
