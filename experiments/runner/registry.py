"""The paper registry.

Registration is lazy: the set of papers is the set of modules ``experiments/<key>.py``
(packages there, such as ``runner``, ``schemas`` and ``helpers``, are infrastructure),
found without importing them, so ``python run.py +paper=jecs`` imports only the jecs
protocol (and never torch or transformers unless that paper needs them). Importing a
protocol module runs its ``@register_paper("<key>")`` decorator, which records the one
function the runner calls: ``run(cfg, ctx) -> dict[str, float]``.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common.errors import did_you_mean

Protocol = Callable[[Any, Any], dict[str, float]]

_EXPERIMENTS_DIR = Path(__file__).resolve().parent.parent
_PROTOCOLS: dict[str, Protocol] = {}


def known_papers() -> list[str]:
    """Keys of all papers, from the module names in ``experiments/`` (no imports)."""
    return sorted(
        m.name
        for m in pkgutil.iter_modules([str(_EXPERIMENTS_DIR)])
        if not m.ispkg and not m.name.startswith("_")
    )


def register_paper(key: str) -> Callable[[Protocol], Protocol]:
    """Decorator: mark ``fn(cfg, ctx) -> dict[str, float]`` as the protocol of paper ``key``."""

    def decorate(fn: Protocol) -> Protocol:
        if key in _PROTOCOLS and _PROTOCOLS[key] is not fn:
            raise ValueError(f"paper '{key}' is registered twice")
        _PROTOCOLS[key] = fn
        return fn

    return decorate


def check_paper(key: str) -> None:
    """Raise the did-you-mean ``UserError`` when ``key`` is not a known paper."""
    if key not in known_papers():
        raise did_you_mean("paper", key, known_papers())


def load_protocol(key: str) -> Protocol:
    """Import ``experiments/<key>.py`` and return the function it registered."""
    check_paper(key)
    importlib.import_module(f"experiments.{key}")
    if key not in _PROTOCOLS:
        raise RuntimeError(f"experiments/{key}.py does not call @register_paper('{key}')")
    return _PROTOCOLS[key]


def paper_claims(conf_dir: Path | None = None) -> dict[str, str]:
    """One-line claim of each paper, read from ``conf/paper/<key>.yaml`` (no imports)."""
    from omegaconf import OmegaConf

    conf_dir = conf_dir or _EXPERIMENTS_DIR.parent / "conf" / "paper"
    return {p.stem: str(OmegaConf.load(p).paper.claim) for p in sorted(conf_dir.glob("*.yaml"))}

