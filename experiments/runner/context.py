"""``RunContext``: everything a paper's protocol may use from the runner.

A protocol receives ``(cfg, ctx)`` and returns its final scalar metrics. It writes tables,
figures and streamed scalars only through ``ctx`` so that the run folder layout, the W&B
mirror and the progress reporting are the same for every paper. Under a multi-process
launch (``trainer=ddp``) every rank runs the protocol, and only global rank 0 writes.
"""

from __future__ import annotations

import contextlib
import csv
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import numpy as np

from common.cache import load_or_build
from common.ranks import is_global_zero
from common.streams import Streams
from experiments.runner.results import INSTANCES, to_scalar, write_csv
from experiments.runner.seeding import resolve_device

T = TypeVar("T")
log = logging.getLogger("paperlab")


@dataclass
class RunContext:
    """The runner's side of the protocol contract.

    Attributes:
        output_dir: the run folder (``tables/``, ``figures/``, ``curves.csv`` go here).
        cache_dir: a folder shared between runs for expensive, config-keyed artefacts.
        requested_device: ``device`` as configured; ``device`` resolves it on first use.
        trainer: the ``trainer`` config (Lightning accelerator, strategy, devices, ...).
        seed: the run seed (a label: never draw from it directly or do arithmetic on it).
        streams: random streams by name derived from the seed (``common/streams.py``):
            ``ctx.rng_for("held_out")``, ``ctx.streams.torch("init")``,
            ``ctx.streams.child("ferry")``; fixed ones (the same at every seed) by
            ``ctx.streams.fixed("games")``. The names drawn go to ``results.json``.
        stream_curves: write ``ctx.log`` scalars to ``curves.csv`` (``logger=csv|wandb``).
        wandb: the W&B mirror or ``None``.
    """

    output_dir: Path
    cache_dir: Path
    requested_device: str
    trainer: Any
    seed: int
    stream_curves: bool = True
    wandb: Any = None
    streams: Streams = field(init=False)
    stage_seconds: dict[str, float] = field(init=False, default_factory=dict)
    _device: str | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.streams = Streams(self.seed)
        self.writes = is_global_zero()

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time a stage of the protocol: its wall seconds go to ``results.json``
        (``stage_seconds``), where ``make bench`` and a reader of a slow run look."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.stage_seconds[name] = (self.stage_seconds.get(name, 0.0)
                                        + time.perf_counter() - start)

    def rng_for(self, name: str) -> np.random.Generator:
        """The numpy Generator of the run's stream ``name``."""
        return self.streams.numpy(name)

    @property
    def device(self) -> str:
        """``cpu`` or ``cuda[:i]``: ``device=auto`` is resolved when a protocol first asks
        (after it imported torch), so lazily importing papers get the GPU too."""
        if self._device is None:
            self._device = resolve_device(self.requested_device)
        return self._device

    @property
    def resolved_device(self) -> str:
        """The device the run used (``cpu`` when the protocol never asked for one)."""
        return self._device or "cpu"

    @property
    def compute(self):
        """How to train: a ``models.trainer.Compute`` from ``trainer`` and ``device``."""
        from models.trainer import Compute

        return Compute.from_config(self.trainer, self.device)

    def info(self, message: str) -> None:
        """A line for the console and ``run.log``."""
        log.info(message)

    def log(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Stream scalars (long format ``step,key,value`` in ``curves.csv``, and to W&B)."""
        if not self.writes:
            return
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
        if self.writes:
            write_csv(path, rows)
            if self.wandb is not None:
                self.wandb.log_table(name, rows)
        return path

    def save_instances(self, metric: str, values: Mapping[str, float]) -> None:
        """The per-instance values (prompt, task, complex, ... by id) that ``metric`` is the
        mean of, appended to ``tables/instances.csv``: the data behind a seed's mean, for
        analyses of their own (a verdict is judged on the seeds' values, the independent
        replicates: experiments/claims/verdicts.py)."""
        if not self.writes:
            return
        path = self.output_dir / INSTANCES
        path.parent.mkdir(parents=True, exist_ok=True)
        new = not path.exists()
        with path.open("a", newline="") as f:
            writer = csv.writer(f)
            if new:
                writer.writerow(["metric", "instance", "value"])
            for instance, value in values.items():
                writer.writerow([metric, instance, repr(float(value))])

    def save_figure(self, name: str, fig: Any) -> Path:
        """Write ``figures/<name>.png`` (and a ``wandb.Image``), then close the figure."""
        import matplotlib.pyplot as plt

        path = self.output_dir / "figures" / f"{name}.png"
        if self.writes:
            path.parent.mkdir(parents=True, exist_ok=True)
            fig.savefig(path, dpi=120, bbox_inches="tight")
            if self.wandb is not None:
                self.wandb.log_image(name, path)
        plt.close(fig)
        return path

    def cached(self, kind: str, config: Mapping[str, Any], modules: Sequence[ModuleType | str],
               build: Callable[[Path], T], load: Callable[[Path], T]) -> T:
        """An expensive artefact (a trained model, converted weights) from
        ``cache_dir/<kind>/<hash of config and of the source of modules>``: built atomically
        once, rebuilt when incomplete, corrupted or unreadable (see ``common/cache.py``).
        ``modules`` are the modules whose code decides the artefact."""
        return load_or_build(self.cache_dir, kind, config, modules, build, load)

    def progress(self, items: Iterable[T], desc: str, total: int | None = None) -> Iterator[T]:
        """A progress bar over ``items`` (tqdm on stderr; silent on ranks other than 0)."""
        from tqdm.auto import tqdm

        if total is None and hasattr(items, "__len__"):
            total = len(items)  # type: ignore[arg-type]
        yield from tqdm(items, desc=desc, total=total, mininterval=1.0, leave=False,
                        disable=not self.writes)
