"""Mirror of a run in Weights & Biases (``logger=wandb``).

One W&B run per job: ``reinit="finish_previous"`` plus ``finish()`` in the runner's
``finally``, so multirun jobs in one process never share a run. Group is the paper (so a
project is a dashboard of the reproduction report); job_type is the named sweep, "default"
for the paper's default (any seed), else the method; tags carry each claim's verdict at the
run's seed once it finishes. Offline mode when no
API key is configured. Every W&B call is guarded: a W&B failure logs a warning and never
loses the local results.
"""

from __future__ import annotations

import logging
import netrc
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger("paperlab")


def _has_api_key() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (OSError, netrc.NetrcParseError):
        return False


REACH_SECONDS = 3.0  # a W&B server that does not answer a connection within this is away


def _server_reachable(timeout: float = REACH_SECONDS) -> bool:
    """Whether a TCP connection to the W&B server (``WANDB_BASE_URL``, default
    https://api.wandb.ai) opens within ``timeout``: without it wandb.init blocks for about
    90 s per run before giving up."""
    import socket
    from urllib.parse import urlparse

    url = urlparse(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai")
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname or "", port), timeout=timeout):
            return True
    except OSError:
        return False


def choose_mode(requested: str | None) -> str:
    """``online`` only when asked for (or not set), an API key exists and the server answers
    within seconds, else ``offline`` (sync later with ``wandb sync``), with one line."""
    mode = requested or os.environ.get("WANDB_MODE") or "online"
    if mode == "online" and not _has_api_key():
        log.info("no W&B API key found: logging offline (sync later with `wandb sync`)")
        return "offline"
    if mode == "online" and not _server_reachable():
        log.warning("the W&B server cannot be reached within %.0f s: logging offline (sync "
                    "later with `wandb sync`)", REACH_SECONDS)
        return "offline"
    return mode


class WandbMirror:
    """Thin guarded wrapper around one ``wandb`` run."""

    def __init__(self, *, project: str, entity: str | None, mode: str | None, group: str,
                 job_type: str, name: str, tags: Sequence[str], config: Mapping[str, Any],
                 output_dir: Path, primary_metrics: Mapping[str, bool] | None = None) -> None:
        self.run = None
        if not os.environ.get("HOME") and not os.environ.get("XDG_CACHE_HOME"):
            # W&B's service keeps its logs and cache there; without either it logs every
            # step of its own to the console
            os.environ["XDG_CACHE_HOME"] = str(Path(output_dir) / ".cache")
        try:
            import wandb

            self._wandb = wandb
            self.run = wandb.init(
                project=project, entity=entity, mode=choose_mode(mode), group=group,
                job_type=job_type, name=name, tags=[t[:64] for t in tags],
                config=dict(config), dir=str(output_dir), reinit="finish_previous",
                settings=wandb.Settings(console="off", silent=True),
            )
            for metric, higher in (primary_metrics or {}).items():  # run summary = best
                self.run.define_metric(metric, summary="max" if higher else "min")
        except Exception as err:  # noqa: BLE001 - W&B must never break a run
            log.warning("W&B could not start (%s); continuing with local results only", err)

    def _guard(self, what: str, action) -> None:
        if self.run is None:
            return
        try:
            action()
        except Exception as err:  # noqa: BLE001
            log.warning("W&B %s failed (%s); local results are unaffected", what, err)

    def log(self, values: Mapping[str, Any], step: int | None = None) -> None:
        self._guard("log", lambda: self.run.log(dict(values), step=step))

    def log_image(self, name: str, path: Path) -> None:
        self._guard("image", lambda: self.run.log({f"figures/{name}":
                                                   self._wandb.Image(str(path))}))

    def log_table(self, name: str, rows: Sequence[Mapping[str, Any]]) -> None:
        def push() -> None:
            columns = list(dict.fromkeys(k for row in rows for k in row))
            data = [[row.get(c) for c in columns] for row in rows]
            self.run.log({f"tables/{name}": self._wandb.Table(columns=columns, data=data)})

        self._guard("table", push)

    def summary(self, metrics: Mapping[str, Any], verdicts: Mapping[str, str]) -> None:
        def push() -> None:
            self.run.summary.update(dict(metrics))
            tags = [f"{claim}:{verdict}"[:64] for claim, verdict in verdicts.items()]
            self.run.tags = tuple(self.run.tags or ()) + tuple(tags)

        self._guard("summary", push)

    def finish(self, exit_code: int = 0) -> None:
        self._guard("finish", lambda: self.run.finish(exit_code=exit_code))
        self.run = None
