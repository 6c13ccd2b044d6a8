"""The one record of each paper (:class:`Paper`), built once from its files and read by
``make list``, ``reproduce``, ``report``, ``preregister``, ``plan``, the runner and the tests;
and which runs are a paper's default.

A paper is a protocol module ``experiments/<key>.py`` with its entry configuration
``conf/paper/<key>.yaml`` (the ``paper:`` node: title, claims, metrics, seed count), its
groups in ``conf/paper/<key>/`` (method, dataset, scale, sweep), its typed schema
(``experiments/schemas/<key>.py``) and its method (``methods/<key>/``). The papers are found by
one scan of ``experiments/`` without importing a protocol (a numpy-only paper never
imports torch)."""

from __future__ import annotations

import functools
import pkgutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

ROOT = Path(__file__).resolve().parents[2]
PAPER_CONFIGS = ROOT / "conf" / "paper"


@dataclass(frozen=True)
class Paper:
    """One paper: its key, where its files are, and its ``paper:`` configuration node as
    plain data (``info``: title, claim, claims, metrics, seeds, stand_in, uses, ...)."""

    key: str
    info: dict[str, Any]

    @property
    def entry_config(self) -> Path:
        return PAPER_CONFIGS / f"{self.key}.yaml"

    @property
    def group_configs(self) -> Path:
        return PAPER_CONFIGS / self.key

    @property
    def protocol_module(self) -> str:
        return f"experiments.{self.key}"

    @property
    def title(self) -> str:
        return self.info["title"]

    @property
    def claim(self) -> str:
        return self.info["claim"]

    @property
    def claims(self) -> list[dict[str, Any]]:
        return self.info.get("claims") or []

    @property
    def seeds(self) -> int:
        return self.info["seeds"]


@functools.cache
def papers() -> dict[str, Paper]:
    """Every paper by key, in key order: the modules of ``experiments/`` (packages there,
    such as ``runner`` and ``helpers``, are infrastructure), each with its entry config."""
    keys = sorted(m.name for m in pkgutil.iter_modules([str(ROOT / "experiments")])
                  if not m.ispkg and not m.name.startswith("_"))
    out = {}
    for key in keys:
        entry = PAPER_CONFIGS / f"{key}.yaml"
        if not entry.is_file():
            raise RuntimeError(f"experiments/{key}.py has no conf/paper/{key}.yaml")
        out[key] = Paper(key, OmegaConf.to_container(OmegaConf.load(entry).paper,
                                                     resolve=False))
    return out


def find_paper(key: str) -> Paper:
    """The paper ``key``; the did-you-mean ``UserError`` for an unknown key."""
    from common.errors import did_you_mean

    if key not in papers():
        raise did_you_mean("paper", key, list(papers()))
    return papers()[key]


def composed_claims(cfg: DictConfig) -> list[dict]:
    """``paper.claims`` of a composed config as plain dicts (``rule`` and ``test`` as names):
    what a run judges, with its command line's overrides."""
    claims = OmegaConf.select(cfg, "paper.claims")
    if claims is None or OmegaConf.is_missing(cfg.paper, "claims"):
        return []
    return OmegaConf.to_container(claims, resolve=True, enum_to_str=True)


def is_default(overrides: list[str]) -> bool:
    """A run of the paper's default: its overrides choose only the paper, the seed and where
    or how it runs (folders, logger, device, threads, launcher)."""
    ignored = ("+paper=", "paper=", "seed=", "hydra", "paths.", "logger", "device=",
               "threads=", "+sweep=")
    return all(o.lstrip("+~").startswith(ignored) or o.startswith(ignored) for o in overrides)
