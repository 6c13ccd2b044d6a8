"""The runner core: paper registry, run context, result writing, loggers, sweep summaries.

Nothing in this package imports torch, transformers or lightning at import time, so a
numpy-only paper stays cheap to start.
"""

from experiments.runner.errors import UserError
from experiments.runner.registry import known_papers, load_protocol, register_paper

__all__ = ["UserError", "known_papers", "load_protocol", "register_paper"]
