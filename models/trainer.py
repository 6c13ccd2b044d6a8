"""The one Lightning Trainer factory for the project's small training loops."""

from __future__ import annotations

import logging


def quiet_trainer(device: str, progress_bar: bool = False, **limits):
    """A single-device Lightning Trainer with no logger, checkpoints or model summary;
    ``limits`` are Trainer stopping arguments (``max_steps=...`` or ``max_epochs=...``)."""
    import lightning as L

    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    return L.Trainer(accelerator="gpu" if device.startswith("cuda") else "cpu", devices=1,
                     logger=False, enable_checkpointing=False, enable_model_summary=False,
                     enable_progress_bar=progress_bar, **limits)
