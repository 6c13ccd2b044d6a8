"""``RunContext``: everything a paper's protocol may use from the runner.

A protocol receives ``(cfg, ctx)`` and returns its final scalar metrics. It writes tables,
figures and streamed scalars only through ``ctx`` so that the run folder layout, the W&B
mirror and the progress reporting are the same for every paper.
"""

from __future__ import annotations

import csv
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from omegaconf import DictConfig

from experiments.runner.results import to_scalar, write_csv

T = TypeVar("T")
log = logging.getLogger("paperlab")


@dataclass
class RunContext:
    """The runner's side of the protocol contract.

    Attributes:
        cfg: the resolved job config.
        output_dir: the run folder (``tables/``, ``figures/``, ``curves.csv`` go here).
        cache_dir: a folder shared between runs for expensive, config-keyed artefacts.
        device: ``"cpu"`` or ``"cuda[:i]"``, resolved once by the runner.
        seed: the run seed; ``rng`` is a numpy Generator seeded from it.
        stream_curves: write ``ctx.log`` scalars to ``curves.csv`` (``logger=csv|wandb``).
        wandb: the W&B mirror or ``None``.
    """

    cfg: DictConfig
    output_dir: Path
    cache_dir: Path
    device: str
    seed: int
    stream_curves: bool = True
    wandb: Any = None
    rng: np.random.Generator = field(init=False)

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)

    def info(self, message: str) -> None:
        """A line for the console and ``run.log``."""
        log.info(message)

    def log(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Stream scalars (long format ``step,key,value`` in ``curves.csv``, and to W&B)."""
        values = {k: to_scalar(v) for k, v in metrics.items()}
        if self.stream_curves:
            path = self.output_dir / "curves.csv"
            new = not path.exists()
            with path.open("a", newline="") as f:
                writer = csv.writer(f)
                if new:
                    writer.writerow(["step", "key", "value"])
                for key, value in values.items():
                    writer.writerow(["" if step is None else step, key, repr(value)])
        if self.wandb is not None:
            self.wandb.log(values, step=step)

    def save_table(self, name: str, rows: Sequence[Mapping[str, Any]]) -> Path:
        """Write ``tables/<name>.csv`` (and a ``wandb.Table``)."""
        path = self.output_dir / "tables" / f"{name}.csv"
        write_csv(path, rows)
        if self.wandb is not None:
            self.wandb.log_table(name, rows)
        return path

    def save_figure(self, name: str, fig: Any) -> Path:
        """Write ``figures/<name>.png`` (and a ``wandb.Image``), then close the figure."""
        import matplotlib.pyplot as plt

        path = self.output_dir / "figures" / f"{name}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=120, bbox_inches="tight")
        if self.wandb is not None:
            self.wandb.log_image(name, path)
        plt.close(fig)
        return path

    def progress(self, items: Iterable[T], desc: str, total: int | None = None) -> Iterator[T]:
        """A progress bar over ``items`` (tqdm on stderr)."""
        from tqdm.auto import tqdm

        if total is None and hasattr(items, "__len__"):
            total = len(items)  # type: ignore[arg-type]
        yield from tqdm(items, desc=desc, total=total, mininterval=1.0, leave=False)
