"""The device check (experiments/plan/device_check.sh) that runs the paper-scale code paths
on an offline GPU machine: its dry run here (tiny shapes, CPU, the local .venv), so the
script cannot rot while no GPU is at hand, and its parts' arithmetic."""

from __future__ import annotations

import math
import os
import re
import subprocess

import pytest

from experiments.plan.device_bundle import MISSING, SOURCE_ONLY
from experiments.plan.device_check import largest_difference, untimed

from .conftest import ROOT


@pytest.mark.slow  # about a minute
def test_the_device_check_runs_dry(tmp_path):
    done = subprocess.run(["bash", "experiments/plan/device_check.sh"], cwd=ROOT,
                          env={**os.environ, "DRY": "1", "OUT": str(tmp_path)},
                          capture_output=True, text=True, timeout=480)
    results = (tmp_path / "device_check.txt").read_text()
    assert done.returncode == 0, results + (tmp_path / "device_check.log").read_text()[-3000:]
    # each part printed what it measured before the next one started
    assert done.stdout.index("qwen3-4b (tiny, cpu)") < done.stdout.index("== presets")
    for line in ("qwen3-0.6b (tiny, cpu): peak not measured off CUDA",
                 "prohind GRPO, Qwen3-0.6B (tiny, cpu):",
                 "mpopd distillation, Qwen3-0.6B student, Qwen3-1.7B teacher (tiny, cpu):",
                 "dpcert scale=smoke on cpu against cpu:",
                 "gscoreset scale=smoke on cpu against cpu:"):
        assert line in results, results
    assert not re.search(r"failed|DIFFERENT", results)


def test_the_documented_device_command_fits_one_call():
    """What docs/paper_scale.md tells to run there, within the 2,000 characters a remote
    command may have, and the bundle it needs named in the Makefile."""
    doc = (ROOT / "docs" / "paper_scale.md").read_text()
    command = "bash experiments/plan/device_check.sh"
    assert command in doc and len(command) < 2000
    assert "device-wheels:" in (ROOT / "Makefile").read_text()
    assert "antlr4-python3-runtime" in SOURCE_ONLY and {"hydra-core", "omegaconf", "datasets",
                                                        "trl"} <= set(MISSING)


def test_cpu_and_device_metrics_are_compared_without_timing_keys():
    a = {"acc": 0.5, "n": 10, "seconds_total": 3.0, "both_nan": math.nan}
    b = {"acc": 0.5000001, "n": 10, "seconds_total": 9.0, "both_nan": math.nan}
    gap, key = largest_difference(untimed(a), untimed(b))
    assert key == "acc" and gap == pytest.approx(2e-7, rel=1e-3)
    assert largest_difference({"x": 1.0}, {"x": math.nan})[1] == "x"  # a NaN on one side shows
