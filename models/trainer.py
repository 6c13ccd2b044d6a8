"""The one Lightning Trainer factory, fed by the ``trainer`` config group.

``Compute`` says how to use the hardware (accelerator, devices, strategy, nodes, precision);
``make_trainer`` builds a quiet Trainer from it (no logger, checkpoints or model summary,
an optional step-based progress bar). ``trainer=ddp`` launches one process per device with
Lightning's script launcher (every rank re-runs the command; only global rank 0 writes).
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Compute:
    accelerator: str = "cpu"  # cpu | gpu
    devices: Any = 1  # a count, or a list of GPU indices
    strategy: str = "auto"  # auto | ddp | ddp_spawn | fsdp
    num_nodes: int = 1
    precision: str = "32-true"

    @classmethod
    def from_config(cls, trainer_cfg, device: str) -> Compute:
        """Resolve ``trainer.accelerator=auto`` and ``trainer.devices=auto`` from the run's
        device: ``cuda:1`` trains on GPU 1, ``cpu`` on one CPU process."""
        accelerator = str(trainer_cfg.accelerator)
        if accelerator == "auto":
            accelerator = "gpu" if device.startswith("cuda") else "cpu"
        devices = trainer_cfg.devices
        if devices == "auto":
            devices = [int(device.split(":")[1])] if device.startswith("cuda:") else 1
        elif not isinstance(devices, int | str):
            devices = [int(d) for d in devices]
        return cls(accelerator, devices, str(trainer_cfg.strategy), int(trainer_cfg.num_nodes),
                   str(trainer_cfg.precision))

    @property
    def device(self) -> str:
        """Where a model lives before and after training (the first device)."""
        if self.accelerator != "gpu":
            return "cpu"
        return f"cuda:{self.devices[0]}" if isinstance(self.devices, list) else "cuda"


def make_trainer(compute: Compute | None = None, progress_bar: bool = False, callbacks=(),
                 **limits):
    """A quiet Trainer with extra Lightning ``callbacks``; ``limits`` are stopping arguments
    (``max_steps=...``, ...)."""
    import lightning as L

    from models.progress import StepProgressBar

    compute = compute or Compute()
    for name in ("lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    warnings.filterwarnings("ignore", message=".*LeafSpec.*")
    callbacks = ([StepProgressBar()] if progress_bar else []) + list(callbacks)
    return L.Trainer(accelerator=compute.accelerator, devices=compute.devices,
                     strategy=compute.strategy, num_nodes=compute.num_nodes,
                     precision=compute.precision, logger=False, enable_checkpointing=False,
                     enable_model_summary=False, enable_progress_bar=progress_bar,
                     callbacks=callbacks, **limits)


def step_indices(steps: int):
    """A DataLoader of the step numbers 0 .. steps - 1, one per optimizer step, for modules
    that make their own batches (on-policy rollouts, populations trained by hand)."""
    import torch

    return torch.utils.data.DataLoader(range(steps), batch_size=None)
