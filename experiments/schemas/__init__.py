"""Dataclass schemas for every typed config node, registered in Hydra's ConfigStore.

One source of truth: a schema states each field's type and meaning; its value lives in the
YAML file only (schema fields are ``MISSING``). A file extends its schema in its defaults
list, so a typo (``method.bitz=2``) or a wrong type (``method.bits=two``) fails at compose
time naming the key, and :func:`reject_unknown_keys` also refuses keys appended with ``+``.

===========================  ====================================================
ConfigStore entry            used by
===========================  ====================================================
``schema/root``              ``conf/config.yaml`` (seed, device, threads, groups)
``schema/trainer``           ``conf/trainer/*.yaml``
``schema/model/<kind>``      ``conf/model/*.yaml`` (hub, packaged, tiny_lm, none)
``schema/dataset/<name>``    ``conf/dataset/*.yaml``, ``conf/paper/<key>/dataset/``
``schema/method/<name>``     ``conf/method/none.yaml``, ``conf/paper/<key>/method/``
``schema/protocol/<key>``    ``conf/paper/<key>.yaml`` (its ``protocol:`` node)
===========================  ====================================================

``shared.py`` holds the root, trainer, model and shared dataset schemas; each paper's module
(``<key>.py``) defines ``PROTOCOL``, ``METHODS = {name: schema}`` and ``DATASETS``. Only the
standard library is imported, so registering everything costs nothing at start-up.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from pathlib import Path

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, ListConfig, OmegaConf

from common.errors import UserError


def schema_modules() -> list:
    return [importlib.import_module(f"{__name__}.{m.name}")
            for m in pkgutil.iter_modules([str(Path(__file__).parent)])]


def _collect(attribute: str) -> dict[str, type]:
    found: dict[str, type] = {}
    for module in schema_modules():
        for name, schema in getattr(module, attribute, {}).items():
            if name in found:
                raise ValueError(f"{attribute[:-1].lower()} schema '{name}' is defined twice")
            found[name] = schema
    return found


def all_method_schemas() -> dict[str, type]:
    return _collect("METHODS")


def all_dataset_schemas() -> dict[str, type]:
    return _collect("DATASETS")


def all_protocol_schemas() -> dict[str, type]:
    return {m.__name__.rsplit(".", 1)[1]: m.PROTOCOL for m in schema_modules()
            if hasattr(m, "PROTOCOL")}


def register_resolvers() -> None:
    """The list helpers ``paper.metrics`` declarations use in their ``values``:
    ``${concat:a,b}``, ``${prefixed:p_,list}``, ``${max:list}``, ``${len:list}`` and
    ``${default:x,fallback}`` (x unless it is null)."""
    from omegaconf import OmegaConf

    def as_list(value):
        return list(value) if isinstance(value, (list, tuple)) or OmegaConf.is_list(value) \
            else [value]

    resolvers = {
        "concat": lambda *lists: [v for part in lists for v in as_list(part)],
        "prefixed": lambda prefix, values: [f"{prefix}{v}" for v in as_list(values)],
        "max": lambda values: max(as_list(values)),
        "len": lambda values: len(as_list(values)),
        "default": lambda value, fallback: fallback if value is None else value,
    }
    for name, function in resolvers.items():
        OmegaConf.register_new_resolver(name, function, replace=True)


def register_schemas() -> None:
    """Store every schema in the ConfigStore (see the table above), and the resolvers the
    configs use."""
    from experiments.schemas import shared

    register_resolvers()
    store = ConfigStore.instance()
    if "root.yaml" in store.repo.get("schema", {}):
        return  # stored already in this process (converting every schema takes 0.2 s)
    store.store(group="schema", name="trainer", node=shared.TrainerConfig)
    store.store(group="schema", name="paper", node=shared.PaperInfo)
    for name, schema in shared.MODELS.items():
        store.store(group="schema/model", name=name, node=schema)
    for group, schemas in (("method", all_method_schemas()),
                           ("dataset", all_dataset_schemas()),
                           ("protocol", all_protocol_schemas())):
        for name, schema in schemas.items():
            store.store(group=f"schema/{group}", name=name, node=schema)
    store.store(group="schema", name="root", node=shared.RootConfig)  # last: the mark of done


def check_values(cfg: DictConfig) -> None:
    """``UserError`` naming the first value that is still ``???`` (mandatory, unset) or
    outside its field's :class:`~experiments.schemas.shared.Range`, before any work starts."""
    missing = sorted(k for k in OmegaConf.missing_keys(cfg) if not k.startswith("hydra."))
    if missing:
        raise UserError(f"{missing[0]} has no value (??? in its config file): add "
                        f"{missing[0]}=<value> to the command"
                        + (f" (also unset: {', '.join(missing[1:])})" if missing[1:] else ""))
    check_ranges(cfg)


def check_ranges(cfg: DictConfig, path: str = "") -> None:
    """``UserError`` for the first value outside its field's range."""
    from experiments.schemas.shared import INTEGER_DEFAULT

    schema = OmegaConf.get_type(cfg)
    fields = {f.name: f for f in dataclasses.fields(schema)} if dataclasses.is_dataclass(
        schema) else {}
    for key in cfg.keys():
        if not path and key == "hydra":
            continue
        name = f"{path}.{key}" if path else str(key)
        child = cfg._get_node(key)
        if isinstance(child, DictConfig):
            if not child._is_none() and not child._is_missing():
                check_ranges(child, name)
            continue
        spec = fields.get(key)
        if spec is None:
            continue
        bound = spec.metadata.get("range")
        if bound is None and str(spec.type).replace("list[", "").startswith("int"):
            bound = INTEGER_DEFAULT
        value = OmegaConf.to_object(child) if isinstance(child, ListConfig) else child._value()
        values = value if isinstance(value, list) else [value]
        for v in values:
            if isinstance(v, int | float) and not isinstance(v, bool) and bound is not None \
                    and not bound.admits(v):
                where = str(bound) if bound.high is None else f"in {bound}"
                raise UserError(f"{name}={value} is out of range: each value must be {where}")


def reject_unknown_keys(cfg: DictConfig, path: str = "") -> None:
    """``UserError`` for a key that its node's schema does not declare.

    Hydra adds keys appended with ``+`` (``+method.bitz=2``) even to typed nodes; this walks
    every node typed by a dataclass and refuses what the dataclass does not have."""
    schema = OmegaConf.get_type(cfg)
    if dataclasses.is_dataclass(schema):
        allowed = {f.name for f in dataclasses.fields(schema)}
        unknown = sorted(set(cfg.keys()) - allowed - {"hydra"})
        if unknown:
            where = path or "the root config"
            raise UserError(f"unknown key{'s' if len(unknown) > 1 else ''} "
                            f"{', '.join(f'{path}.{k}' if path else k for k in unknown)} in "
                            f"{where} (schema {schema.__name__}); known: "
                            f"{', '.join(sorted(allowed))}")
    for key in cfg.keys():
        if not path and key == "hydra":  # Hydra's own node, when composed with it
            continue
        child = cfg._get_node(key)
        if isinstance(child, DictConfig) and not child._is_none() and not child._is_missing():
            reject_unknown_keys(child, f"{path}.{key}" if path else str(key))
