"""The one seeding helper, the thread setting and the one device resolver.

Papers import torch lazily (a numpy-only paper never pays for it), so "seed torch" and "set
torch's threads" cannot simply run before the protocol: if torch is not imported yet, a
one-shot import hook applies both the moment it is, before any model can be built.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import random
import sys
from collections.abc import Callable

import numpy as np

from common.errors import UserError

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


class _AfterImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Runs ``callback(module)`` right after ``name`` is first imported, then uninstalls."""

    def __init__(self, name: str, callback: Callable) -> None:
        self.name, self.callbacks, self._loader = name, [callback], None

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        self._loader, spec.loader = spec.loader, self
        return spec

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        for callback in self.callbacks:
            callback(module)


def when_imported(name: str, callback: Callable) -> None:
    """``callback(module)`` now if ``name`` is imported, else right after its first import."""
    if name in sys.modules:
        callback(sys.modules[name])
        return
    for hook in sys.meta_path:
        if isinstance(hook, _AfterImport) and hook.name == name:
            hook.callbacks.append(callback)
            return
    sys.meta_path.insert(0, _AfterImport(name, callback))


def seed_everything(seed: int) -> None:
    """Seed python, numpy, torch (CPU and CUDA) and Lightning from ``seed``; torch at its
    first import if it is not imported yet."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    os.environ["PL_GLOBAL_SEED"] = str(seed)

    def seed_torch(torch) -> None:
        torch.manual_seed(seed)  # seeds every CUDA device too

    when_imported("torch", seed_torch)


def thread_count(requested: int | None) -> int:
    """``threads`` if set, else ``OMP_NUM_THREADS`` if set, else half the CPU cores (>= 1):
    tiny models run many times slower when their threads share cores with another process."""
    if requested is not None:
        if requested < 1:
            raise UserError(f"threads must be >= 1 (or null for automatic), got {requested}")
        return int(requested)
    if os.environ.get("OMP_NUM_THREADS", "").isdigit():
        return max(1, int(os.environ["OMP_NUM_THREADS"]))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, (cores or 2) // 2)


def apply_threads(threads: int) -> None:
    """Use ``threads`` CPU threads in torch, BLAS and OpenMP (torch at its first import)."""
    for name in THREAD_VARIABLES:
        os.environ[name] = str(threads)
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(threads)  # numpy's BLAS is already loaded: limit it at run time
    except ImportError:
        pass

    def set_torch_threads(torch) -> None:
        torch.set_num_threads(threads)

    when_imported("torch", set_torch_threads)


def check_device(requested: str) -> None:
    """Reject a malformed ``device`` and ``cuda`` without a visible GPU, before a run."""
    if requested not in ("auto", "cpu", "cuda") and not (
            requested.startswith("cuda:") and requested[5:].isdigit()):
        raise UserError(f"device must be auto, cpu, cuda or cuda:<index>, not '{requested}'")
    if requested.startswith("cuda"):
        resolve_device(requested)


def resolve_device(requested: str) -> str:
    """``auto`` -> ``cuda`` when torch sees a GPU, else ``cpu``; ``cuda[:i]`` must exist."""
    if requested == "cpu":
        return "cpu"
    try:
        import torch

        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        count = 0
    if requested == "auto":
        return "cuda" if count else "cpu"
    if not count:
        raise UserError(f"device={requested} was requested but no CUDA GPU is visible; "
                        "use device=cpu or device=auto")
    index = int(requested.split(":")[1]) if ":" in requested else 0
    if index >= count:
        raise UserError(f"device={requested} was requested but only {count} GPU(s) are "
                        f"visible (cuda:0..cuda:{count - 1})")
    return requested
