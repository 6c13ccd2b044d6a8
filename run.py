"""paperlab's one entry point.

    python run.py +paper=<key> [group=option ...] [key=value ...]
    python run.py -m +paper=<key> key=v1,v2 seed=0,1,2 [hydra/launcher=joblib]

Compose (Hydra), then ``experiments.runner.job.execute``: seed, pick the paper's protocol
from the registry, run it, write the run folder, log.
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from experiments.runner.errors import UserError, ensure_writable
from experiments.runner.job import execute
from experiments.runner.registry import check_paper, known_papers
from experiments.schemas import register_schemas


def check_paper_arguments(argv: list[str]) -> None:
    """Fail early, with a did-you-mean line, on ``+paper=<unknown>`` (Hydra's own message
    would list the search path instead)."""
    for arg in argv:
        if arg.startswith(("+paper=", "paper=")):
            for key in arg.split("=", 1)[1].split(","):
                if key and "(" not in key:  # leave glob(...)/range(...) to Hydra
                    check_paper(key)


def check_output_arguments(argv: list[str]) -> None:
    """Hydra creates the run folder before any of our code runs; check a user-given output
    location first so an unwritable one is one clear line, not a traceback."""
    for arg in argv:
        key, _, value = arg.lstrip("+").partition("=")
        if key in ("hydra.run.dir", "hydra.sweep.dir", "paths.output_dir") and value:
            ensure_writable(Path(value), f"{key}={value}")


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig):
    return execute(cfg)


if __name__ == "__main__":
    register_schemas()
    try:
        check_paper_arguments(sys.argv[1:])
        check_output_arguments(sys.argv[1:])
    except UserError as err:
        sys.exit(f"error: {err}")
    if len(sys.argv) == 1:
        sys.exit("usage: python run.py +paper=<key> [overrides]; known papers: "
                 + ", ".join(known_papers()))
    main()
