"""A Lightning progress bar over optimizer steps (imported only when something trains)."""

from __future__ import annotations

from lightning.pytorch.callbacks import ProgressBar
from tqdm.auto import tqdm


class StepProgressBar(ProgressBar):
    """One bar over optimizer steps with the latest loss (Lightning's own bar counts epochs,
    which means nothing for step-bounded training: it read 'Epoch 4/-2')."""

    def __init__(self) -> None:
        super().__init__()
        self.bar = None
        self._enabled = True

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    def on_train_start(self, trainer, pl_module) -> None:
        total = trainer.max_steps if trainer.max_steps > 0 else None
        self.bar = tqdm(total=total, desc="training", unit="step", leave=False,
                        mininterval=1.0, disable=not (self._enabled and trainer.is_global_zero))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.bar.update(trainer.global_step - self.bar.n)
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if loss is not None and hasattr(loss, "item"):
            self.bar.set_postfix(loss=f"{float(loss):.4f}", refresh=False)

    def on_train_end(self, trainer, pl_module) -> None:
        self.bar.close()
