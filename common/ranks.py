"""Which process of a multi-process (DDP/FSDP) launch this is, read from the environment
that torch.distributed launchers (Lightning, torchrun, Slurm) set for every process."""

from __future__ import annotations

import os


def global_rank() -> int:
    """0 for the only process of a single-process run and for the first of a launch."""
    for name in ("RANK", "SLURM_PROCID"):
        if name in os.environ and (name != "SLURM_PROCID"
                                   or int(os.environ.get("SLURM_NTASKS", "1")) > 1):
            return int(os.environ[name])
    local = int(os.environ.get("LOCAL_RANK", "0"))
    node = int(os.environ.get("NODE_RANK", os.environ.get("GROUP_RANK", "0")))
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", "1")) if node else 1
    return node * per_node + local


def is_global_zero() -> bool:
    """Only global rank 0 writes results, figures, caches and W&B runs."""
    return global_rank() == 0


def world_size() -> int:
    """How many processes the launch has (1 for a single-process run)."""
    for name in ("WORLD_SIZE", "SLURM_NTASKS"):
        if name in os.environ:
            return int(os.environ[name])
    return 1
