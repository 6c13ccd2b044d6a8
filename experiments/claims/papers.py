"""The papers' metadata as the runner, the sweep summary and the report read it: ``paper:``
of ``conf/paper/<key>.yaml`` (claims, seed count), and which runs are a paper's default."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

ROOT = Path(__file__).resolve().parents[2]
PAPER_CONFIGS = ROOT / "conf" / "paper"


def paper_info(key: str) -> dict[str, Any]:
    """``paper:`` of ``conf/paper/<key>.yaml`` as plain data."""
    node = OmegaConf.load(PAPER_CONFIGS / f"{key}.yaml").paper
    return OmegaConf.to_container(node, resolve=False)


def all_papers() -> list[str]:
    return sorted(p.stem for p in PAPER_CONFIGS.glob("*.yaml"))


def paper_claims(cfg: DictConfig) -> list[dict]:
    """``paper.claims`` of a composed config as plain dicts (``rule`` and ``test`` as names)."""
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
