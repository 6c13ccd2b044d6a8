"""The one result writer: metrics.json, results.json, tables and figures of a run folder."""

from __future__ import annotations

import csv
import functools
import hashlib
import json
import math
import subprocess
import sys
from collections.abc import Iterable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

# at a sweep's root: a record per job refused because its run folder holds another
# configuration's results (counted as a failed job by the sweep)
REFUSED = "refused"
_VERSIONED_PACKAGES = ("numpy", "scipy", "torch", "hydra-core", "omegaconf", "lightning",
                       "transformers", "datasets", "wandb", "scikit-learn")


def to_scalar(value: Any) -> float | int:
    """Plain python number from numpy/torch scalars; rejects non-scalars loudly."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    value = float(value)
    return value


def clean_metrics(metrics: Mapping[str, Any]) -> dict[str, float | int]:
    """Flat dict of scalar metrics, sorted by key (NaN/inf kept as JSON null)."""
    out: dict[str, float | int] = {}
    for key in sorted(metrics):
        if not isinstance(key, str):
            raise TypeError(f"metric names must be strings, got {key!r}")
        out[key] = to_scalar(metrics[key])
    return out


def _json_safe(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_json_safe(v) for v in obj]
    return obj


def write_json(path: Path, payload: Mapping[str, Any]) -> None:
    """Write atomically (tmp file + rename) so a crash never leaves half a JSON file."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    try:
        tmp.write_text(json.dumps(_json_safe(dict(payload)), indent=2, sort_keys=True) + "\n")
        tmp.replace(path)
    except BaseException:  # a full disk: no half-written file left beside the run's files
        tmp.unlink(missing_ok=True)
        raise


def read_json(path: Path) -> tuple[dict | None, str]:
    """A run file (results.json, failed.json) and "" , or None and why it cannot be read (a
    truncated or empty file: a full disk, a killed writer)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as err:
        return None, f"{type(err).__name__}: {err}"
    if not isinstance(data, dict):
        return None, f"not a JSON object but {type(data).__name__}"
    return data, ""


INSTANCES = "tables/instances.csv"  # metric, instance, value: a mean's instances


def write_csv(path: Path, rows: Iterable[Mapping[str, Any]]) -> None:
    rows = list(rows)
    if not rows:
        raise ValueError(f"no rows to write to {path.name}")
    fields: list[str] = []
    for row in rows:
        fields.extend(k for k in row if k not in fields)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: _csv_cell(v) for k, v in row.items()})


def _csv_cell(v: Any) -> Any:
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float):
        return repr(v)
    return v


def config_hash(cfg: DictConfig) -> str:
    """Hash of the resolved job config (what makes two jobs 'the same job'). Of ``paper``
    only its key counts: its claims, seed count and captions are read by the report, not by
    the job, so rewording a claim does not make a finished run another job."""
    container = OmegaConf.to_container(cfg, resolve=True)
    if isinstance(container.get("paper"), dict):
        container["paper"] = {"key": container["paper"].get("key")}
    text = json.dumps(container, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def git_sha(root: Path) -> str | None:
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                             text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=root, capture_output=True, text=True, timeout=10).stdout
        return sha + ("-dirty" if dirty.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def imported_project_files(root: Path) -> list[str]:
    """The project's source files this process has imported, relative to ``root`` (installed
    packages aside): what a run's results depend on besides its configuration, written into
    results.json so that a later change can be checked against exactly these files."""
    root = root.resolve()
    files = set()
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if not path:
            continue
        path = Path(path).resolve()
        if path.is_relative_to(root) and not path.relative_to(root).parts[0].startswith("."):
            files.add(path.relative_to(root).as_posix())
    return sorted(files)


@functools.cache
def files_changed_between(since: str, until: str) -> tuple[str, ...] | None:
    """Every file git says changed between two commits (None where git cannot compare
    them, e.g. a commit missing from a shallow clone)."""
    done = subprocess.run(["git", "diff", "--name-only", since, until],
                          cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True)
    return tuple(done.stdout.split()) if done.returncode == 0 else None


def changed_files(since: str, until: str, key: str) -> list[str]:
    """Files of the paper (its configs, protocol and method) and of the shared code that
    changed between two commits."""
    paths = [f"conf/paper/{key}.yaml", f"conf/paper/{key}", f"experiments/{key}.py",
             f"methods/{key}", "experiments/runner", "experiments/claims", "models", "data",
             "common", "run.py"]
    changed = files_changed_between(since, until)
    if changed is None:
        return [f"(git diff {since}..{until} failed)"]
    return [f for f in changed if any(f == p or f.startswith(p + "/") for p in paths)]


def package_versions() -> dict[str, str]:
    versions = {}
    for name in _VERSIONED_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions
