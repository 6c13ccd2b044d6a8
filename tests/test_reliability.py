"""Faults a long study meets (a folder of another configuration, a corrupt file, a second
writer): each ends in one line with the right exit code, and nothing published is lost."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from .conftest import ROOT


def run_py(*words: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "run.py", *words], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "HYDRA_FULL_ERROR": "0"})


@pytest.mark.slow
def test_sweep_jobs_refused_by_a_folder_of_another_configuration_count_as_failed(tmp_path):
    """Three configurations sent to one folder: the first runs, the other two are refused
    (the folder holds the first's results) and the sweep says so and exits 2; a rerun of
    the sweep counts its own refusals, not the first run's."""
    sweep = tmp_path / "sweep"
    words = ["-m", "+paper=tps", "method.gamma=0.5,0.7,0.9", "hydra.sweep.subdir=one_folder",
             f"hydra.sweep.dir={sweep}", f"paths.cache_dir={tmp_path / 'cache'}"]
    done = run_py(*words)
    output = done.stdout + done.stderr
    assert done.returncode == 2, output[-2000:]
    assert "2 of 3 jobs failed" in output
    refused = sorted((sweep / "refused").glob("*.json"))
    assert [p.name for p in refused] == ["job1.json", "job2.json"]
    assert "another run" in json.loads(refused[0].read_text())["error"]
    kept = json.loads((sweep / "one_folder" / "results.json").read_text())
    assert "method.gamma=0.5" in kept["overrides"]  # the first configuration's results stay
    again = run_py(*words[:2], "method.gamma=0.5", *words[3:])  # the finished one: skipped
    assert again.returncode == 0, (again.stdout + again.stderr)[-2000:]
    assert not (sweep / "refused").exists()


@pytest.mark.parametrize("setting,says", [
    ("paths.output_dir=", "paths.output_dir is empty"),
    ("paths.cache_dir=null", "paths.cache_dir is empty"),
    ("hydra.run.dir=/tmp/" + "x" * 300, "has 300 bytes, over the file system's 255"),
])
def test_an_empty_or_impossible_folder_is_refused_before_anything_is_written(setting, says):
    from common.errors import UserError
    from experiments.runner.cli import prepare

    with pytest.raises(UserError, match=says):
        prepare(["+paper=tps", setting])


def _published_copy(tmp_path, monkeypatch):
    """A copy of docs/reproduction.json and the README under ``tmp_path``, which publishing
    writes instead of the checkout's."""
    import shutil

    from experiments.report import __main__ as report

    (tmp_path / "docs").mkdir()
    shutil.copy(ROOT / "docs" / "reproduction.json", tmp_path / "docs" / "reproduction.json")
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    monkeypatch.setattr(report, "ROOT", tmp_path)
    monkeypatch.setattr(report, "PAGES", tmp_path / "docs" / "papers")
    return report


def test_publishing_from_fewer_finished_runs_than_the_published_ones_is_refused(
        tmp_path, monkeypatch, capsys):
    report = _published_copy(tmp_path, monkeypatch)
    before = (tmp_path / "docs" / "reproduction.json").read_bytes()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert report.main([str(empty), "--out", str(tmp_path / "report"), "--publish"]) == 1
    assert "nothing published" in capsys.readouterr().err
    assert (tmp_path / "docs" / "reproduction.json").read_bytes() == before


def test_publishing_writes_all_or_nothing(tmp_path, monkeypatch):
    """A failure while the README table is made (here: a published sweep that cannot be
    read) leaves docs/reproduction.json as it was."""
    from common.errors import UserError

    report = _published_copy(tmp_path, monkeypatch)
    target = tmp_path / "docs" / "reproduction.json"
    before = target.read_bytes()
    out = tmp_path / "report"
    out.mkdir()
    (out / "summary.json").write_text(json_dumps_papers(before))

    def unreadable(published):
        raise UserError("docs/sweeps/x.json cannot be read")

    monkeypatch.setattr(report, "readme_table", unreadable)
    with pytest.raises(UserError, match="cannot be read"):
        report.publish(tmp_path / "runs", out, None, allow_fewer=False)
    assert target.read_bytes() == before


def json_dumps_papers(published: bytes) -> str:
    return json.dumps(json.loads(published)["papers"])


def test_a_truncated_published_sweep_is_named(tmp_path):
    from common.errors import UserError
    from experiments.runner.sweep_summary import regimes

    (tmp_path / "tps_demo.json").write_text('{"sweep": "demo", "rows": [')
    with pytest.raises(UserError, match="tps_demo.json cannot be read"):
        regimes("tps", tmp_path)


def test_a_report_folder_that_cannot_be_written_is_one_line_before_the_work(tmp_path, capsys):
    """(A file where the folder's parent should be: not writable even for root.)"""
    from experiments.report.__main__ import main

    (tmp_path / "a_file").write_text("")
    runs = tmp_path / "runs"
    runs.mkdir()
    assert main([str(runs), "--out", str(tmp_path / "a_file" / "report")]) == 1
    assert "not writable" in capsys.readouterr().err
    assert not (tmp_path / "report").exists()


def test_a_copied_seed_folder_counts_once_and_is_named(tmp_path):
    import shutil

    from experiments.report.summary import collect

    from .test_report import report_fixture

    folder = report_fixture(tmp_path / "runs")
    for seed in (0, 1):
        shutil.copytree(folder / "tps" / f"seed{seed}", folder / "copy" / f"seed{seed}")
    found = collect(folder)["tps"]
    assert [r["seed"] for r in found["runs"]] == [0, 1]
    assert sorted(d["seed"] for d in found["duplicates"]) == [0, 1]


@pytest.mark.parametrize("content", ["", '{"paper": "tps", "metr', "[1, 2]", '{"paper": "tps"}'])
def test_a_run_folder_with_an_unreadable_results_json_is_set_aside_and_run_again(
        tmp_path, content):
    from .conftest import run_paper
    from .smoke import SMOKE

    run = tmp_path / "run"
    run.mkdir()
    (run / "results.json").write_text(content)
    metrics = run_paper([*SMOKE["tps"], f"paths.cache_dir={tmp_path / 'cache'}"], run)
    assert metrics and json.loads((run / "results.json").read_text())["metrics"] == metrics
    assert [p.read_text() for p in run.glob("results.json.corrupt-*")] == [content]


def test_a_null_metric_in_one_run_does_not_stop_the_report(tmp_path):
    """A headline metric written as null (NaN) at one seed: the report is written and the
    headline is the mean over the seeds that have it."""
    from experiments.report.__main__ import main

    from .test_report import report_fixture

    folder = report_fixture(tmp_path / "runs")
    path = folder / "tps" / "seed0" / "results.json"
    result = json.loads(path.read_text())
    result["metrics"]["tps_gap_constant_vs_oracle"] = None
    path.write_text(json.dumps(result))
    assert main([str(folder), "--out", str(tmp_path / "report")]) == 0
    tps = next(p for p in json.loads((tmp_path / "report" / "summary.json").read_text())
               if p["key"] == "tps")
    assert tps["headline"]["seeds"] == 1


@pytest.mark.parametrize("marker", ["", '{"files": {"a', "[]"])
def test_a_truncated_cache_marker_rebuilds_the_entry(tmp_path, marker):
    from common.cache import COMPLETE, load_or_build

    builds = []

    def build(folder):
        builds.append(folder)
        (folder / "payload.txt").write_text("made")
        return "built"

    def load(folder):
        return (folder / "payload.txt").read_text()

    assert load_or_build(tmp_path, "demo", {"a": 1}, [], build, load) == "built"
    entry = next((tmp_path / "demo").iterdir())
    (entry / COMPLETE).write_text(marker)
    assert load_or_build(tmp_path, "demo", {"a": 1}, [], build, load) == "built"
    assert len(builds) == 2
    assert load_or_build(tmp_path, "demo", {"a": 1}, [], build, load) == "made"  # whole again


def test_a_corrupt_timing_record_is_set_aside_not_replaced(tmp_path, capsys):
    from experiments.runner.reproduce import record_timing

    record_timing(tmp_path, ["tps"], "0", 1.5, {"tps": 0.1})
    record_timing(tmp_path, ["tps"], "1", 2.5, {"tps": 0.2})
    assert [r["wall_min"] for r in json.loads((tmp_path / "timing.json").read_text())["runs"]
            ] == [1.5, 2.5]
    (tmp_path / "timing.json").write_text('{"runs": [{"wall')
    record_timing(tmp_path, ["tps"], "2", 3.5, {"tps": 0.3})
    assert "cannot be read" in capsys.readouterr().err
    assert [p.read_text() for p in tmp_path.glob("timing.json.corrupt-*")] == ['{"runs": [{"wall']


def test_a_sweep_summary_over_several_papers_has_a_row_per_paper(tmp_path):
    import csv

    from experiments.runner.sweep_summary import summarize_sweep

    for paper in ("tps", "rankcomp"):
        for seed in (0, 1):
            run = tmp_path / paper / f"seed{seed}"
            run.mkdir(parents=True)
            (run / "results.json").write_text(json.dumps({
                "paper": paper, "seed": seed, "metrics": {"m": float(seed)},
                "overrides": [f"+paper={paper}", f"seed={seed}"]}))
    rows = list(csv.DictReader((summarize_sweep(tmp_path)).open()))
    assert sorted((r["paper"], r["n_seeds"]) for r in rows) == [("rankcomp", "2"), ("tps", "2")]


@pytest.mark.parametrize("words,says", [
    (["--papers", "tsp"], "unknown paper 'tsp'; did you mean tps?"),
    (["--papers", ""], "no paper given"),
    (["--papers", "tps", "--seeds", "a"], "'a' is not a seed"),
    (["--papers", "tps", "--jobs", "0"], "at least one job"),
    (["--papers", "tps", "--dir", "a,b"], "a folder name without quotes, commas"),
    (["--papers", "tps", "--study", "nope"], "invalid choice: 'nope'"),
])
def test_make_reproduce_refuses_bad_variables_in_one_line(words, says, tmp_path, capsys):
    from experiments.runner.reproduce import main

    try:
        code = main(words)
    except SystemExit as exit_:  # argparse's own checks
        code = exit_.code
    err = capsys.readouterr().err
    assert code == 1 and says in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("make_folder,publish,says", [
    (None, False, "no sweep to summarize"),
    ("missing", False, "is not a folder"),
    ("empty", True, "no finished job"),
    ("corrupt", True, "corrupt results.json"),
    ("corrupt", False, None),  # rebuilt from the readable job, the corrupt one named: exit 1
])
def test_make_summary_ends_in_one_line(tmp_path, capsys, make_folder, publish, says):
    from experiments.runner.sweep_summary import main

    folder = tmp_path / "sweep"
    if make_folder in ("empty", "corrupt"):
        (folder / "job").mkdir(parents=True)
    if make_folder == "corrupt":
        (folder / "job" / "results.json").write_text('{"paper": "tp')
        (folder / "job2").mkdir()
        (folder / "job2" / "results.json").write_text(json.dumps(
            {"paper": "tps", "seed": 0, "metrics": {"m": 1.0}, "overrides": ["+paper=tps"]}))
    argv = ([] if make_folder is None else [str(folder)]) + (
        ["--publish", "demo"] if publish else [])
    assert main(argv) == 1
    printed = capsys.readouterr()
    if says is None:
        assert "corrupt: " in printed.out and (folder / "summary.csv").is_file()
        return
    err = printed.err
    assert says in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.slow
def test_a_second_writer_in_a_run_folder_is_refused_in_one_line(tmp_path):
    """While a run holds its folder, a second run there is refused (exit 1, one line) and
    leaves the first's files alone; the lock dies with its holder."""
    import fcntl

    run = tmp_path / "run"
    run.mkdir()
    holder = os.open(run, os.O_RDONLY | os.O_DIRECTORY)  # what a live run holds
    fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
    (run / "config_resolved.yaml").write_text("the first run's\n")
    try:
        done = run_py("+paper=tps", f"hydra.run.dir={run}", f"paths.cache_dir={tmp_path / 'c'}")
    finally:
        os.close(holder)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 1 and len(errors) == 1 and "in use by a run" in errors[0]
    assert (run / "config_resolved.yaml").read_text() == "the first run's\n"
    assert not (run / "results.json").exists()
    again = run_py("+paper=tps", f"hydra.run.dir={run}", f"paths.cache_dir={tmp_path / 'c'}")
    assert again.returncode == 0, again.stderr[-2000:]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_the_multirun_of_make_reproduce_ends_when_its_driver_is_killed(tmp_path):
    """SIGKILL to the driver (no handler runs) still ends the multirun it started: no
    orphan keeps writing the run folders a rerun is about to use."""
    import signal
    import time

    pid_file = tmp_path / "child.pid"
    driver = subprocess.Popen([sys.executable, "-c", (
        "import subprocess, sys, time\n"
        "from experiments.runner.reproduce import _end_with_parent\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],"
        " preexec_fn=_end_with_parent)\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
        "time.sleep(60)\n")], cwd=ROOT)
    for _ in range(100):
        if pid_file.exists() and pid_file.read_text():
            break
        time.sleep(0.1)
    child = int(pid_file.read_text())
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    for _ in range(50):
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(child, signal.SIGKILL)
    pytest.fail("the child outlived its killed driver")


def test_an_unreachable_wandb_server_means_offline_within_seconds(monkeypatch):
    """An API key and WANDB_MODE=online but no server answering (here: a closed port on
    this machine): offline at once instead of wandb.init blocking for about 90 s."""
    import socket
    import time

    from experiments.runner.wandb_logger import choose_mode

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{port}")
    start = time.perf_counter()
    assert choose_mode("online") == "offline"
    assert time.perf_counter() - start < 5


def test_skipped_results_made_by_other_code_are_named(tmp_path, caplog):
    """A finished job is skipped when run again; when its record's commit differs from the
    checkout in files the paper's run imports, a warning says so."""
    import logging

    from .conftest import run_paper
    from .smoke import SMOKE

    run = tmp_path / "run"
    overrides = [*SMOKE["tps"], f"paths.cache_dir={tmp_path / 'cache'}"]
    run_paper(overrides, run)
    record = json.loads((run / "results.json").read_text())
    record["git_sha"] = "d121551947db7665bb3e54577c1d31b6c2d00eb1"  # before this check existed
    (run / "results.json").write_text(json.dumps(record))
    with caplog.at_level(logging.WARNING, logger="paperlab"):
        run_paper(overrides, run)
    assert "its results are not this code's" in caplog.text


def test_a_users_config_folder_adds_options_the_hydra_way(tmp_path):
    """``--config-dir D`` puts D on the search path: ``D/method/mine.yaml`` is
    ``method=mine``; a file that is not YAML is one line naming it; --config-name (which
    would replace paperlab's root config) is refused in one line saying what to do."""
    from common.errors import UserError
    from experiments.runner.cli import prepare

    (tmp_path / "method").mkdir()
    mine = (ROOT / "conf" / "paper" / "sufexplain" / "method" / "sufexplain.yaml").read_text()
    (tmp_path / "method" / "mine.yaml").write_text(mine.replace("edges: 5", "edges: 3"))
    argv = prepare(["+paper=sufexplain", "method=mine", "--config-dir", str(tmp_path)])
    assert any(a.startswith("hydra.searchpath=") and str(tmp_path) in a for a in argv)
    (tmp_path / "method" / "broken.yaml").write_text("name: sufexplain\nedges: [3\n")
    with pytest.raises(UserError, match=r"broken.yaml, line \d+ is not valid YAML"):
        prepare(["+paper=sufexplain", "method=broken", "--config-dir", str(tmp_path)])
    with pytest.raises(UserError, match="add --config-dir D method=mine"):
        prepare(["+paper=sufexplain", "--config-dir", str(tmp_path), "--config-name", "x"])


def test_a_hanging_bubblewrap_probe_is_one_line(monkeypatch):
    import subprocess as sp

    from common.errors import UserError
    from methods.directsynth import isolation

    def hang(*args, **kwargs):
        raise sp.TimeoutExpired(args[0], kwargs.get("timeout"))

    monkeypatch.setattr(isolation, "_which", lambda program: "/usr/bin/" + program)
    monkeypatch.setattr(isolation.subprocess, "run", hang)
    isolation.bwrap_available.cache_clear()
    try:
        with pytest.raises(UserError, match="did not build a test sandbox within"):
            isolation.bwrap_available()
    finally:
        isolation.bwrap_available.cache_clear()


def test_a_full_disk_inside_torchs_writer_is_one_line(tmp_path, monkeypatch):
    """torch.save on a full disk raises a RuntimeError from its C++ writer: failed.json says
    'no space left' in one line with the cache folder and its free space."""
    from experiments.runner import job

    from .conftest import run_failing
    from .test_runner import DITHERQ_SMOKE

    def full(metrics):
        raise RuntimeError("[enforce fail at inline_container.cc:603] . PytorchStreamWriter "
                           "failed writing file data/0: file write failed")

    monkeypatch.setattr(job, "clean_metrics", full)
    code, failed = run_failing([*DITHERQ_SMOKE, f"paths.cache_dir={tmp_path / 'cache'}"],
                               tmp_path / "a")
    assert code == 2 and failed["user_error"]
    assert "no space left on the device" in failed["error"] and "MiB free" in failed["error"]
    assert "\n" not in failed["error"] and "enforce fail" not in failed["error"]


@pytest.mark.slow
def test_ctrl_c_during_a_joblib_sweep_is_one_line_and_every_job_records_it(tmp_path):
    """SIGINT to the sweep's whole process group (a terminal's Ctrl-C): exit 130, one
    'rerun the same command' line, no traceback or leaked-semaphore warning, and each
    interrupted job's folder holds failed.json saying interrupted."""
    import signal
    import time

    sweep = tmp_path / "sweep"
    proc = subprocess.Popen(
        [sys.executable, "run.py", "-m", "+paper=ditherq", "protocol.n_trials=100000",
         "seed=0,1", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2",
         f"hydra.sweep.dir={sweep}", f"paths.cache_dir={tmp_path / 'cache'}"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True, env={**os.environ, "HYDRA_FULL_ERROR": "0"},
        # as from a terminal: a test run started in the background of a script inherits an
        # ignored SIGINT, which the sweep would inherit too
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 90
    while len(list(sweep.glob("*/config_resolved.yaml"))) < 2:
        assert time.monotonic() < deadline and proc.poll() is None, "the jobs never started"
        time.sleep(0.2)
    time.sleep(1.0)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 130, err[-2000:]
    assert err.count("rerun the same command to resume") == 1, err[-2000:]
    assert "Traceback" not in err and "leaked semaphore" not in err, err[-2000:]
    for job in sorted(p.parent for p in sweep.glob("*/config_resolved.yaml")):
        failed = json.loads((job / "failed.json").read_text())
        assert failed["interrupted"] and "SIGINT" in failed["error"], (job, failed)


@pytest.mark.slow
def test_wandb_without_home_is_quiet(tmp_path):
    """HOME unset (a batch system's job): W&B's service has no cache folder and printed
    about 20 lines of its own logs; it is given one in the run folder."""
    env = {k: v for k, v in os.environ.items() if k not in ("HOME", "XDG_CACHE_HOME")}
    done = subprocess.run(
        [sys.executable, "run.py", "+paper=tps", "logger=wandb", f"hydra.run.dir={tmp_path / 'r'}",
         f"paths.cache_dir={tmp_path / 'c'}"], cwd=ROOT, capture_output=True, text=True,
        timeout=120, env={**env, "WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-2000:]
    noise = [line for line in (done.stdout + done.stderr).splitlines()
             if " INFO " in line and not line.startswith("[")
             or " ERROR " in line and not line.startswith("[")]
    assert noise == [], noise[:5]
