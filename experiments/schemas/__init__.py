"""Dataclass schemas for method configs, registered in Hydra's ConfigStore.

Each module here (one per paper) defines ``METHOD_SCHEMAS = {name: dataclass}`` using only
the standard library, so registering every schema costs nothing at start-up. A method file
``conf/method/<name>.yaml`` extends its schema::

    defaults:
      - /schema/method@_here_: <name>
      - _self_

so a typo (``method.bitz=2``) or a wrong type (``method.bits=two``) fails at compose time,
naming the key.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from pathlib import Path

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING


@dataclass
class MethodConfig:
    """Base of every method schema: ``name`` is the method's file name in conf/method/."""

    name: str = MISSING


def all_method_schemas() -> dict[str, type]:
    schemas: dict[str, type] = {"none": MethodConfig}
    for mod in pkgutil.iter_modules([str(Path(__file__).parent)]):
        module = importlib.import_module(f"{__name__}.{mod.name}")
        for name, schema in getattr(module, "METHOD_SCHEMAS", {}).items():
            if name in schemas:
                raise ValueError(f"method schema '{name}' is defined twice")
            schemas[name] = schema
    return schemas


def register_schemas() -> None:
    """Store every method schema under the config group ``schema/method``."""
    store = ConfigStore.instance()
    for name, schema in all_method_schemas().items():
        store.store(group="schema/method", name=name, node=schema)
