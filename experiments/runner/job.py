"""One job: check -> seed -> protocol -> results, the same for every paper.

``run.py`` calls :func:`execute` from inside ``@hydra.main``; tests call it through the
compose API with a fake Hydra runtime (see ``tests/conftest.py``).

Outcomes (README, "Exit codes"):
- the config is refused before the protocol starts (unknown key, device, a folder holding
  another run): one ``error:`` line, exit code 1, and the files Hydra created are removed;
- the protocol stops on a user error (2, one line) or a bug (2, traceback), or is
  interrupted (130 / 143): ``failed.json`` in the run folder says why, no metrics;
- in a multirun a failed job writes ``failed.json`` and the sweep goes on; ``run.py`` ends
  with the summary line and exit code 2 when any job failed.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import shutil
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from common.errors import UserError, ensure_writable
from common.hub import check_models_cached
from common.ranks import global_rank, is_global_zero, world_size
from experiments.claims import (
    MISSING,
    check_claims,
    claim_metrics,
    composed_claims,
    is_default,
    seed_condition,
)
from experiments.claims.metrics import contract, declared_names, headline
from experiments.claims.papers import find_paper
from experiments.runner.context import RunContext
from experiments.runner.registry import load_protocol
from experiments.runner.results import (
    REFUSED,
    changed_files,
    clean_metrics,
    config_hash,
    git_sha,
    imported_project_files,
    package_versions,
    read_json,
    write_json,
)
from experiments.runner.seeding import apply_threads, check_device, seed_everything, thread_count
from experiments.schemas import check_values, reject_unknown_keys

log = logging.getLogger("paperlab")
PROJECT_ROOT = Path(__file__).resolve().parents[2]
EXIT_REJECTED, EXIT_FAILED = 1, 2


@dataclass
class Job:
    """What ``_prepare`` checked and resolved, for ``_run``."""

    key: str
    config_hash: str
    threads: int
    choices: dict[str, str]
    overrides: list[str]
    output_dir: Path
    hydra_cfg: Any
    multirun: bool


class Interrupted(BaseException):
    """SIGTERM (or SIGINT) during a run: recorded in ``failed.json``, then the exit."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.exit_code = 128 + signum


class FolderBusy(UserError):
    """Another live process is running in the run folder."""


@contextlib.contextmanager
def run_folder_lock(output_dir: Path):
    """One owner per run folder: an exclusive ``flock`` on the folder itself (no file: a
    full disk still has room for it) held while the job runs, dropped by the kernel when
    the process dies, even by SIGKILL; ``FolderBusy`` when another process holds it. A file
    system without flock (some network mounts) runs unlocked. The other ranks of a
    multi-process launch share rank 0's folder and take no lock."""
    if not is_global_zero():
        yield
        return
    output_dir.mkdir(parents=True, exist_ok=True)
    folder = os.open(output_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(folder, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(folder)
        raise FolderBusy(f"{output_dir} is in use by a run that has not finished: wait for "
                         "it, or choose another hydra.run.dir") from None
    except OSError:
        pass  # no flock here: the folder is not locked
    try:
        yield
    finally:
        os.close(folder)  # the lock goes with the descriptor


def execute(cfg: DictConfig) -> dict[str, Any] | None:
    """Run the paper selected by ``+paper=<key>`` in its run folder, which it holds alone
    (:func:`run_folder_lock`); return its metrics (None if it failed inside a multirun)."""
    hydra_cfg = HydraConfig.get()
    output_dir = Path(hydra_cfg.runtime.output_dir)
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    try:
        with run_folder_lock(output_dir):
            return _execute(cfg, hydra_cfg, output_dir, multirun)
    except FolderBusy as err:  # nothing of the folder's owner is touched
        if multirun:
            log.error("job %s: %s", output_dir, err)
            _record_refusal(hydra_cfg, output_dir, str(err))
            return None
        print(f"error: {err}", file=sys.stderr)
        sys.exit(EXIT_REJECTED)


def _execute(cfg: DictConfig, hydra_cfg: Any, output_dir: Path, multirun: bool
             ) -> dict[str, Any] | None:
    full_errors = full_errors_requested()
    try:
        job = _prepare(cfg, hydra_cfg, output_dir)
    except UserError as err:
        if multirun:
            return _record_failure(output_dir, cfg, hydra_cfg, err, multirun)
        _remove_hydra_files(output_dir, hydra_cfg)
        if full_errors:
            raise
        print(f"error: {err}", file=sys.stderr)
        sys.exit(EXIT_REJECTED)
    if not isinstance(job, Job):  # skipped: the folder holds this config's results
        return job
    try:
        return _run(cfg, job)
    except (Interrupted, KeyboardInterrupt) as err:
        _stop_interrupted(err if isinstance(err, Interrupted) else Interrupted(signal.SIGINT),
                          cfg, hydra_cfg, output_dir, multirun)
    except SystemExit as err:  # a launcher ends the job (submitit requeues it on SIGUSR1)
        _record_failure(output_dir, cfg, hydra_cfg, err, multirun)
        raise  # never a result: the launcher must not read this attempt as finished
    except BaseException as err:  # noqa: BLE001 - every failure leaves failed.json
        full = disk_full(err)
        if full is not None:  # a library's own writer (torch.save) writes the cache's models
            err = UserError(write_error_message(full, Path(cfg.paths.cache_dir)
                                                if full.errno is None else output_dir))
        _record_failure(output_dir, cfg, hydra_cfg, err, multirun)
        if multirun:
            return None
        if full_errors:
            raise
        _report_failure(err)
    return None


DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
# how libraries that write through their own C++ code (torch.save, safetensors) say it
DISK_FULL_WORDS = ("No space left on device", "Disk quota exceeded", "file write failed",
                   "unexpected pos")


def disk_full(err: BaseException) -> OSError | None:
    """The full-disk error behind ``err`` (itself, its causes, or a library's message that
    says so: torch's writer raises RuntimeError; then an OSError without errno), else
    None."""
    seen = err
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in DISK_FULL:
            return seen
        if isinstance(seen, RuntimeError) and any(w in str(seen) for w in DISK_FULL_WORDS):
            return OSError(os.strerror(errno.ENOSPC))  # errno None: no call of ours failed
        seen = seen.__cause__ or seen.__context__
    return None


def full_errors_requested() -> bool:
    """``HYDRA_FULL_ERROR=1`` as the user set it (run.py sets Hydra's own to 1 and keeps the
    user's in ``PAPERLAB_FULL_ERROR``): tracebacks instead of one line."""
    return os.environ.get("PAPERLAB_FULL_ERROR", os.environ.get("HYDRA_FULL_ERROR")) == "1"


def write_error_message(err: OSError, folder: Path | None = None) -> str:
    """One line for a file that could not be written: what, where, and the free space."""
    path = Path(err.filename) if err.filename else folder
    where = path or Path.cwd()
    while not where.exists() and where != where.parent:
        where = where.parent
    try:
        free = f"{shutil.disk_usage(where).free / 2**20:.1f} MiB free on {where}"
    except OSError:
        free = f"free space on {where} unknown"
    what = ("no space left on the device" if err.errno in DISK_FULL or err.errno is None
            else err.strerror)
    return (f"{what} while writing {path or 'the run folder'} ({free}); free some space or "
            "set paths.output_dir / paths.cache_dir to another disk")


def report_uncaught(err: Exception) -> int:
    """What Hydra raised outside a job (run.py), as one ``error:`` line and an exit code: a
    file it could not write (a full disk: exit 2, and ``failed.json`` in the run folder if
    it can still be written) or a config or override it could not use (exit 1). A bug (or
    ``HYDRA_FULL_ERROR=1``) re-raises: the traceback."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    if full_errors_requested():
        raise err
    if isinstance(err, OSError):
        folder = Path(err.filename).parent if err.filename else _folder_being_written(err)
        if folder is not None and folder.name == ".hydra":
            folder = folder.parent
        message = write_error_message(err, folder)
        print(f"error: {message}", file=sys.stderr)
        if folder is not None:
            try:
                write_json(folder / "failed.json", {"error": message, "user_error": True,
                                                    "interrupted": False})
            except OSError:
                pass  # the disk is full: the line above says why
        return EXIT_FAILED
    if isinstance(err, HydraException | OmegaConfBaseException | ValueError):
        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
        # Hydra's hints follow its first line (a sweep value without -m: "use --multirun")
        print(f"error: {' '.join(lines[:4]) if lines else type(err).__name__}",
              file=sys.stderr)
        return EXIT_REJECTED
    raise err


def _folder_being_written(err: BaseException) -> Path | None:
    """The innermost ``output_dir`` of the frames ``err`` passed through (Hydra writing the
    run folder's config files), when the error names no file."""
    folder, tb = None, err.__traceback__
    while tb is not None:
        value = tb.tb_frame.f_locals.get("output_dir")
        if isinstance(value, str | Path):
            folder = Path(value)
        tb = tb.tb_next
    return folder


def _stop_interrupted(err: Interrupted, cfg: DictConfig, hydra_cfg: Any, output_dir: Path,
                      multirun: bool) -> None:
    """failed.json and one line; a launcher's worker process ends entirely."""
    _record_failure(output_dir, cfg, hydra_cfg, err, multirun)
    if not multirun:  # a sweep's job: the sweep's process says it once for all of them
        print(f"interrupted ({err}); rerun the same command to resume", file=sys.stderr)
    if _watching_parent:
        sys.stderr.flush()
        os._exit(err.exit_code)
    sys.exit(err.exit_code)


def record_interrupted_sweep(sweep_dir: Path | None, signum: int = signal.SIGINT,
                             grace: float = 5.0) -> int:
    """The sweep's own process was interrupted (Ctrl-C reaches every process of the
    terminal's group; the launcher then stops its workers): after ``grace`` seconds for the
    jobs to write their own ``failed.json``, each job folder of the sweep with neither
    results nor a failure record, and whose lock no live job holds, gets one saying
    ``interrupted``. One line; returns the exit code (128 + the signal)."""
    name = signal.Signals(signum).name
    deadline = time.monotonic() + grace
    pending = _unfinished_jobs(sweep_dir)
    while pending and time.monotonic() < deadline:
        time.sleep(0.2)
        pending = _unfinished_jobs(sweep_dir)
    for folder in pending:
        try:
            with run_folder_lock(folder):
                overrides = OmegaConf.load(folder / ".hydra" / "overrides.yaml")
                write_json(folder / "failed.json", {
                    "paper": next((o.split("=", 1)[1] for o in overrides
                                   if o.lstrip("+").startswith("paper=")), None),
                    "error": f"interrupted ({name})", "user_error": False,
                    "interrupted": True, "traceback": None,
                    "overrides": list(overrides)})
        except (FolderBusy, OSError, ValueError):
            continue  # a job still writing its own record, or a folder it never set up
    print(f"interrupted ({name}); rerun the same command to resume", file=sys.stderr)
    return 128 + signum


def _unfinished_jobs(sweep_dir: Path | None) -> list[Path]:
    if sweep_dir is None or not sweep_dir.is_dir():
        return []
    return [overrides.parent.parent for overrides in sorted(
        sweep_dir.glob("**/.hydra/overrides.yaml"))
        if not (overrides.parent.parent / "results.json").exists()
        and not (overrides.parent.parent / "failed.json").exists()]


def _close_progress_bars() -> None:
    """Clear the progress bars a failure left open, so the error starts its own line."""
    tqdm = sys.modules.get("tqdm")
    for bar in list(getattr(getattr(tqdm, "tqdm", None), "_instances", ())):
        bar.close()


def _report_failure(err: BaseException) -> None:
    """One line for a user error, the traceback for a bug; exit code 2."""
    _close_progress_bars()
    if isinstance(err, UserError):
        print(f"error: {err}", file=sys.stderr)
    else:
        traceback.print_exception(err)
    sys.exit(EXIT_FAILED)


def _prepare(cfg: DictConfig, hydra_cfg: Any, output_dir: Path) -> Job | dict:
    """Everything checked before a run starts; returns the job, or the previous metrics
    when the folder already holds this config's results."""
    if cfg.get("paper") is None:
        raise UserError("no paper selected: python run.py +paper=<key> [overrides]")
    reject_unknown_keys(cfg)
    check_values(cfg)
    key = str(cfg.paper.key)
    check_claims(key, composed_claims(cfg))
    cfg_hash = config_hash(cfg)
    previous = output_dir / "results.json"
    done, error = read_json(previous) if previous.exists() else (None, "")
    if previous.exists() and not isinstance((done or {}).get("metrics"), dict):
        aside = previous.with_name(f"results.json.corrupt-{int(time.time())}")
        previous.rename(aside)  # kept for a look, out of every reader's way; the job reruns
        log.warning("%s cannot be read (%s): set aside as %s, the job runs again", previous,
                    error or "no metrics", aside.name)
        done = None
    if done is not None:
        if done.get("config_hash") == cfg_hash:
            log.info("skipping: %s already holds the results of this config", output_dir)
            _say_if_made_by_other_code(key, done, output_dir)
            return done["metrics"]
        raise UserError(f"{output_dir} already holds the results of another run "
                        f"(paper {done.get('paper')}, overrides {done.get('overrides')}); "
                        "choose another hydra.run.dir or delete that folder")
    check_device(str(cfg.device))
    threads = thread_count(cfg.threads)
    ensure_writable(output_dir, f"output folder {output_dir}")
    ensure_writable(Path(cfg.paths.cache_dir), f"paths.cache_dir ({cfg.paths.cache_dir})")
    find_paper(key)
    choices = {k: v for k, v in hydra_cfg.runtime.choices.items()
               if not k.startswith(("hydra/", "schema")) and v is not None}
    return Job(key, cfg_hash, threads, choices, list(hydra_cfg.overrides.task),
               output_dir, hydra_cfg, hydra_cfg.mode == RunMode.MULTIRUN)


def _say_if_made_by_other_code(key: str, done: dict, output_dir: Path) -> None:
    """A warning when the skipped results were made by code that has changed since in the
    files the paper's run imports (its configs, protocol, method and the shared code)."""
    made = str(done.get("git_sha") or "").removesuffix("-dirty")
    now = git_sha(PROJECT_ROOT)
    if not made or not now or made == now.removesuffix("-dirty"):
        return
    changed = changed_files(made, "HEAD", key)
    if changed:
        log.warning("%s was made at %s; since then %s changed: its results are not this "
                    "code's (delete the folder to run it again)", output_dir, made[:7],
                    ", ".join(changed[:5]) + (f" and {len(changed) - 5} more"
                                              if len(changed) > 5 else ""))


def _run(cfg: DictConfig, job: Job) -> dict[str, Any]:
    output_dir, key, seed = job.output_dir, job.key, int(cfg.seed)
    writes = is_global_zero()
    os.environ.setdefault("MPLBACKEND", "Agg")
    apply_threads(job.threads)
    seed_everything(seed)
    _on_signals()
    resolved = OmegaConf.to_yaml(cfg, resolve=True)
    if writes:  # another rank clearing the folder would remove what rank 0 wrote in it
        _clear_partial_outputs(output_dir)
        (output_dir / "config_resolved.yaml").write_text(resolved)
    _print_header(cfg, job)
    check_models_cached(cfg)  # one line within seconds, before the protocol's heavy imports
    protocol = load_protocol(key)

    mirror = _start_wandb(cfg, job) if writes else None
    settings = OmegaConf.to_object(cfg)  # typed: dataclass instances, Enum members, resolved
    ctx = RunContext(output_dir=output_dir, cache_dir=Path(cfg.paths.cache_dir),
                     requested_device=str(cfg.device), trainer=settings.trainer, seed=seed,
                     stream_curves=cfg.logger.name in ("csv", "wandb"), wandb=mirror)
    started = time.perf_counter()
    started_at = datetime.now(timezone.utc).isoformat()
    try:
        metrics = clean_metrics(protocol(settings, ctx))
    except BaseException:
        if mirror is not None:
            mirror.finish(exit_code=1)
        raise
    wall = time.perf_counter() - started
    if not writes:
        return metrics
    write_json(output_dir / "metrics.json", metrics)
    verdicts = _claim_verdicts(key, composed_claims(cfg), metrics, cfg)
    write_json(output_dir / "results.json", {
        "metrics": metrics, "paper": key, "title": cfg.paper.get("title"),
        "method": job.choices.get("method"), "model": job.choices.get("model"),
        "dataset": job.choices.get("dataset"), "seed": seed,
        "device": ctx.resolved_device, "threads": job.threads,
        "processes": {"writer_rank": global_rank(), "world_size": world_size()},
        "overrides": job.overrides, "choices": job.choices, "config_hash": job.config_hash,
        "git_sha": git_sha(PROJECT_ROOT), "versions": package_versions(),
        "python": sys.version.split()[0], "started_at": started_at,
        "wall_time_s": round(wall, 3), "claims": verdicts,
        "streams": dict(sorted(ctx.streams.used.items())),
        "stage_seconds": {k: round(v, 3) for k, v in ctx.stage_seconds.items()},
        "imports": imported_project_files(PROJECT_ROOT),
    })
    if mirror is not None:
        mirror.summary(metrics, verdicts)
        mirror.finish(exit_code=0)
    _print_footer(cfg, metrics, output_dir)
    log.info("finished %s seed %d in %.0f s; claims at this seed: %s", key, seed, wall,
             "; ".join(f"{k} {v}" for k, v in verdicts.items()) or "none")
    return metrics


def _claim_verdicts(key: str, claims: list[dict], metrics: dict, cfg: DictConfig
                    ) -> dict[str, str]:
    """Whether each claim's condition holds or fails at this seed alone (the report combines
    the seeds into verdicts). A claim applies to the runs whose configuration writes every
    metric it names (``paper.metrics``): outside them it is "not applicable here", quietly;
    a declared metric the run did not write is an error line (the protocol broke its
    contract), not a lost run."""
    required, _ = contract(cfg)
    verdicts = {}
    for claim in claims:
        verdicts[claim["id"]] = seed_condition(claim, metrics, required)
        absent = sorted(claim_metrics(claim) - set(metrics))
        if verdicts[claim["id"]] == MISSING and absent:  # the protocol broke its contract
            log.error("error: paper %s, claim %s: no metric %s in metrics.json", key,
                      claim["id"], ", ".join(absent))
    return verdicts


# What a run writes into its folder besides Hydra's files; an attempt that stopped halfway
# (failed.json, or killed before it could write one) leaves some of them, and a rerun of the
# same command starts without them (curves.csv is appended to, so it would hold both runs).
RUN_OUTPUTS = ("metrics.json", "failed.json", "curves.csv", "tables", "figures",
               "config_resolved.yaml")


def _clear_partial_outputs(output_dir: Path) -> None:
    stale = [output_dir / name for name in RUN_OUTPUTS if (output_dir / name).exists()]
    if not stale:
        return
    log.info("resuming in %s: removing the partial outputs of the interrupted attempt (%s)",
             output_dir, ", ".join(p.name for p in stale))
    for path in stale:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()


def _on_signals() -> None:
    """SIGTERM ends the run like Ctrl-C: failed.json says 'interrupted', W&B is closed. A job
    in a launcher's worker process (joblib) also ends when the launching process is gone."""
    def interrupt(signum, frame):
        raise Interrupted(signum)

    try:
        signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread (some launchers): leave the default
        pass
    _stop_with_launcher()


_watching_parent: list[int] = []


def _stop_with_launcher() -> None:
    """In a launcher's worker process, a thread that sends this process SIGTERM once its
    parent (the sweep's main process) has exited, so stopping a sweep stops its jobs."""
    import multiprocessing
    import threading

    if multiprocessing.current_process().name == "MainProcess" or _watching_parent:
        return
    parent = os.getppid()
    _watching_parent.append(parent)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="stop-with-launcher", daemon=True).start()


def _record_failure(output_dir: Path, cfg: DictConfig, hydra_cfg: Any, err: BaseException,
                    multirun: bool) -> None:
    """Write ``failed.json``; in a multirun also log the one line the sweep reports. The
    other ranks of a multi-process launch write nothing, but say why they stopped."""
    interrupted = isinstance(err, Interrupted | KeyboardInterrupt)
    message = (f"interrupted ({err})" if interrupted else f"{type(err).__name__}: {err}")
    if not is_global_zero():
        log.error("rank %d of %d stopped: %s", global_rank(), world_size(), message)
        return None
    if (output_dir / "results.json").exists():  # a folder of another run: leave it alone
        log.error("job %s: %s", output_dir, message)
        if multirun:  # the sweep still counts it: a record at the sweep's root
            _record_refusal(hydra_cfg, output_dir, message)
        return None
    if not multirun:
        _to_log_file(f"run failed: {message}")  # the console line is printed by the caller
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        write_json(output_dir / "failed.json", {
            "paper": OmegaConf.select(cfg, "paper.key"), "error": message,
            "user_error": isinstance(err, UserError), "interrupted": interrupted,
            "traceback": None if isinstance(err, UserError) or interrupted
            else traceback.format_exc(),
            "overrides": list(hydra_cfg.overrides.task),
        })
    except OSError as write_error:  # a full disk: the console line still says why
        _to_log_file(f"could not write failed.json: {write_error}")
    if multirun:
        if not isinstance(err, UserError | Interrupted | KeyboardInterrupt):
            log.error("%s", traceback.format_exc())
        log.error("job failed: %s (%s)", message, output_dir / "failed.json")
    return None


def _record_refusal(hydra_cfg: Any, output_dir: Path, message: str) -> None:
    """``<sweep dir>/refused/job<num>.json``: a job of a multirun that could not run in its
    folder (it holds another configuration's results, or another live run holds it),
    counted as failed by the sweep."""
    folder = Path(hydra_cfg.sweep.dir) / REFUSED
    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / f"job{hydra_cfg.job.num}.json",
               {"folder": str(output_dir), "error": message,
                "overrides": list(hydra_cfg.overrides.task)})


def _to_log_file(message: str) -> None:
    """An error record for run.log only (Hydra's file handler), not the console."""
    record = log.makeRecord(log.name, logging.ERROR, __file__, 0, message, (), None)
    for handler in logging.getLogger().handlers + log.handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)


def _remove_hydra_files(output_dir: Path, hydra_cfg: Any) -> None:
    """A refused run leaves no folder: remove what Hydra wrote (never anything else)."""
    subdir = hydra_cfg.output_subdir
    if subdir:
        shutil.rmtree(output_dir / subdir, ignore_errors=True)
    (output_dir / f"{hydra_cfg.job.name}.log").unlink(missing_ok=True)
    try:
        output_dir.rmdir()  # only if now empty
    except OSError:
        pass


def _print_header(cfg: DictConfig, job: Job) -> None:
    c = job.choices
    log.info("paper %s | method %s | model %s | dataset %s | trainer %s | seed %s | device %s "
             "| threads %d", job.key, c.get("method"), c.get("model"), c.get("dataset"),
             c.get("trainer"), cfg.seed, cfg.device, job.threads)
    log.info("run folder %s (full config: config_resolved.yaml)", job.output_dir)


def _print_footer(cfg: DictConfig, metrics: dict, output_dir: Path) -> None:
    shown = list(headline(cfg.paper, metrics))[:12] or list(metrics)[:12]
    width = max((len(k) for k in shown), default=0)
    lines = [f"  {k:<{width}}  {_fmt(metrics[k])}" for k in shown]
    figures = sorted((output_dir / "figures").glob("*.png"))
    lines += [f"  figure: {p}" for p in figures]
    log.info("%s: %d metrics in %s\n%s", cfg.paper.key, len(metrics),
             output_dir / "metrics.json", "\n".join(lines))


def _fmt(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _start_wandb(cfg: DictConfig, job: Job):
    if cfg.logger.name != "wandb":
        return None
    from experiments.runner.wandb_logger import WandbMirror

    key, choices = job.key, job.choices
    group = cfg.logger.group or key
    method = choices.get("method", "none")
    job_type = choices.get("sweep") or ("default" if is_default(job.overrides) else method)
    config = OmegaConf.to_container(cfg, resolve=True)
    config.update({"choices": choices, "overrides": job.overrides})
    return WandbMirror(
        project=cfg.logger.project, entity=cfg.logger.entity, mode=cfg.logger.mode,
        group=str(group), job_type=str(job_type), name=f"{key}-{method}-s{cfg.seed}",
        tags=[key, str(method), f"model:{choices.get('model')}",
              f"dataset:{choices.get('dataset')}", f"seed:{cfg.seed}"],
        config=config, output_dir=job.output_dir,
        primary_metrics={k: v for k, v in headline(cfg.paper, declared_names(cfg)).items()
                         if v is not None},
    )
