"""Config-keyed, code-versioned, atomically written cache entries.

An entry is a folder ``<root>/<kind>/<key>``, where ``key`` hashes the configuration that
made it and the source files of the modules that make it: the caller names the modules, the
cache reads their source (so editing the training code or the data generator retrains
instead of silently reusing an old artefact). It is built into a private temporary folder,
marked complete with a SHA-256 checksum of every file, then renamed into place: an
interrupted build never leaves an entry that looks finished, and two processes building the
same entry at once (parallel sweep jobs) both succeed, one rename winning. An entry without
its completion marker, with a file whose checksum no longer matches (a corrupted or edited
file), or whose loader fails, is rebuilt with a warning. Under a multi-process launch only
global rank 0 publishes entries; the other ranks build into a private folder that they
remove.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

from common.kernels import PINNED
from common.ranks import global_rank, is_global_zero

T = TypeVar("T")
log = logging.getLogger("paperlab")
COMPLETE = ".complete"


def code_version(*modules: ModuleType | str) -> str:
    """A short hash of the source files of ``modules`` (module objects or dotted names)."""
    digest = hashlib.sha256()
    for module in modules:
        if isinstance(module, str):
            module = sys.modules.get(module) or __import__(module, fromlist=["_"])
        digest.update(Path(module.__file__).read_bytes())
    return digest.hexdigest()[:12]


def entry_key(config: Mapping[str, Any], version: str) -> str:
    """The folder name of an entry: hash of its configuration, its code version and the CPU
    kernel settings (common/kernels.py: another kernel path trains other weights)."""
    kernels = {name: os.environ.get(name) for name in PINNED}
    payload = json.dumps({"config": config, "code": version, "kernels": kernels},
                         sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def is_complete(folder: Path) -> bool:
    return (folder / COMPLETE).is_file()


def file_checksums(folder: Path) -> dict[str, str]:
    """SHA-256 of every file under ``folder`` but the completion marker, by relative path."""
    sums = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != COMPLETE):
        digest = hashlib.sha256()
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        sums[path.relative_to(folder).as_posix()] = digest.hexdigest()
    return sums


def corrupted_files(folder: Path) -> list[str]:
    """Files of a complete entry that are missing, added or changed since it was built."""
    try:
        marker = json.loads((folder / COMPLETE).read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return [f"{COMPLETE} (unreadable)"]  # a truncated or empty marker: rebuild
    recorded = marker.get("files") if isinstance(marker, dict) else None
    if not isinstance(recorded, dict):
        return ["(no checksums recorded)"]
    now = file_checksums(folder)
    return sorted(name for name in set(recorded) | set(now) if recorded.get(name) != now.get(name))


def build_entry(folder: Path, build: Callable[[Path], T], metadata: Mapping[str, Any]) -> T:
    """Run ``build(tmp)`` into a private temporary folder, mark it complete and rename it to
    ``folder`` (replacing an incomplete entry there); returns what ``build`` returned."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = folder.parent / f".{folder.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        built = build(tmp)
        record = {**metadata, "files": file_checksums(tmp)}
        (tmp / COMPLETE).write_text(json.dumps(record, indent=2, default=str) + "\n")
        if folder.exists() and not is_complete(folder):
            shutil.rmtree(folder, ignore_errors=True)
        try:
            tmp.rename(folder)
        except OSError:  # another process finished the same entry first: keep theirs
            if not is_complete(folder):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return built


def load_or_build(root: Path, kind: str, config: Mapping[str, Any],
                  modules: Sequence[ModuleType | str], build: Callable[[Path], T],
                  load: Callable[[Path], T]) -> T:
    """The artefact for ``config`` made by the code of ``modules`` (the modules whose source
    decides the artefact): ``load(folder)`` of its entry, or, when the entry is missing,
    incomplete, corrupted or fails to load, ``build(folder)`` (which writes the entry's files
    and returns the artefact; one rebuild, a second failure propagates)."""
    version = code_version(*modules)
    folder = Path(root) / kind / entry_key(config, version)
    metadata = {"kind": kind, "config": dict(config), "code_version": version,
                "modules": [m if isinstance(m, str) else m.__name__ for m in modules]}
    if not is_global_zero():  # other ranks of a multi-process launch never publish
        if is_complete(folder) and not corrupted_files(folder):
            return load(folder)
        private = folder.parent / f".{folder.name}.rank{global_rank()}-{os.getpid()}"
        private.mkdir(parents=True, exist_ok=True)
        try:
            return build(private)
        finally:
            shutil.rmtree(private, ignore_errors=True)
    if not is_complete(folder):
        if folder.exists():
            log.warning("cache entry %s is incomplete (an interrupted build?): rebuilding",
                        folder)
        log.info("building %s (cached at %s)", kind, folder)
        return build_entry(folder, build, metadata)
    changed = corrupted_files(folder)
    if changed:
        log.warning("cache entry %s is corrupted (checksum mismatch: %s): rebuilding", folder,
                    ", ".join(changed[:3]))
        shutil.rmtree(folder, ignore_errors=True)
        return build_entry(folder, build, metadata)
    try:
        return load(folder)
    except Exception as err:  # noqa: BLE001 - any unreadable file: rebuild once
        log.warning("cache entry %s could not be loaded (%s: %s): rebuilding", folder,
                    type(err).__name__, err)
        shutil.rmtree(folder, ignore_errors=True)
        return build_entry(folder, build, metadata)
