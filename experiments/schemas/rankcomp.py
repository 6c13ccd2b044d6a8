"""Method schema of rankcomp."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from experiments.schemas import MethodConfig


class Quota(Enum):
    hare = "hare"  # a group of >= l n / k voters deserves l outputs
    droop = "droop"  # a group of > l n / (k + 1) voters deserves l outputs


class Reading(Enum):
    top = "top"  # an output represents C if its first candidate is in C
    prefix = "prefix"  # ... if it ranks C in its top |C| positions


@dataclass
class RankCompressionConfig(MethodConfig):
    k: int = 4  # number of output rankings
    psc_quota: Quota = Quota.hare
    psc_reading: Reading = Reading.top


METHOD_SCHEMAS = {"rank_compression": RankCompressionConfig}
