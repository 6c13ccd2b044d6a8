"""The metrics a paper declares (``paper.metrics`` in ``conf/paper/<key>.yaml``): every name a
run writes to ``metrics.json``, with which side is better, its unit, one line of meaning and
the configurations that write it.

A name may hold ``{placeholders}``, each taking every value of ``values.<placeholder>`` (a list
or an interpolation of a config list, e.g. ``${dataset.domains}``); ``when`` limits a metric to
the configurations where a condition on config values holds::

    when       := test ("and" test)*
    test       := KEY "==" VALUE | KEY "!=" VALUE | VALUE "in" KEY | VALUE "not in" KEY

A run writes exactly the declared names its configuration expands to (a test checks each
paper's smoke run); a claim names only declared metrics (checked when a command is
composed), and applies to the runs whose configuration writes every metric it names.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from common.errors import UserError

BETTER = ("higher", "lower", "none")
_PLACEHOLDER = re.compile(r"\{(\w+)\}")
_TEST = re.compile(r"^\s*(?:(?P<key>[\w.]+)\s*(?P<op>==|!=)\s*(?P<value>[^\s]+)"
                   r"|(?P<item>[^\s]+)\s+(?P<neg>not\s+)?in\s+(?P<collection>[\w.]+))\s*$")


@dataclass(frozen=True)
class MetricSpec:
    name: str  # may hold {placeholders}
    better: str  # higher | lower | none
    unit: str
    meaning: str
    values: Mapping[str, Any]
    when: str | None = None
    optional: bool = False  # written by some runs of the configurations only
    headline: bool = False  # shown first (sweep summaries, the W&B summary, the report)

    @property
    def pattern(self) -> re.Pattern:
        """The names this spec may expand to, whatever its values."""
        parts = _PLACEHOLDER.split(self.name)
        return re.compile("".join(re.escape(p) if i % 2 == 0 else r".*?"
                                  for i, p in enumerate(parts)) + "$")


def specs(info: Mapping) -> list[MetricSpec]:
    """The declarations of a paper's ``paper`` block (plain data or a composed config)."""
    declared = info.get("metrics") or {}
    out = []
    for name, spec in declared.items():
        spec = dict(spec)
        values = spec.pop("values", None) or {}
        missing = set(_PLACEHOLDER.findall(name)) - set(values)
        if missing:
            raise UserError(f"metric {name}: no values for {', '.join(sorted(missing))}")
        out.append(MetricSpec(name=name, values=values, **spec))
    return out


def _value(cfg: DictConfig, key: str) -> Any:
    found = OmegaConf.select(cfg, key, throw_on_missing=False)
    if isinstance(found, ListConfig | DictConfig):
        return OmegaConf.to_container(found, resolve=True)
    return found


def _literal(text: str) -> str:
    text = text.strip("'\"")
    return "None" if text == "null" else text


def condition_holds(condition: str | None, cfg: DictConfig) -> bool:
    """``when`` on a composed config (values compared as text; enum members by name)."""
    if not condition:
        return True
    for part in re.split(r"\s+and\s+", condition.strip()):
        match = _TEST.match(part)
        if match is None:
            raise UserError(f"when: '{condition}' is not KEY == VALUE, KEY != VALUE, VALUE in "
                            "KEY or VALUE not in KEY (joined by and)")
        if match["key"]:
            equal = _text(_value(cfg, match["key"])) == _literal(match["value"])
            if equal != (match["op"] == "=="):
                return False
        else:
            collection = _value(cfg, match["collection"]) or []
            inside = _literal(match["item"]) in [_text(v) for v in collection]
            if inside == bool(match["neg"]):
                return False
    return True


def _text(value: Any) -> str:
    return str(getattr(value, "name", value))


def _formatted(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return _text(value)


def expand(spec: MetricSpec, cfg: DictConfig) -> list[str]:
    """The names ``spec`` stands for in the configuration ``cfg`` (none where ``when``
    fails)."""
    if not condition_holds(spec.when, cfg):
        return []
    keys = _PLACEHOLDER.findall(spec.name)
    if not keys:
        return [spec.name]
    lists = []
    for key in keys:
        values = spec.values[key]
        if isinstance(values, ListConfig | DictConfig):
            values = OmegaConf.to_container(values, resolve=True)
        lists.append(values if isinstance(values, list) else [values])
    out = []
    for combination in itertools.product(*lists):
        name = spec.name
        for key, value in zip(keys, combination, strict=True):
            name = name.replace("{" + key + "}", _formatted(value), 1)
        out.append(name)
    return out


def declared_names(cfg: DictConfig) -> dict[str, MetricSpec]:
    """Every metric name the composed configuration's run writes or may write (optional
    ones), with its spec."""
    return {name: spec for spec in specs(cfg.paper) for name in expand(spec, cfg)}


def contract(cfg: DictConfig) -> tuple[set[str], list[MetricSpec]]:
    """What a run of ``cfg`` must write (its required names) and the optional specs whose
    pattern a further name must match."""
    required, optional = set(), []
    for spec in specs(cfg.paper):
        if not condition_holds(spec.when, cfg):
            continue
        if spec.optional:
            optional.append(spec)
        else:
            required.update(expand(spec, cfg))
    return required, optional


def undeclared(names, cfg: DictConfig) -> list[str]:
    """The names a run of ``cfg`` is not declared to write."""
    required, optional = contract(cfg)
    return sorted(n for n in names if n not in required
                  and not any(s.pattern.match(n) for s in optional))


def spec_of(name: str, info: Mapping) -> MetricSpec | None:
    """The declaration a written metric name comes from (exact names first)."""
    found = specs(info)
    exact = [s for s in found if s.name == name]
    return (exact or [s for s in found if s.pattern.match(name)] or [None])[0]


def headline(info: Mapping, names) -> dict[str, bool | None]:
    """Of the written ``names``, those a headline declaration stands for, in declaration
    order: name -> higher is better (None where neither side is)."""
    out = {}
    for spec in (s for s in specs(info) if s.headline):
        for name in names:
            if name not in out and spec.pattern.match(name) and spec_of(name, info) == spec:
                out[name] = None if spec.better == "none" else spec.better == "higher"
    return out


def check_claim_metrics(key: str, info: Mapping) -> None:
    """``UserError`` (one line, with a close match) when a claim of the paper names a metric
    that no declaration of ``paper.metrics`` stands for: a misspelt name fails when the
    command is composed, not at the end of a run."""
    import difflib

    from experiments.claims.language import metric_names, parse, parse_expression

    found = specs(info)
    known = [s.name for s in found]
    for claim in info.get("claims") or []:
        names = set()
        if claim.get("holds_if"):
            names |= metric_names(parse(claim["holds_if"]))
        if claim.get("margin_metric"):
            names |= metric_names(parse_expression(claim["margin_metric"]))
        for name in sorted(names):
            if not any(s.pattern.match(name) for s in found):
                close = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
                raise UserError(f"paper {key}, claim {claim.get('id')}: metric '{name}' is "
                                "not declared in paper.metrics"
                                + (f"; did you mean {close[0]}?" if close else ""))
