"""The runner: registry, configs, run folder, determinism, errors, sweeps, W&B."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf
from omegaconf.errors import ConfigKeyError, ValidationError

from experiments.runner.errors import UserError
from experiments.runner.registry import check_paper, known_papers, load_protocol
from experiments.runner.sweep_summary import summarize_sweep
from experiments.schemas import all_method_schemas

from .conftest import ROOT, compose_config, run_paper

PAPER_FILES = sorted(p.stem for p in (ROOT / "conf" / "paper").glob("*.yaml"))
METHOD_FILES = sorted(p.stem for p in (ROOT / "conf" / "method").glob("*.yaml"))
DITHERQ_SMOKE = ["+paper=ditherq", "protocol.n_trials=3", "protocol.bits=[1,2]",
                 "protocol.timing_dims=[64]", "protocol.timing_repeats=2",
                 "dataset.dim=64", "dataset.n_random=2"]


def _env():
    return {**os.environ, "HYDRA_FULL_ERROR": "0"}


def _cli(*args, timeout=120):
    return subprocess.run([sys.executable, "run.py", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env=_env())


# -- registry and configs ---------------------------------------------------------------

def test_registry_and_paper_configs_agree():
    assert known_papers() == PAPER_FILES
    for key in known_papers():
        assert callable(load_protocol(key))
        assert OmegaConf.load(ROOT / "conf" / "paper" / f"{key}.yaml").paper.key == key


def test_unknown_paper_suggests_the_closest():
    with pytest.raises(UserError, match="unknown paper 'dithreq'; did you mean ditherq"):
        check_paper("dithreq")


def test_every_method_file_has_a_schema_and_its_name():
    schemas = all_method_schemas()
    assert set(METHOD_FILES) <= set(schemas)
    for name in METHOD_FILES:
        cfg = compose_config([f"method={name}"])
        assert cfg.method.name == name


@pytest.mark.parametrize("key", PAPER_FILES)
def test_every_paper_composes(key):
    cfg = compose_config([f"+paper={key}"])
    assert cfg.paper.key == key and cfg.paper.claim


def test_schema_rejects_typos_and_wrong_types_at_compose_time():
    with pytest.raises(ConfigCompositionException) as typo:
        compose_config(["+paper=ditherq", "method.bitz=2"])
    assert "bitz" in str(typo.value) or isinstance(typo.value.__cause__, ConfigKeyError)
    with pytest.raises(ConfigCompositionException) as wrong_type:
        compose_config(["+paper=ditherq", "method.bits=two"])
    assert isinstance(wrong_type.value.__cause__, ValidationError)
    with pytest.raises(ConfigCompositionException):
        compose_config(["+paper=ditherq", "method.rotation=diagonal"])


def test_numpy_only_paper_never_imports_torch():
    code = ("import sys, experiments.ditherq, experiments.schemas;"
            "assert 'torch' not in sys.modules and 'transformers' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=60)


# -- one run ----------------------------------------------------------------------------

def test_run_folder_and_determinism(tmp_path):
    first = run_paper(DITHERQ_SMOKE, tmp_path / "a")
    second = run_paper(DITHERQ_SMOKE, tmp_path / "b")
    run = tmp_path / "a"
    for name in ("metrics.json", "results.json", "config_resolved.yaml", "curves.csv",
                 "tables/nmse_by_family.csv", "figures/mse_vs_bits.png"):
        assert (run / name).is_file(), name
    results = json.loads((run / "results.json").read_text())
    for key in ("paper", "method", "model", "dataset", "seed", "overrides", "git_sha",
                "versions", "device", "wall_time_s", "metrics"):
        assert key in results
    assert results["method"] == "turboquant" and results["device"] == "cpu"

    def untimed(m):
        return {k: v for k, v in m.items() if not k.startswith("time_")}

    assert untimed(first) == untimed(second)
    third = run_paper([*DITHERQ_SMOKE, "seed=1"], tmp_path / "c")
    assert untimed(third) != untimed(first)


def test_finished_job_is_skipped_on_rerun(tmp_path):
    run_paper(DITHERQ_SMOKE, tmp_path / "a")
    stamp = (tmp_path / "a" / "metrics.json").stat().st_mtime_ns
    run_paper(DITHERQ_SMOKE, tmp_path / "a")
    assert (tmp_path / "a" / "metrics.json").stat().st_mtime_ns == stamp


def test_user_error_exits_cleanly_and_leaves_no_results(tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        run_paper(["+paper=ditherq", "dataset=npy_vectors", "dataset.path=/nonexistent.npy"],
                  tmp_path / "a")
    assert exit_info.value.code == 2
    assert (tmp_path / "a" / "failed.json").is_file()
    assert not (tmp_path / "a" / "metrics.json").exists()
    assert not (tmp_path / "a" / "results.json").exists()


def test_wandb_offline_run_holds_the_figure(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    run_paper([*DITHERQ_SMOKE, "logger=wandb"], tmp_path / "a")
    runs = list((tmp_path / "a" / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    assert list(runs[0].rglob("*mse_vs_bits*.png"))


# -- command line -----------------------------------------------------------------------

@pytest.mark.parametrize("args,message", [
    ((), "known papers: "),
    (("+paper=dithreq",), "did you mean ditherq"),
    (("+paper=ditherq", "method.bitz=2"), "bitz"),
    (("+paper=ditherq", "method.bits=two"), "two"),
    (("+paper=ditherq", "method=turboqant"), "turboqant"),
    (("+paper=ditherq", "device=cuda"), "no CUDA GPU"),
    (("+paper=ditherq", "hydra.run.dir=/proc/paperlab"), "not writable"),
    (("+paper=cfbeam", "model=qwen3-4b"), "not in the local Hugging Face cache"),
])
def test_user_mistakes_give_one_clear_line(args, message):
    proc = _cli(*args)
    assert proc.returncode != 0
    assert message in proc.stderr + proc.stdout
    assert "Traceback" not in proc.stderr


def test_multirun_with_joblib_writes_jobs_and_summary(tmp_path):
    sweep = tmp_path / "sweep"
    proc = _cli("-m", *DITHERQ_SMOKE, "method.bits=1,2,3", "seed=0,1",
                "hydra/launcher=joblib", "hydra.launcher.n_jobs=2",
                f"hydra.sweep.dir={sweep}", timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(list(sweep.glob("*/results.json"))) == 6
    summary = (sweep / "summary.md").read_text()
    assert "method.bits" in summary and "| 2 |" in summary  # two seeds per configuration
    assert (sweep / "summary.png").is_file()


def test_sweep_summary_mean_and_std(tmp_path):
    for i, (bits, seed, value) in enumerate([(1, 0, 1.0), (1, 1, 3.0), (2, 0, 5.0)]):
        job = tmp_path / str(i)
        job.mkdir()
        (job / "results.json").write_text(json.dumps({
            "overrides": ["+paper=x", f"method.bits={bits}", f"seed={seed}"],
            "metrics": {"mse": value}}))
    (tmp_path / "3").mkdir()
    (tmp_path / "3" / "failed.json").write_text("{}")
    summarize_sweep(tmp_path, ["mse"])
    rows = (tmp_path / "summary.csv").read_text().splitlines()
    assert rows[0].startswith("method.bits,n_seeds,mse_mean,mse_std")
    assert rows[1].split(",")[:4] == ["1", "2", "2.0", repr(2**0.5)]
    assert "1 job(s) failed" in (tmp_path / "summary.md").read_text()


@pytest.mark.slow
def test_multirun_with_submitit_local(tmp_path):
    sweep = tmp_path / "sweep"
    proc = _cli("-m", *DITHERQ_SMOKE, "method.bits=1,2", "hydra/launcher=submitit_local",
                f"hydra.sweep.dir={sweep}", timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(list(sweep.glob("*/results.json"))) == 2
    assert (sweep / "summary.csv").is_file()


def test_failed_sweep_job_keeps_the_others(tmp_path):
    sweep = tmp_path / "sweep"
    proc = _cli("-m", *DITHERQ_SMOKE, "method=turboquant,rabitq", "method.bits=2",
                f"hydra.sweep.dir={sweep}")
    assert proc.returncode != 0  # rabitq is 1-bit only
    assert len(list(sweep.glob("*/results.json"))) == 1
    assert len(list(sweep.glob("*/failed.json"))) == 1
    assert "1 job(s) failed" in (sweep / "summary.md").read_text()
    Path(sweep / "summary.md").unlink()
