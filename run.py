"""paperlab's one entry point.

    python run.py +paper=<key> [group=option ...] [key=value ...]
    python run.py -m +paper=<key> key=v1,v2 seed=0,1,2 [hydra/launcher=joblib]

Check the command line (one clear line for a mistake, before Hydra writes anything), then
compose (Hydra) and ``experiments.runner.job.execute``: seed, run the paper's protocol from
the registry, write the run folder, log. Exit codes: README, "Exit codes".
"""

from __future__ import annotations

import logging
import os
import signal
import sys

from common.kernels import pin_cpu_kernels

pin_cpu_kernels()  # before numpy and torch load (common/kernels.py says why)

import hydra  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from common.errors import UserError  # noqa: E402
from experiments.claims.papers import papers  # noqa: E402
from experiments.runner.cli import prepare  # noqa: E402
from experiments.runner.job import (  # noqa: E402
    EXIT_FAILED,
    EXIT_REJECTED,
    execute,
    record_interrupted_sweep,
    report_uncaught,
)
from experiments.runner.sweep_summary import last_sweep  # noqa: E402
from experiments.schemas import register_schemas  # noqa: E402

HELP_FLAGS = {"-h", "--help", "--hydra-help", "--shell-completion", "-sc"}


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig):
    return execute(cfg)


if __name__ == "__main__":
    arguments = sys.argv[1:]
    if not arguments:
        print("usage: python run.py +paper=<key> [overrides]; known papers: "
              + ", ".join(list(papers())), file=sys.stderr)
        sys.exit(EXIT_REJECTED)
    register_schemas()
    if not HELP_FLAGS & set(arguments):
        try:
            sys.argv = [sys.argv[0], *prepare(arguments)]
        except UserError as err:
            print(f"error: {err}", file=sys.stderr)
            sys.exit(EXIT_REJECTED)
    # Hydra raises what it cannot do (a full disk while it writes the run folder, a bad value
    # in a sweep) instead of printing its own block; report_uncaught says it in one line
    os.environ.setdefault("PAPERLAB_FULL_ERROR", os.environ.get("HYDRA_FULL_ERROR", "0"))
    os.environ["HYDRA_FULL_ERROR"] = "1"
    logging.raiseExceptions = False  # a log file on a full disk: no traceback per record
    # an interrupted sweep leaves its launcher's semaphores to the resource trackers, which
    # would warn about them at exit (the jobs' own records say what was interrupted)
    os.environ["PYTHONWARNINGS"] = ",".join(filter(None, [
        os.environ.get("PYTHONWARNINGS"), *(f"ignore::UserWarning:{module}" for module in (
            "multiprocessing.resource_tracker",
            "joblib.externals.loky.backend.resource_tracker"))]))
    stopped_by: list[int] = []

    def stop(signum, frame):  # SIGTERM to the sweep's own process: as Ctrl-C, one line
        stopped_by.append(signum)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)  # a job replaces it with its own while it runs
    try:
        main()
    except KeyboardInterrupt:  # the sweep's own process (a single run handles it in its job)
        sys.exit(record_interrupted_sweep(last_sweep.get("dir"),
                                          stopped_by[0] if stopped_by else signal.SIGINT))
    except Exception as err:  # noqa: BLE001 - a bug's traceback is re-raised there
        sys.exit(report_uncaught(err))
    if last_sweep.get("failed"):
        sys.exit(EXIT_FAILED)
