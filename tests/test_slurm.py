"""The cluster path on a real one-node Slurm (make test-slurm, as root): a multirun through
sbatch, one training job as two Slurm tasks, a preempted job that resumes, a failing job, and
``make reproduce`` on the cluster. Each test checks the files a user would look at."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import ROOT
from .slurm_cluster import cancel_all, job_logs, missing, one_node_cluster, queue
from .smoke import DITHERQ_NPY, SMOKE, good_and_bad_vectors

pytestmark = pytest.mark.slurm

SLURM = ["hydra/launcher=submitit_slurm", "hydra.launcher.partition=debug"]
# the tiny cfbeam run of the local DDP test (test_runner.py), trained by two processes
CFBEAM_DDP = ["+paper=cfbeam", "trainer=ddp", "trainer.devices=2", "device=cpu",
              "dataset.train_examples=400", "model.steps=20", "dataset.max_digits=2",
              "model.min_held_out_accuracy=null", "dataset.horizons=[2]",
              "dataset.prompts_per_horizon=2", "protocol.tree.coverages=[4,8]",
              "protocol.tree.trials=10", "protocol.tree.reward_noise=[0.0]"]
# a ditherq run of about ten seconds that streams curves.csv as it goes
DITHERQ_LONGER = [*SMOKE["ditherq"], "protocol.n_trials=400", "dataset.dim=1024",
                  "protocol.bits=[1,2,3,4]"]


@pytest.fixture(scope="module")
def cluster():
    reason = missing()
    if reason:
        pytest.fail(reason)
    with one_node_cluster() as env:
        yield env


@pytest.fixture(autouse=True)
def empty_queue(cluster):
    """Each test starts on an idle node, whatever the one before it left running."""
    yield
    cancel_all(cluster)


def _run(command: list[str], env: dict, jobs: Path | None, extra_env: dict | None = None,
         timeout: int = 300) -> subprocess.CompletedProcess:
    """Run ``command`` against the cluster; a timeout fails the test with the jobs' logs
    under ``jobs`` (where the job stopped, and Slurm's reason for what still waits)."""
    try:
        return subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                              timeout=timeout, env={**os.environ, **env, **(extra_env or {})})
    except subprocess.TimeoutExpired:
        pytest.fail(f"{' '.join(command[:6])} ... timed out after {timeout} s\n"
                    + (job_logs(jobs, env) if jobs else ""))


def _cli(env: dict, *args: str, extra_env: dict | None = None) -> subprocess.CompletedProcess:
    jobs = next((Path(a.split("=", 1)[1]) for a in args
                 if a.startswith(("hydra.sweep.dir=", "hydra.run.dir="))), None)
    return _run([sys.executable, "run.py", *args], env, jobs, extra_env)


def _same_metrics(a: dict, b: dict) -> list[str]:
    """Keys whose values differ, wall-clock metrics aside."""
    return [k for k in a.keys() | b.keys()
            if not k.startswith(("time_", "seconds_")) and a.get(k) != b.get(k)]


def test_a_multirun_goes_through_sbatch(cluster, tmp_path):
    sweep = tmp_path / "sweep"
    proc = _cli(cluster, "-m", "+paper=tps", "seed=0,1", *SLURM, f"hydra.sweep.dir={sweep}")
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    for seed in (0, 1):
        results = json.loads((sweep / f"{seed}_seed={seed}" / "results.json").read_text())
        assert results["seed"] == seed and results["processes"]["world_size"] == 1
    assert len(list(sweep.glob(".submitit/*/*_submission.sh"))) == 1  # one sbatch array
    assert "2 jobs, 1 configurations, 0 failed" in output
    assert (sweep / "summary.md").is_file() and (sweep / "summary.csv").is_file()
    # no accounting on this cluster: said once, and the states come from squeue
    assert output.count("keeps no job accounting") == 1 and "Bypassing sacct" not in output
    assert queue(cluster) == []


def test_one_training_job_as_two_slurm_tasks(cluster, tmp_path):
    """Slurm starts both processes (submitit, two tasks on the node); Lightning reads rank
    and world size from Slurm's environment; rank 0 alone writes the run folder, the cache
    entry and the W&B run; the weights and metrics equal those of the same run started by
    Lightning's own launcher."""
    sweep, cache = tmp_path / "sweep", tmp_path / "cache"
    proc = _cli(cluster, "-m", *CFBEAM_DDP, f"paths.cache_dir={cache}", "logger=wandb", *SLURM,
                "hydra.launcher.tasks_per_node=2", f"hydra.sweep.dir={sweep}",
                extra_env={"WANDB_MODE": "offline"})
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:] + job_logs(sweep, cluster)
    (job,) = [p.parent for p in sweep.glob("*/results.json")]
    assert sorted(p.name for p in sweep.glob("*/failed.json")) == []
    results = json.loads((job / "results.json").read_text())
    assert results["processes"] == {"writer_rank": 0, "world_size": 2}
    logs = {p.name.split("_")[1]: p.read_text() for p in sweep.glob(".submitit/*/*_log.out")}
    assert sorted(logs) == ["0", "1"]  # both tasks ran, neither stopped early
    assert not [rank for rank, text in logs.items() if "stopped:" in text], logs
    (entry,) = (cache / "tiny-lm").iterdir()  # one published cache entry
    slurm_checksums = json.loads((entry / "training_report.json").read_text())[
        "replica_checksums"]
    assert len(slurm_checksums) == 2 and slurm_checksums[0] == slurm_checksums[1]
    # rank 0's files, none removed by rank 1 (which once cleared the folder as it started)
    assert {"config_resolved.yaml", "metrics.json", "run.log"} <= {p.name for p in job.iterdir()}
    assert len(list(tmp_path.rglob("offline-run-*"))) == 1  # one W&B run
    local_dir, local_cache = tmp_path / "local", tmp_path / "local_cache"
    local = _cli(cluster, *CFBEAM_DDP, f"paths.cache_dir={local_cache}",
                 f"hydra.run.dir={local_dir}")
    assert local.returncode == 0, local.stderr[-3000:]
    (local_entry,) = (local_cache / "tiny-lm").iterdir()
    assert json.loads((local_entry / "training_report.json").read_text())[
        "replica_checksums"] == slurm_checksums
    assert _same_metrics(results["metrics"],
                         json.loads((local_dir / "metrics.json").read_text())) == []
    assert queue(cluster) == []


def test_a_preempted_job_finishes_on_its_second_start(cluster, tmp_path):
    """SIGUSR2 mid-run (submitit's preemption signal): submitit requeues the job, the
    second start begins from a clean folder and finishes; one set of results, no row of
    curves.csv twice, no failed.json, the metrics of an uninterrupted run."""
    sweep = tmp_path / "sweep"
    launcher = subprocess.Popen([sys.executable, "run.py", "-m", *DITHERQ_LONGER, *SLURM,
                                 f"hydra.sweep.dir={sweep}"], cwd=ROOT, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                env={**os.environ, **cluster})
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # mid-run: curves.csv has rows
        curves = list(sweep.glob("0_*/curves.csv"))
        if curves and len(curves[0].read_text().splitlines()) >= 3:
            break
        time.sleep(0.2)
    else:
        launcher.kill()
        pytest.fail("the job never started streaming curves.csv\n" + job_logs(sweep, cluster))
    (job_id,) = [line.split()[0] for line in queue(cluster)]
    subprocess.run(["scancel", "--signal=USR2", job_id], env={**os.environ, **cluster},
                   check=True)
    output = launcher.communicate(timeout=240)[0]
    assert launcher.returncode == 0, output[-3000:]
    (job,) = [p.parent for p in sweep.glob("0_*/results.json")]
    assert not (job / "failed.json").exists()
    rows = (job / "curves.csv").read_text().splitlines()
    assert len(rows) == len(set(rows)) > 3
    log = "".join(p.read_text() for p in sweep.glob(".submitit/*/*_log.out"))
    assert "Caught signal SIGUSR2" in log and log.count("Starting with JobEnvironment") == 2
    assert "1 jobs, 1 configurations, 0 failed" in output
    uninterrupted = _cli(cluster, *DITHERQ_LONGER, f"hydra.run.dir={tmp_path / 'plain'}")
    assert uninterrupted.returncode == 0, uninterrupted.stderr[-2000:]
    assert _same_metrics(json.loads((job / "metrics.json").read_text()),
                         json.loads((tmp_path / "plain" / "metrics.json").read_text())) == []
    assert queue(cluster) == []


def test_a_failing_job_is_reported_in_the_summary(cluster, tmp_path):
    sweep = tmp_path / "sweep"
    proc = _cli(cluster, "-m", *DITHERQ_NPY, good_and_bad_vectors(tmp_path), *SLURM,
                f"hydra.sweep.dir={sweep}")
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2, output[-3000:]  # the bad file fails its job as it runs
    assert len(list(sweep.glob("*/results.json"))) == 1
    (failed,) = sweep.glob("*/failed.json")
    assert "1 of 2 jobs failed" in output and str(failed) in output
    assert "1 job(s) failed" in (sweep / "summary.md").read_text()
    assert queue(cluster) == []


def test_make_reproduce_on_the_cluster_resumes(cluster, tmp_path):
    folder = tmp_path / "reproduce"
    command = ["make", "-s", "reproduce", "LAUNCHER=submitit_slurm", "PAPERS=tps,rankcomp",
               "SEEDS=0", f"REPRODUCE_DIR={folder}"]
    first = _run(command, cluster, folder)
    assert first.returncode == 0, (first.stdout + first.stderr)[-3000:]
    written = {p: p.stat().st_mtime_ns for p in folder.glob("*/seed0/results.json")}
    assert sorted(p.parent.parent.name for p in written) == ["rankcomp", "tps"]
    again = _run(command, cluster, folder)
    assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
    logs = "".join(p.read_text() for p in folder.rglob(".submitit/*/*_log.out"))
    assert logs.count("skipping:") == 2  # the second run's jobs found their results
    assert {p: p.stat().st_mtime_ns for p in folder.glob("*/seed0/results.json")} == written
    assert queue(cluster) == []
