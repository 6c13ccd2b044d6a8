"""The runner core: paper registry, command line, run context, result writing, loggers,
sweep summaries.

Nothing in this package imports torch, transformers or lightning at import time, so a
numpy-only paper stays cheap to start.
"""

import re

from omegaconf import OmegaConf

from experiments.runner.registry import load_protocol, register_paper


def safe_name(text: str) -> str:
    """A file-system-safe folder name: anything but letters, digits and ``._=-,`` becomes
    ``-`` (used for sweep job folders: ``hydra.sweep.subdir``)."""
    return re.sub(r"[^A-Za-z0-9._=,-]+", "-", str(text)).strip("-")[:120]


# Registered on import: Hydra resolves job folder names in launcher worker processes too,
# which import this package when they unpickle the sweep-summary callback.
OmegaConf.register_new_resolver("safe_name", safe_name, replace=True)

__all__ = ["load_protocol", "register_paper", "safe_name"]
