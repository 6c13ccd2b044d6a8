"""One job: compose -> seed -> protocol -> results, the same for every paper.

``run.py`` calls :func:`execute` from inside ``@hydra.main``; tests call it through the
compose API with a fake Hydra runtime (see ``tests/conftest.py``).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from experiments.runner.context import RunContext
from experiments.runner.errors import UserError, ensure_writable
from experiments.runner.registry import known_papers, load_protocol
from experiments.runner.results import (
    clean_metrics,
    config_hash,
    git_sha,
    package_versions,
    write_json,
)
from experiments.runner.seeding import resolve_device, seed_everything

log = logging.getLogger("paperlab")
PROJECT_ROOT = Path(__file__).resolve().parents[2]


def execute(cfg: DictConfig) -> dict[str, Any]:
    """Run the paper selected by ``+paper=<key>``; return its metrics (for sweepers)."""
    hydra_cfg = HydraConfig.get()
    output_dir = Path(hydra_cfg.runtime.output_dir)
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    try:
        return _execute(cfg, output_dir, hydra_cfg, multirun)
    except UserError as err:
        # In a multirun the launcher records the failure and carries on with other jobs.
        if multirun or os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)


def _execute(cfg: DictConfig, output_dir: Path, hydra_cfg: Any, multirun: bool) -> dict:
    if "paper" not in cfg:
        raise UserError("no paper selected: add +paper=<key>, one of: "
                        + ", ".join(known_papers()))
    key = str(cfg.paper.key)
    cfg_hash = config_hash(cfg)
    results_path = output_dir / "results.json"
    if results_path.exists():
        previous = json.loads(results_path.read_text())
        if previous.get("config_hash") == cfg_hash:
            log.info("skipping: %s already holds results for this config", output_dir)
            return previous["metrics"]

    ensure_writable(output_dir, f"output folder {output_dir}")
    (output_dir / "failed.json").unlink(missing_ok=True)
    log.info("resolved config:\n%s", OmegaConf.to_yaml(cfg, resolve=True))
    (output_dir / "config_resolved.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))

    protocol = load_protocol(key)
    seed = int(cfg.seed)
    seed_everything(seed)
    device = resolve_device(str(cfg.device))
    choices = {k: v for k, v in hydra_cfg.runtime.choices.items()
               if not k.startswith("hydra/") and v is not None}
    overrides = list(hydra_cfg.overrides.task)

    mirror = _start_wandb(cfg, key, choices, overrides, output_dir, hydra_cfg, multirun)
    ctx = RunContext(cfg=cfg, output_dir=output_dir, cache_dir=Path(cfg.paths.cache_dir),
                     device=device, seed=seed,
                     stream_curves=cfg.logger.name in ("csv", "wandb"), wandb=mirror)
    started = time.perf_counter()
    started_at = datetime.now(timezone.utc).isoformat()
    try:
        raw = protocol(cfg, ctx)
        metrics = clean_metrics(raw)
    except BaseException as err:
        write_json(output_dir / "failed.json", {
            "paper": key, "error": f"{type(err).__name__}: {err}",
            "traceback": traceback.format_exc(), "overrides": overrides,
        })
        if mirror is not None:
            mirror.finish(exit_code=1)
        raise
    wall = time.perf_counter() - started

    write_json(output_dir / "metrics.json", metrics)
    write_json(results_path, {
        "metrics": metrics, "paper": key, "title": cfg.paper.get("title"),
        "method": choices.get("method"), "model": choices.get("model"),
        "dataset": choices.get("dataset"), "seed": seed, "device": device,
        "overrides": overrides, "choices": choices, "config_hash": cfg_hash,
        "git_sha": git_sha(PROJECT_ROOT), "versions": package_versions(),
        "python": sys.version.split()[0], "started_at": started_at,
        "wall_time_s": round(wall, 3),
    })
    if mirror is not None:
        mirror.summary(metrics)
        mirror.finish(exit_code=0)
    _print_metrics(key, metrics, output_dir)
    return metrics


def _start_wandb(cfg, key, choices, overrides, output_dir, hydra_cfg, multirun):
    if cfg.logger.name != "wandb":
        return None
    from experiments.runner.wandb_logger import WandbMirror

    group = cfg.logger.group or (Path(hydra_cfg.sweep.dir).name if multirun else key)
    method = choices.get("method", "none")
    config = OmegaConf.to_container(cfg, resolve=True)
    config.update({"choices": choices, "overrides": overrides})
    return WandbMirror(
        project=cfg.logger.project, entity=cfg.logger.entity, mode=cfg.logger.mode,
        group=str(group), job_type=str(method), name=f"{key}-{method}-s{cfg.seed}",
        tags=[key, str(method), f"model:{choices.get('model')}",
              f"dataset:{choices.get('dataset')}", f"seed:{cfg.seed}"],
        config=config, output_dir=output_dir,
    )


def _print_metrics(key: str, metrics: dict, output_dir: Path) -> None:
    width = max((len(k) for k in metrics), default=0)
    lines = [f"{k:<{width}}  {v:.6g}" if isinstance(v, float) else f"{k:<{width}}  {v}"
             for k, v in metrics.items()]
    log.info("%s metrics (%s):\n%s", key, output_dir / "metrics.json", "\n".join(lines))
