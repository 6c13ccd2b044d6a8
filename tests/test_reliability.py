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
