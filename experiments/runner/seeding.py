"""The one seeding helper and the one device resolver."""

from __future__ import annotations

import os
import random
import sys

import numpy as np

from experiments.runner.errors import UserError


def seed_everything(seed: int) -> None:
    """Seed python, numpy and (when the paper imported it) torch from ``seed``.

    torch is seeded only if already imported, so numpy-only papers never pay for importing
    it; the runner imports the paper's protocol before seeding, so a paper that uses torch
    always has it seeded. Lightning's ``seed_everything`` reads the same ``PL_GLOBAL_SEED``.
    """
    random.seed(seed)
    np.random.seed(seed % 2**32)
    os.environ["PL_GLOBAL_SEED"] = str(seed)
    if "torch" in sys.modules:
        import torch

        torch.manual_seed(seed)
        if torch.cuda.is_available():
            torch.cuda.manual_seed_all(seed)


def resolve_device(requested: str) -> str:
    """Resolve ``device=auto|cpu|cuda`` once; ``cuda`` without a visible GPU is a user error."""
    if requested not in ("auto", "cpu", "cuda") and not requested.startswith("cuda:"):
        raise UserError(f"device must be auto, cpu or cuda (got '{requested}')")
    if requested == "cpu":
        return "cpu"
    if requested == "auto" and "torch" not in sys.modules:
        return "cpu"  # a numpy-only paper: nothing would run on a GPU anyway
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if requested == "auto":
        return "cuda" if has_cuda else "cpu"
    if not has_cuda:
        raise UserError(f"device={requested} was requested but no CUDA GPU is visible; "
                        "use device=cpu or device=auto")
    return requested
