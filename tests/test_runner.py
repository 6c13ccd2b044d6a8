"""The runner: registry, configs, run folder, determinism, errors, exit codes, sweeps, W&B,
devices, threads and seeding."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf
from omegaconf.errors import ConfigKeyError, ValidationError

from common.errors import UserError, ensure_writable
from experiments.claims.papers import find_paper, papers
from experiments.runner.cli import check_arguments, job_name_override
from experiments.runner.registry import load_protocol
from experiments.runner.sweep_summary import summarize_sweep
from experiments.schemas import (
    all_dataset_schemas,
    all_method_schemas,
    all_protocol_schemas,
    reject_unknown_keys,
)

from .conftest import ROOT, compose_config, run_failing, run_paper
from .smoke import DITHERQ_NPY, SMOKE, good_and_bad_vectors

CONF = ROOT / "conf"
PAPER_FILES = sorted(p.stem for p in (CONF / "paper").glob("*.yaml"))
PAPER_OPTIONS = {group: sorted((p.parent.parent.name, p.stem)
                               for p in CONF.glob(f"paper/*/{group}/*.yaml"))
                 for group in ("method", "dataset", "model", "sweep")}
DITHERQ_SMOKE = SMOKE["ditherq"]


def _cli(*args, timeout=120, env=None):
    environment = {**os.environ, "HYDRA_FULL_ERROR": "0", **(env or {})}
    return subprocess.run([sys.executable, "run.py", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env=environment)


def _untimed(metrics):
    return {k: v for k, v in metrics.items() if not k.startswith("time_")}


# -- registry and configs ---------------------------------------------------------------

def test_registry_and_paper_configs_agree():
    assert list(papers()) == PAPER_FILES
    assert "helpers" not in list(papers()) and "runner" not in list(papers())
    assert sorted(all_protocol_schemas()) == PAPER_FILES
    for key in list(papers()):
        assert callable(load_protocol(key))
        paper = OmegaConf.load(CONF / "paper" / f"{key}.yaml").paper
        assert paper.key == key and paper.metrics
        assert (CONF / "paper" / key).is_dir()


def test_unknown_paper_suggests_the_closest():
    with pytest.raises(UserError, match="unknown paper 'dithreq'; did you mean ditherq"):
        find_paper("dithreq")
    with pytest.raises(UserError, match="unknown paper 'zzz'; known: cfbeam"):
        find_paper("zzz")


def test_the_papers_options_are_found():
    assert len(PAPER_OPTIONS["method"]) >= 19 and len(PAPER_OPTIONS["sweep"]) >= 19


@pytest.mark.parametrize("paper,name", PAPER_OPTIONS["method"])
def test_every_method_file_has_a_schema_and_composes(paper, name):
    assert name in all_method_schemas()
    cfg = compose_config([f"+paper={paper}", f"method={name}"])
    assert cfg.method.name == name
    reject_unknown_keys(cfg)


@pytest.mark.parametrize("paper,name", PAPER_OPTIONS["dataset"] + [
    ("cfbeam", p.stem) for p in sorted((CONF / "dataset").glob("*.yaml"))])
def test_every_dataset_file_has_a_schema_and_composes(paper, name):
    assert name in all_dataset_schemas()
    cfg = compose_config([f"+paper={paper}", f"dataset={name}"])
    assert cfg.dataset.name == name


@pytest.mark.parametrize("name", sorted(p.stem for p in (CONF / "model").glob("*.yaml"))
                         + sorted(p.stem for p in (CONF / "trainer").glob("*.yaml")))
def test_every_model_and_trainer_file_composes(name):
    group = "model" if (CONF / "model" / f"{name}.yaml").exists() else "trainer"
    cfg = compose_config(["+paper=cfbeam", f"{group}={name}"])
    assert cfg[group].name == name


@pytest.mark.parametrize("paper,sweep", PAPER_OPTIONS["sweep"])
def test_every_named_sweep_composes_and_sweeps_real_keys(paper, sweep):
    cfg = compose_config([f"+paper={paper}", f"+sweep={sweep}"])
    params = cfg.hydra.sweeper.params
    assert params, f"{paper}/{sweep} sweeps nothing"
    parser = OverridesParser.create()
    first_job = []
    for key, values in params.items():
        override = parser.parse_override(f"{key}={values}")
        first = (next(iter(override.sweep_iterator())) if override.is_sweep_override()
                 else override.value())
        option = ("[" + ",".join(map(str, first)) + "]" if isinstance(first, list)
                  else str(first))
        if key not in ("method", "dataset", "model", "trainer"):  # a setting: it exists
            assert OmegaConf.select(cfg, key, default="<absent>") != "<absent>", key
        first_job.append(f"{key}={option}")
    compose_config([f"+paper={paper}", *first_job])  # the sweep's first job composes


@pytest.mark.parametrize("key", PAPER_FILES)
def test_every_paper_composes(key):
    cfg = compose_config([f"+paper={key}"])
    assert cfg.paper.key == key and cfg.paper.claim
    reject_unknown_keys(cfg)


def test_schema_rejects_typos_wrong_types_and_appended_keys():
    with pytest.raises(ConfigCompositionException) as typo:
        compose_config(["+paper=ditherq", "method.bitz=2"])
    assert "bitz" in str(typo.value) or isinstance(typo.value.__cause__, ConfigKeyError)
    with pytest.raises(ConfigCompositionException) as wrong_type:
        compose_config(["+paper=ditherq", "method.bits=two"])
    assert isinstance(wrong_type.value.__cause__, ValidationError)
    for bad in (["method.rotation=diagonal"], ["seed=abc"], ["protocol.n_trials=many"],
                ["dataset.dim=large"]):
        with pytest.raises(ConfigCompositionException):
            compose_config(["+paper=ditherq", *bad])
    for appended in ("+method.bitz=2", "+protocol.extra=1", "+dataset.foo=1", "+foo=1"):
        cfg = compose_config(["+paper=ditherq", appended])  # Hydra adds it ...
        with pytest.raises(UserError, match="unknown key"):  # ... the runner refuses it
            reject_unknown_keys(cfg)



@pytest.mark.parametrize("override,allowed", [
    ("protocol.arms=[base,bogus]", "chi_minimum"),  # glycandock's arms: a list of Enum members
    ("method.topology_features=[anomer,bogus]", "distance"),
])
def test_a_list_of_choices_refuses_an_unknown_value_at_compose_time(override, allowed):
    with pytest.raises(ConfigCompositionException) as bad:
        compose_config(["+paper=glycandock", override])
    assert isinstance(bad.value.__cause__, ValidationError) and allowed in str(bad.value.__cause__)


def test_protocols_receive_typed_objects_not_the_config_tree(tmp_path, monkeypatch):
    """What ``run(cfg, ctx)`` gets: the schemas' dataclasses, Enum members, plain lists."""
    from experiments.schemas.glycandock import Arm, GlycandockConfig, GlycandockProtocol
    from experiments.schemas.shared import RootConfig

    received = []
    monkeypatch.setattr("experiments.runner.job.load_protocol",
                        lambda key: lambda cfg, ctx: received.append(cfg) or {"x": 1.0})
    run_paper(["+paper=glycandock", "protocol.arms=[base,energy]",
               f"paths.cache_dir={tmp_path / 'cache'}"], tmp_path / "run")
    cfg = received[0]
    assert isinstance(cfg, RootConfig) and isinstance(cfg.protocol, GlycandockProtocol)
    assert isinstance(cfg.method, GlycandockConfig)
    assert cfg.protocol.arms == [Arm.base, Arm.energy] == ["base", "energy"]
    assert f"{cfg.protocol.arms[1]}" == "energy"  # metric names read as before


# free-text str fields: paths, hub ids, names, prompts and Lightning's precision string
FREE_TEXT = {"path", "root", "reference", "hub_id", "split", "predictions_root", "real_root",
             "generated_root", "prompt_column", "prompts_file", "backbone", "roi_class", "roi",
             "colmap", "target", "neutral", "base_url", "model", "api_key", "device", "id",
             "text", "holds_if", "scale", "key", "title", "claim", "figure", "name", "source",
             "config", "precision", "regdb_root", "sysu_root", "llcm_root", "domains",
             "extraction_turns", "user_turns", "metric", "over", "abstract", "unit", "meaning",
             "when", "note", "margin_reason", "stand_in", "sweep", "real_data",
             "margin_metric", "changed_after_results", "verify", "setting", "reason"}


def test_every_field_with_a_fixed_set_of_values_is_an_enum():
    import dataclasses
    import typing

    from experiments.schemas import schema_modules

    bare = []
    for module in schema_modules():
        for schema in vars(module).values():
            if not (dataclasses.is_dataclass(schema) and schema.__module__ == module.__name__):
                continue
            hints = typing.get_type_hints(schema)
            bare += [f"{schema.__name__}.{f.name}" for f in dataclasses.fields(schema)
                     if hints[f.name] in (str, str | None, list[str])
                     and f.name not in FREE_TEXT]
    assert not bare, f"str fields outside the free-text list (make them an Enum): {bare}"

def test_ll_beam_is_cf_beam_without_the_filter():
    cf = compose_config(["+paper=cfbeam", "method=cf_beam"]).method
    ll = compose_config(["+paper=cfbeam", "method=ll_beam"]).method
    assert ll.filter.name == "none" and cf.filter.name != "none"
    assert {k: v for k, v in ll.items() if k not in ("name", "filter")} == \
        {k: v for k, v in cf.items() if k not in ("name", "filter")}


def test_numpy_only_paper_never_imports_torch():
    code = ("import sys, experiments.ditherq, experiments.schemas, experiments.runner.job;"
            "assert 'torch' not in sys.modules and 'transformers' not in sys.modules "
            "and 'lightning' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=60)


# -- command-line checks (before Hydra writes anything) -----------------------------------

@pytest.mark.parametrize("argv,message", [
    (["seed=1"], "no paper selected"),
    (["+paper=nosuchpaper"], "unknown paper 'nosuchpaper'; known: "),
    (["+paper=cfbeam", "model=nosuchmodel"], "unknown model option 'nosuchmodel'"),
    (["+paper=cfbeam", "model=qwen-4b"], "did you mean qwen3-4b"),
    (["+paper=cfbeam", "method=kernel_shap"], "unknown method option 'kernel_shap'"),
    (["+paper=ditherq", "device=gpu"], "device must be auto, cpu, cuda or cuda:<index>"),
    (["+paper=ditherq", "hydra.run.dir=/proc/paperlab"], "not writable"),
])
def test_argument_checks(argv, message):
    with pytest.raises(UserError, match=message):
        check_arguments(argv)


def test_the_writable_check_holds_when_callers_race(tmp_path):
    """The ranks of one job and the jobs of a sweep check the same new folders at the same
    time (two Slurm tasks once lost this race: one found its probe or folder removed by
    the other and stopped, and the other waited for it forever)."""
    folders = [tmp_path / str(i) / "cache" for i in range(300)]
    errors: list[BaseException] = []

    def check_all() -> None:
        for folder in folders:
            try:
                ensure_writable(folder, "paths.cache_dir")
            except UserError as err:
                errors.append(err)

    callers = [threading.Thread(target=check_all) for _ in range(6)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join()
    assert errors == []
    assert not list(tmp_path.rglob(".write_probe*"))


def test_job_folders_are_named_by_swept_keys_only():
    argv = ["-m", "+paper=ditherq", "method.bits=1,2", "seed=0,1", "dataset.dim=64",
            "protocol.timing_dims=[]", "+sweep=bits"]
    (override,) = job_name_override(argv, ["ditherq"])
    excluded = override.split("=", 1)[1].strip("[]").split(",")
    assert {"dataset.dim", "protocol.timing_dims", "paper", "sweep"} <= set(excluded)
    assert not {"method.bits", "seed", "method.rotation"} & set(excluded)


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
                "versions", "device", "threads", "wall_time_s", "metrics"):
        assert key in results
    assert results["method"] == "turboquant" and results["device"] == "cpu"
    # the project files the run imported: its protocol, its method, the runner; no package
    assert {"experiments/ditherq.py", "methods/ditherq/__init__.py",
            "experiments/runner/job.py"} <= set(results["imports"])
    assert not [f for f in results["imports"] if f.startswith(".") or "site-packages" in f]
    assert _untimed(first) == _untimed(second)
    third = run_paper([*DITHERQ_SMOKE, "seed=1"], tmp_path / "c")
    assert _untimed(third) != _untimed(first)


def test_finished_job_is_skipped_and_another_runs_folder_refused(tmp_path):
    run_paper(DITHERQ_SMOKE, tmp_path / "a")
    stamp = (tmp_path / "a" / "metrics.json").stat().st_mtime_ns
    run_paper(DITHERQ_SMOKE, tmp_path / "a")
    assert (tmp_path / "a" / "metrics.json").stat().st_mtime_ns == stamp
    with pytest.raises(SystemExit) as refused:
        run_paper([*DITHERQ_SMOKE, "seed=5"], tmp_path / "a")
    assert refused.value.code == 1
    assert (tmp_path / "a" / "metrics.json").stat().st_mtime_ns == stamp
    assert not (tmp_path / "a" / "failed.json").exists()


def test_user_error_during_the_run_leaves_failed_json_and_exit_2(tmp_path):
    code, failed = run_failing(["+paper=ditherq", "dataset=npy_vectors",
                                "dataset.path=/nonexistent.npy"], tmp_path / "a")
    assert code == 2
    assert failed["user_error"] and "nonexistent" in failed["error"]
    assert not (tmp_path / "a" / "metrics.json").exists()
    assert not (tmp_path / "a" / "results.json").exists()


def test_refused_config_leaves_no_run_folder(tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        run_paper([*DITHERQ_SMOKE, "+method.bitz=2"], tmp_path / "a")
    assert exit_info.value.code == 1
    assert not (tmp_path / "a").exists()


def test_wandb_offline_run_holds_the_figure(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    run_paper([*DITHERQ_SMOKE, "logger=wandb"], tmp_path / "a")
    runs = list((tmp_path / "a" / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    assert list(runs[0].rglob("*mse_vs_bits*.png"))
    record = b"".join(p.read_bytes() for p in runs[0].glob("*.wandb"))
    assert b"rht_matches_dense:" in record  # a claim's verdict at this seed, as a tag


def test_threads_setting_is_applied_and_recorded(tmp_path, monkeypatch):
    import torch

    from experiments.runner.seeding import thread_count

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert thread_count(3) == 3 and thread_count(None) >= 1
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert thread_count(None) == 2
    before = torch.get_num_threads()
    try:
        run_paper([*DITHERQ_SMOKE, "threads=2"], tmp_path / "a")
        assert torch.get_num_threads() == 2
        assert json.loads((tmp_path / "a" / "results.json").read_text())["threads"] == 2
    finally:
        torch.set_num_threads(before)


def test_torch_is_seeded_and_threaded_at_its_first_import():
    code = ("from experiments.runner.seeding import apply_threads, seed_everything;"
            "seed_everything(7); apply_threads(1);"
            "import torch; a = torch.rand(3); torch.manual_seed(7);"
            "assert torch.equal(a, torch.rand(3)); assert torch.get_num_threads() == 1")
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=60, env=env)


def test_auto_device_resolves_to_cuda_when_torch_sees_a_gpu(monkeypatch, tmp_path):
    import torch

    from experiments.runner.context import RunContext
    from models.trainer import Compute

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    trainer = compose_config(["+paper=cfbeam"]).trainer
    ctx = RunContext(tmp_path, tmp_path, "auto", trainer, 0)
    assert ctx.resolved_device == "cpu"  # nothing resolved before a protocol asks
    assert ctx.device == "cuda"
    assert Compute.from_config(trainer, "cuda").accelerator == "gpu"
    assert Compute.from_config(trainer, "cuda:1").devices == [1]
    assert Compute.from_config(trainer, "cuda:1").device == "cuda:1"
    assert RunContext(tmp_path, tmp_path, "cuda:1", trainer, 0).device == "cuda:1"
    with pytest.raises(UserError, match="only 2 GPU"):
        _ = RunContext(tmp_path, tmp_path, "cuda:2", trainer, 0).device
    assert Compute.from_config(compose_config(["+paper=cfbeam", "trainer=ddp"]).trainer,
                               "cpu").strategy == "ddp"


# -- the command line, end to end -----------------------------------------------------------

@pytest.mark.parametrize("args,message,code", [
    ((), "known papers: ", 1),
    (("seed=1",), "no paper selected", 1),
    (("+paper=dithreq",), "did you mean ditherq", 1),
    (("+paper=ditherq", "method.bits=two"), "two", 1),
    (("+paper=ditherq", "seed=abc"), "abc", 1),
    (("+paper=ditherq", "+method.bitz=2"), "unknown key method.bitz", 1),
    (("+paper=ditherq", "method=turboqant"), "did you mean turboquant", 1),
    (("+paper=ditherq", "device=cuda"), "no CUDA GPU", 1),
    (("+paper=ditherq", "dataset=npy_vectors", "dataset.path=/nonexistent.npy"),
     "nonexistent", 2),
    # a key that exists only with another spelling, without +: the close match
    (("+paper=ditherq", "method.bitz=2"), "did you mean method.bits?", 1),
    (("+paper=ditherq", "protocol.n_trials=1.5"), "protocol.n_trials", 1),
    # out-of-range values, refused before any work
    (("+paper=tps", "method.gamma=2"), "method.gamma=2.0 is out of range", 1),
    (("+paper=jecs", "method.alpha=2"), "method.alpha=2.0 is out of range", 1),
    (("+paper=sparseshap", "protocol.budget=-10"), "protocol.budget=-10 is out of range", 1),
    (("+paper=ditherq", "protocol.bits=[1,-2]"), "protocol.bits=[1, -2] is out of range", 1),
    (("+paper=ditherq", "threads=0"), "threads=0 is out of range", 1),
    # a mandatory value left unset
    (("+paper=proteinopd", "dataset=fasta_proteins"), "set dataset.path=<path>", 1),
    (("+paper=ditherq", "paths.cache_dir=/proc/no-cache-here"), "paths.cache_dir", 1),
    (("+paper=ditherq", "dataset=npy_vectors", "dataset.path=README.md"),
     "is not a .npy file", 2),
])
def test_user_mistakes_give_one_clear_line_and_the_documented_exit_code(
        tmp_path, args, message, code):
    run_dir = tmp_path / "run"
    proc = _cli(*args, f"hydra.run.dir={run_dir}", f"paths.output_dir={tmp_path / 'out'}"
                ) if args else _cli()
    assert proc.returncode == code, proc.stderr[-2000:]
    assert message in proc.stderr + proc.stdout
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith(("error:", "usage:"))]
    assert len(errors) == 1, proc.stderr[-2000:]
    if code == 1:
        assert not run_dir.exists() and not (tmp_path / "out").exists()
    else:
        assert (run_dir / "failed.json").is_file()
        assert "run failed: UserError" in (run_dir / "run.log").read_text()
        assert not (run_dir / "metrics.json").exists()


def test_a_full_disk_is_one_line(tmp_path, monkeypatch):
    import errno

    from experiments.runner import job

    def full(metrics):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "metrics.json"))

    monkeypatch.setattr(job, "clean_metrics", full)
    code, failed = run_failing(DITHERQ_SMOKE, tmp_path / "a")
    assert code == 2 and failed["user_error"]
    assert "no space left on the device" in failed["error"]


def test_a_resumed_run_has_the_tables_of_an_uninterrupted_one(tmp_path):
    whole = tmp_path / "whole"
    run_paper(DITHERQ_SMOKE, whole)
    resumed = tmp_path / "resumed"
    run_paper(DITHERQ_SMOKE, resumed)
    (resumed / "results.json").unlink()  # as if killed after the curves and tables
    (resumed / "failed.json").write_text("{}")
    run_paper(DITHERQ_SMOKE, resumed)
    for name in ("curves.csv", "tables/nmse_by_family.csv"):
        assert (resumed / name).read_text() == (whole / name).read_text(), name
    assert not (resumed / "failed.json").exists()


def test_a_model_missing_offline_fails_within_seconds(monkeypatch):
    from models.lm.loader import load_pretrained

    for offline, endpoint in (("1", None), ("0", "http://127.0.0.1:9")):
        monkeypatch.setenv("HF_HUB_OFFLINE", offline)
        if endpoint:
            monkeypatch.setenv("HF_ENDPOINT", endpoint)
        start = time.perf_counter()
        with pytest.raises(UserError, match="not in the local Hugging Face cache"):
            load_pretrained("Qwen/Qwen3-4B")
        assert time.perf_counter() - start < 10


def test_an_uncached_hub_model_fails_before_the_protocol_is_imported(tmp_path, monkeypatch):
    from huggingface_hub.constants import HF_HUB_CACHE

    from common.hub import check_models_cached

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = OmegaConf.create({"seed": 0, "model": {"source": "hub", "hub_id": str(tmp_path)},
                            "teacher": {"source": "hub", "hub_id": "org/not-cached"},
                            "dataset": {"source": "generated"}})
    with pytest.raises(UserError, match="'org/not-cached' is not in the local Hugging Face "
                                        "cache and offline mode is on.*teacher.hub_id"):
        check_models_cached(cfg)
    (Path(HF_HUB_CACHE) / "models--org--not-cached" / "snapshots" / "0abc").mkdir(parents=True)
    check_models_cached(cfg)  # a local folder and a cached snapshot pass
    for variable in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.setenv(variable, "0")
    cfg.teacher.hub_id = "org/other"
    check_models_cached(cfg)  # online, the loader downloads what is missing


def test_sigterm_writes_failed_json_and_exits_143(tmp_path):
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "run.py", "+paper=ditherq",
                             "protocol.n_trials=100000", f"hydra.run.dir={run_dir}"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 60
    while not (run_dir / "config_resolved.yaml").exists() and time.time() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 143
    failed = json.loads((run_dir / "failed.json").read_text())
    assert failed["interrupted"] and "SIGTERM" in failed["error"]
    assert "interrupted (SIGTERM); rerun the same command to resume" in stderr.decode()
    assert "Traceback" not in stderr.decode()
    assert "run failed: interrupted (SIGTERM)" in (run_dir / "run.log").read_text()


@pytest.mark.slow  # over 5 s: make test-slow
def test_sigterm_to_a_joblib_sweep_stops_its_workers(tmp_path):
    sweep = tmp_path / "sweep"
    proc = subprocess.Popen([sys.executable, "run.py", "-m", "+paper=ditherq",
                             "protocol.n_trials=100000", "method.bits=1,2",
                             "hydra/launcher=joblib", "hydra.launcher.n_jobs=2",
                             f"hydra.sweep.dir={sweep}"],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 90
    while len(list(sweep.glob("*/config_resolved.yaml"))) < 2 and time.time() < deadline:
        time.sleep(0.2)
    children = [int(p) for p in subprocess.run(["pgrep", "-P", str(proc.pid)],
                                               capture_output=True, text=True).stdout.split()]
    assert children
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    def running(pid):  # a zombie waiting for its reaper has stopped
        stat = Path(f"/proc/{pid}/stat")
        return stat.exists() and stat.read_text().rsplit(")", 1)[-1].split()[0] != "Z"

    deadline = time.time() + 15
    while any(running(pid) for pid in children) and time.time() < deadline:
        time.sleep(0.2)
    alive = [pid for pid in children if running(pid)]
    for pid in alive:
        os.kill(pid, signal.SIGKILL)
    assert not alive
    assert len(list(sweep.glob("*/failed.json"))) == 2


# -- sweeps -------------------------------------------------------------------------------

@pytest.mark.slow  # over 10 s: make test-slow
def test_multirun_with_joblib_writes_jobs_and_summary(tmp_path):
    sweep = tmp_path / "sweep"
    proc = _cli("-m", *DITHERQ_SMOKE, "method.bits=1,2,3", "seed=0,1",
                "hydra/launcher=joblib", "hydra.launcher.n_jobs=2",
                f"hydra.sweep.dir={sweep}", timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    jobs = sorted(p.parent.name for p in sweep.glob("*/results.json"))
    assert len(jobs) == 6
    for name in jobs:  # only the swept settings, nothing a shell or file system trips on
        assert "timing_dims" not in name and "dataset.dim" not in name
        assert "method.bits=" in name and "seed=" in name
        assert not set(name) & set("[]{}()' ,/")
    summary = (sweep / "summary.md").read_text()
    assert "method.bits" in summary and "| 2 |" in summary  # two seeds per configuration
    assert "ditherq" in summary.splitlines()[0]
    assert (sweep / "summary.png").is_file()


def test_sweep_summary_mean_std_best_and_fallback(tmp_path):
    for i, (bits, seed, value) in enumerate([(1, 0, 1.0), (1, 1, 3.0), (2, 0, 5.0)]):
        job = tmp_path / str(i)
        job.mkdir()
        (job / "results.json").write_text(json.dumps({
            "overrides": ["+paper=x", f"method.bits={bits}", f"seed={seed}"],
            "metrics": {"mse": value}}))
    (tmp_path / "3").mkdir()
    (tmp_path / "3" / "failed.json").write_text("{}")
    paper = {"metrics": {"mse": {"better": "lower", "unit": "MSE", "meaning": "m",
                                 "headline": True}}}
    summarize_sweep(tmp_path, paper, "x: sweep bits")
    rows = (tmp_path / "summary.csv").read_text().splitlines()
    assert rows[0].startswith("method.bits,n_seeds,mse_mean,mse_std")
    assert rows[1].split(",")[:4] == ["1", "2", "2.0", repr(2**0.5)]
    md = (tmp_path / "summary.md").read_text()
    assert "1 job(s) failed: 3/failed.json" in md and "**2 ± 1.4**" in md
    assert md.startswith("# x: sweep bits")
    paper["metrics"] = {"other": paper["metrics"]["mse"]}
    summarize_sweep(tmp_path, paper)  # no headline metric written: fall back
    assert "mse" in (tmp_path / "summary.md").read_text()



def test_sweep_summary_judges_each_claim_per_configuration_over_its_seeds(tmp_path):
    values = {(1, 0): 0.5, (1, 1): 0.7, (1, 2): 0.6, (2, 0): 0.5, (2, 1): -0.9, (2, 2): 0.1}
    for i, ((steps, seed), value) in enumerate(values.items()):
        job = tmp_path / str(i)
        job.mkdir()
        (job / "results.json").write_text(json.dumps({
            "overrides": ["+paper=x", f"protocol.steps={steps}", f"seed={seed}"],
            "metrics": {"rho": value}}))
    claims = [{"id": "tracks", "holds_if": "rho > 0", "rule": "compare"},
              {"id": "each_seed", "holds_if": "rho > 0.55", "rule": "exact"},
              {"id": "real_scale", "holds_if": None}]
    summarize_sweep(tmp_path, {"rho": True}, claims=claims)
    rows = {r["protocol.steps"]: r for r in csv.DictReader(open(tmp_path / "summary.csv"))}
    # steps=1: differences 0.5, 0.7, 0.6 have a t-interval above 0; steps=2 straddles it
    assert rows["1"]["claim_tracks"] == "holds" and rows["2"]["claim_tracks"] == "inconclusive"
    assert rows["1"]["claim_each_seed"] == "contradicted"  # 0.5 at seed 0: exact fails there
    assert rows["2"]["claim_each_seed"] == "contradicted"  # fails at 3 of 3
    assert rows["1"]["claim_real_scale"] == "not tested here"
    assert "claim_tracks" in (tmp_path / "summary.md").read_text()

def test_published_sweep_names_the_configurations_where_each_claim_holds(tmp_path):
    from experiments.runner.sweep_summary import publish, regimes

    sweep, docs = tmp_path / "sweep", tmp_path / "docs"
    for steps in (300, 1500):
        for seed, gain in enumerate((0.1, 0.2, 0.15) if steps == 300 else (0.1, -0.2, 0.0)):
            job = sweep / f"{steps}_{seed}"
            job.mkdir(parents=True)
            (job / "results.json").write_text(json.dumps({
                "paper": "mpopd", "overrides": ["+paper=mpopd", f"student.steps={steps}",
                                                f"seed={seed}"],
                "metrics": {"acc_mpopd": 0.5 + gain, "acc_opd": 0.5, "length_mpopd": 40,
                            "length_opd": 40, "repetition_mpopd": 0.1,
                            "repetition_opd": 0.1}}))
    publish(sweep, "gap", docs)
    record = json.loads((docs / "mpopd_gap.json").read_text())
    assert record["settings"] == ["student.steps"]
    assert [r["claims"]["higher_accuracy"] for r in record["rows"]] == ["holds",
                                                                      "inconclusive"]
    assert "# mpopd: sweep gap" in (docs / "mpopd_gap.md").read_text()
    assert regimes("mpopd", docs) == (
        "[gap](docs/sweeps/mpopd_gap.md): higher_accuracy holds at student.steps=300, "
        "shorter_generations holds in none of 2, less_repetitive holds in none of 2")


def test_sweep_figure_plots_the_first_metric_that_differs(tmp_path, monkeypatch):
    import experiments.runner.sweep_summary as sweep_summary

    for bits in (1, 2):
        job = tmp_path / str(bits)
        job.mkdir()
        (job / "results.json").write_text(json.dumps({
            "overrides": ["+paper=x", f"method.bits={bits}"],
            "metrics": {"stored": 0, "mse": float(bits)}}))
    plotted = []

    def plot(path, rows, swept, metric, *_):
        plotted.append(metric)
        path.write_bytes(b"")

    monkeypatch.setattr(sweep_summary, "_plot", plot)
    summarize_sweep(tmp_path, {"stored": False, "mse": False})
    assert plotted == ["mse"]  # "stored" is the same everywhere


@pytest.mark.slow  # over 5 s: make test-slow
def test_seed_only_sweep_has_a_summary_and_figure(tmp_path):
    sweep = tmp_path / "sweep"
    proc = _cli("-m", *DITHERQ_SMOKE, "seed=0,1", f"hydra.sweep.dir={sweep}", timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "mse" in (sweep / "summary.md").read_text()
    assert (sweep / "summary.png").is_file()


@pytest.mark.slow  # over 5 s: make test-slow
def test_failed_sweep_job_keeps_the_others_and_ends_with_the_failures(tmp_path):
    sweep = tmp_path / "sweep"
    proc = _cli("-m", *DITHERQ_NPY, good_and_bad_vectors(tmp_path), f"hydra.sweep.dir={sweep}")
    assert proc.returncode == 2  # the bad file is refused when its job reads it
    assert len(list(sweep.glob("*/results.json"))) == 1
    (failed,) = sweep.glob("*/failed.json")
    output = proc.stdout + proc.stderr
    assert "Traceback" not in output
    assert "1 of 2 jobs failed" in output and str(failed) in output
    assert "1 job(s) failed" in (sweep / "summary.md").read_text()


def test_make_sweep_lists_the_sweeps_of_a_paper():
    proc = subprocess.run(["make", "-s", "sweep", "PAPER=ditherq"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "bits" in proc.stdout


@pytest.mark.slow
def test_multirun_with_submitit_local(tmp_path):
    sweep = tmp_path / "sweep"
    proc = _cli("-m", *DITHERQ_SMOKE, "method.bits=1,2", "hydra/launcher=submitit_local",
                f"hydra.sweep.dir={sweep}", timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(list(sweep.glob("*/results.json"))) == 2
    assert (sweep / "summary.csv").is_file()


@pytest.mark.slow
def test_ddp_on_two_cpu_processes_writes_one_run_folder_and_equal_weights(tmp_path):
    run_dir, cache = tmp_path / "run", tmp_path / "cache"
    proc = _cli("+paper=cfbeam", "trainer=ddp", "trainer.devices=2", "device=cpu",
                "dataset.train_examples=400", "model.steps=20", "dataset.max_digits=2",
                "model.min_held_out_accuracy=null", "dataset.horizons=[2]",
                "dataset.prompts_per_horizon=2", "protocol.tree.coverages=[4,8]",
                "protocol.tree.trials=10", "protocol.tree.reward_noise=[0.0]",
                f"hydra.run.dir={run_dir}", f"paths.cache_dir={cache}", timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (run_dir / "metrics.json").is_file() and (run_dir / "results.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "run"]  # one run folder
    (entry,) = (cache / "tiny-lm").iterdir()  # one published cache entry
    checksums = json.loads((entry / "training_report.json").read_text())["replica_checksums"]
    assert len(checksums) == 2 and checksums[0] == checksums[1]


def test_installing_paperlab_adds_no_generic_top_level_names(tmp_path):
    """The folders run from the checkout; outside it, `import data` must not find ours."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for name in ("common", "data", "models", "methods", "experiments"):
        probe = subprocess.run([sys.executable, "-c", f"import {name}; print({name}.__file__)"],
                               cwd=tmp_path, capture_output=True, text=True, env=env)
        assert str(ROOT) not in probe.stdout, f"{name} resolves into the checkout"


def test_sweep_fits_the_log_log_slope_of_a_growth_law(tmp_path):
    """ratio = 3 * size^1.5 over three sizes, two seeds each: the slope is 1.5, written to
    fits.json and the summary, and published with the verdicts."""
    from experiments.runner.sweep_summary import loglog_slopes, publish, regimes

    sweep, docs = tmp_path / "sweep", tmp_path / "docs"
    for size in (2, 4, 8):
        for seed in (0, 1):
            job = sweep / f"{size}_{seed}"
            job.mkdir(parents=True)
            (job / "results.json").write_text(json.dumps({
                "paper": "directsynth",
                "overrides": ["+paper=directsynth", f"dataset.training_size={size}",
                              f"seed={seed}"],
                "metrics": {"eval_cost_ratio_baseline_over_ours": 3 * size ** 1.5
                            * (1.1 if seed else 1 / 1.1)}}))
    fits = {"growth": {"metric": "eval_cost_ratio_baseline_over_ours",
                       "over": "dataset.training_size", "threshold": 30}}
    summarize_sweep(sweep, fits=fits)
    fitted = json.loads((sweep / "fits.json").read_text())
    # the mean over seeds is 3 * size^1.5 * (1.1 + 1/1.1) / 2: the same factor at every size
    assert fitted["growth"]["slope"] == pytest.approx(1.5)
    assert fitted["growth"]["first_reaching"] == 8  # 3 * 4^1.5 = 24 < 30 <= 3 * 8^1.5
    assert "growth = 1.5: the log-log slope" in (sweep / "summary.md").read_text()
    assert "it reaches 30 at dataset.training_size=8" in (sweep / "summary.md").read_text()
    assert loglog_slopes([{"dataset.training_size": "4", "r_mean": 1.0}],
                         {"g": {"metric": "r", "over": "dataset.training_size"}}) == {}
    publish(sweep, "training_size", docs)
    assert ("eval_cost_ratio_growth_exponent = 1.5" in regimes("directsynth", docs)
            and "it stays below 100 (at most 68" in regimes("directsynth", docs))


def _processes_mentioning(text: str) -> list[int]:
    """Pids of live processes whose command line contains ``text``."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and text in (proc / "cmdline").read_bytes().decode(
                    errors="replace") and (proc / "stat").read_text().split()[2] != "Z":
                found.append(int(proc.name))
        except OSError:
            continue
    return found


@pytest.mark.slow
def test_sigterm_to_the_reproduce_driver_stops_its_jobs_and_a_rerun_resumes(tmp_path):
    """SIGTERM to the driver's pid alone (as a scheduler or `kill <pid>` sends it): its
    multirun and job processes stop, the job says interrupted, the driver says how to
    resume; the rerun finishes the job once (no row of curves.csv twice)."""
    folder = tmp_path / "reproduce"
    command = [sys.executable, "-m", "experiments.runner.reproduce", "--papers", "ditherq",
               "--seeds", "0", "--dir", str(folder), "--scale", "smoke", "--jobs", "1",
               "protocol.n_trials=400", "dataset.dim=1024", "protocol.bits=[1,2,3,4]"]
    driver = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "HYDRA_FULL_ERROR": "0"})
    curves = folder / "ditherq" / "seed0" / "curves.csv"
    deadline = time.monotonic() + 120
    while not (curves.exists() and len(curves.read_text().splitlines()) >= 3):
        assert time.monotonic() < deadline and driver.poll() is None, "the job never started"
        time.sleep(0.2)
    os.kill(driver.pid, signal.SIGTERM)
    out, err = driver.communicate(timeout=60)
    assert driver.returncode == 143, err[-2000:]
    assert "rerun the same command to resume" in err
    time.sleep(2)  # the jobs notice their launcher is gone within a second
    assert _processes_mentioning(str(folder)) == []
    failed = json.loads((folder / "ditherq" / "seed0" / "failed.json").read_text())
    assert failed["interrupted"] is True
    again = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert (folder / "ditherq" / "seed0" / "results.json").is_file()
    assert not (folder / "ditherq" / "seed0" / "failed.json").exists()
    rows = curves.read_text().splitlines()
    assert len(rows) == len(set(rows))


@pytest.fixture
def small_disk(tmp_path):
    """``small_disk(size)``: a folder on a tmpfs of that size (root only), unmounted after."""
    mounted = []

    def mount(size: str) -> Path:
        if os.geteuid() != 0 or shutil.which("mount") is None:
            pytest.skip("mounting a tmpfs needs root")
        folder = tmp_path / f"disk-{size}"
        folder.mkdir()
        if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                          capture_output=True).returncode:
            pytest.skip("a tmpfs cannot be mounted here")
        mounted.append(folder)
        return folder

    yield mount
    for folder in mounted:
        subprocess.run(["umount", str(folder)], capture_output=True)


@pytest.mark.slow
@pytest.mark.parametrize("size", ["16k", "64k"])
def test_a_full_disk_is_one_line_naming_the_folder_and_its_free_space(small_disk, size):
    """16 KiB: Hydra's own config files do not fit; 64 KiB: the run's tables and figures do
    not. Either way one error line, exit code 2, no half-written JSON."""
    disk = small_disk(size)
    proc = _cli("+paper=tps", f"paths.output_dir={disk}", f"hydra.run.dir={disk / 'run'}")
    output = proc.stdout + proc.stderr
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert proc.returncode == 2, output[-2000:]
    assert len(errors) == 1 and "no space left on the device while writing" in errors[0]
    assert str(disk / "run") in errors[0] and "MiB free on" in errors[0]
    assert "Traceback" not in output and "During handling" not in output
    assert not list(disk.rglob("*.tmp"))
    if size == "64k":  # the run started: it says why it failed
        assert json.loads((disk / "run" / "failed.json").read_text())["user_error"] is True


def test_a_cache_entry_whose_write_fails_is_never_published(tmp_path):
    """A build that fills the disk half-way leaves no entry and no private folder, and the
    next call builds it again."""
    import errno

    from common.cache import load_or_build

    def build_fails(folder: Path):
        (folder / "weights.bin").write_bytes(b"x" * 10)
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError):
        load_or_build(tmp_path, "model", {"a": 1}, ["common.cache"], build_fails,
                      lambda folder: (folder / "weights.bin").read_bytes())
    assert list((tmp_path / "model").iterdir()) == []
    built = load_or_build(tmp_path, "model", {"a": 1}, ["common.cache"],
                          lambda folder: (folder / "weights.bin").write_bytes(b"ok") and b"ok",
                          lambda folder: (folder / "weights.bin").read_bytes())
    assert built == b"ok" and len(list((tmp_path / "model").iterdir())) == 1
