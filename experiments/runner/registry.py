"""The protocols of the papers (the papers themselves are
:func:`experiments.claims.papers.papers`, one record each).

Registration is lazy: ``python run.py +paper=jecs`` imports only the jecs protocol (and never
torch or transformers unless that paper needs them). Importing a protocol module runs its
``@register_paper("<key>")`` decorator, which records the one function the runner calls:
``run(cfg, ctx) -> dict[str, float]``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from experiments.claims.papers import find_paper

Protocol = Callable[[Any, Any], dict[str, float]]

_PROTOCOLS: dict[str, Protocol] = {}


def register_paper(key: str) -> Callable[[Protocol], Protocol]:
    """Decorator: mark ``fn(cfg, ctx) -> dict[str, float]`` as the protocol of paper ``key``."""

    def decorate(fn: Protocol) -> Protocol:
        if key in _PROTOCOLS and _PROTOCOLS[key] is not fn:
            raise ValueError(f"paper '{key}' is registered twice")
        _PROTOCOLS[key] = fn
        return fn

    return decorate


def load_protocol(key: str) -> Protocol:
    """Import ``experiments/<key>.py`` and return the function it registered (the
    did-you-mean ``UserError`` for an unknown paper)."""
    importlib.import_module(find_paper(key).protocol_module)
    if key not in _PROTOCOLS:
        raise RuntimeError(f"experiments/{key}.py does not call @register_paper('{key}')")
    return _PROTOCOLS[key]
