"""Shared fixtures: offline environment, and running a paper in-process via the compose API."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

from common.kernels import pin_cpu_kernels  # noqa: E402

pin_cpu_kernels()
_TMP = tempfile.mkdtemp(prefix="paperlab-tests-")
atexit.register(shutil.rmtree, _TMP, True)
for key, value in {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "WANDB_MODE": "disabled",
                   "WANDB_SILENT": "true", "WANDB_DIR": _TMP, "HF_HOME": _TMP,
                   "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1"}.items():
    os.environ.setdefault(key, value)

import json  # noqa: E402

import pytest  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from hydra.core.global_hydra import GlobalHydra  # noqa: E402
from hydra.core.hydra_config import HydraConfig  # noqa: E402
from hydra.types import RunMode  # noqa: E402
from omegaconf import open_dict  # noqa: E402

from experiments.runner.cli import paper_keys, search_path_override  # noqa: E402
from experiments.runner.job import execute  # noqa: E402
from experiments.schemas import register_schemas  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CONF = str(ROOT / "conf")
register_schemas()


def compose_config(overrides: list[str], output_dir: Path | None = None):
    """Compose ``conf/config.yaml`` with overrides, as ``run.py`` would (hydra node included,
    the selected paper's config folder searchable)."""
    GlobalHydra.instance().clear()
    overrides = overrides + search_path_override(paper_keys(overrides))
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        cfg = compose("config", overrides=overrides, return_hydra_config=True)
    if output_dir is not None:
        with open_dict(cfg):
            cfg.hydra.runtime.output_dir = str(output_dir)
            cfg.hydra.mode = RunMode.RUN
            cfg.paths.output_dir = str(output_dir.parent / "outputs")
    return cfg


def run_paper(overrides: list[str], output_dir: Path) -> dict:
    """Run one job in-process into ``output_dir``; returns metrics.json as a dict."""
    cfg = compose_config(overrides, output_dir)
    HydraConfig.instance().set_config(cfg)
    job_cfg = cfg.copy()
    with open_dict(job_cfg):
        del job_cfg["hydra"]
    output_dir.mkdir(parents=True, exist_ok=True)
    execute(job_cfg)
    return json.loads((output_dir / "metrics.json").read_text())


def run_failing(overrides: list[str], output_dir: Path) -> tuple[int, dict]:
    """Run one job that must fail; returns its exit code and its failed.json."""
    with pytest.raises(SystemExit) as exit_info:
        run_paper(overrides, output_dir)
    return exit_info.value.code, json.loads((output_dir / "failed.json").read_text())


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return tmp_path / "run"


@pytest.fixture(scope="session")
def shared_folder(tmp_path_factory, worker_id) -> Path:
    """A folder every xdist worker of this test run sees (the base folder of its workers)."""
    shared = tmp_path_factory.getbasetemp()
    return shared if worker_id == "master" else shared.parent


@pytest.fixture(scope="session")
def once_per_run(shared_folder):
    """``once_per_run(name, make)``: ``make()`` computed by the first xdist worker to ask
    (the others wait on its lock) and pickled, so an expensive result shared by several
    tests is computed once per test run, not once per worker."""
    import pickle

    from filelock import FileLock

    def get(name: str, make):
        path = shared_folder / f"{name}.pickle"
        with FileLock(f"{path}.lock"):
            if not path.is_file():
                value = make()
                temporary = path.with_suffix(".partial")
                temporary.write_bytes(pickle.dumps(value))
                temporary.rename(path)
        return pickle.loads(path.read_bytes())

    return get


@pytest.fixture(scope="session")
def smoke_run(shared_folder):
    """``smoke_run(key)``: the paper's smoke configuration (tests/smoke.py) run once per test
    run from an empty cache, shared by the xdist workers (the first to ask runs it while
    the others wait on its lock); returns its metrics and run folder (read them, don't
    write), whose sibling ``cache`` holds what the run built (tests of other settings may
    reuse it: a cache entry is published by an atomic rename)."""
    from filelock import FileLock

    from .smoke import SMOKE

    def run(key: str) -> tuple[dict, Path]:
        root = shared_folder / f"smoke-{key}"
        with FileLock(f"{root}.lock"):
            if not (root / "run" / "metrics.json").is_file():
                shutil.rmtree(root, ignore_errors=True)  # a run that failed halfway
                run_paper([*SMOKE[key], f"paths.cache_dir={root / 'cache'}"], root / "run")
        return json.loads((root / "run" / "metrics.json").read_text()), root / "run"

    return run


# -- nothing written outside outputs/ and temporary folders -----------------------------------
def _tree_state() -> set[str] | None:
    """``git status --porcelain`` lines of the checkout (None outside a git checkout)."""
    import subprocess

    done = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=ROOT,
                          capture_output=True, text=True)
    return set(done.stdout.splitlines()) if done.returncode == 0 else None


def pytest_sessionstart(session):
    if not hasattr(session.config, "workerinput"):  # the controller, once per session
        session.config.stash_tree = _tree_state()


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    """A test session (its runs, the device check's dry run) leaves the checkout as it found
    it: a file written outside outputs/ and the temporary folders fails the session."""
    before = getattr(session.config, "stash_tree", None)
    after = _tree_state() if before is not None else None
    if after is not None and after - before:
        print("\nerror: the tests wrote into the checkout: "
              + ", ".join(sorted(line[3:] for line in after - before)))
        session.exitstatus = 1
