"""Every shell command in README.md and docs/*.md code blocks, run: at smoke size in a
temporary folder where it runs here; a command that needs a GPU, the network, a cluster or a
data folder must fail in one ``error:`` line within 10 s of its own CPU time (under a
minute of wall time, so no network retries); the few that cannot run inside the
suite name the test that runs the same code."""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import ROOT
from .smoke import SMOKE

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# a command that cannot work on this machine: it must say so in one line, fast
NEEDS_ELSEWHERE = re.compile(
    r"device=cuda|submitit_slurm|scale=paper|model=(qwen|llama|wan)|dataset=(mnist|cifar10|"
    r"gsm8k|math500|videophy2|algonauts2023)|openml:|proposer=endpoint|device_check\.sh")
# commands the suite cannot run inside itself, with the test that runs the same code
COVERED_ELSEWHERE = {
    "make test": "the suite itself",
    "make readme": "publishes docs/reproduction.json and the README table: test_report's "
                   "publish test runs the same code on a fixture, and the freshness test "
                   "checks the published table",
    "make device-wheels": "downloads wheels from PyPI into .device/: test_device_check checks "
                          "the list it downloads",
    "make device-check-dry": "test_device_check.test_the_device_check_runs_dry",
    "make summary SWEEP_DIR=outputs/sweeps/gcad/<timestamp> PUBLISH=drift_regime":
        "publishes into docs/sweeps/: test_runner's published-sweep test runs the same code",
}


def documented_commands() -> list[tuple[str, str]]:
    """(file, command) for every command line of the docs' shell code blocks (continuation
    lines joined, comments dropped)."""
    out = []
    for path in DOCS:
        for block in re.findall(r"```(?:bash|sh|shell)?\n(.*?)```", path.read_text(), re.S):
            text = block.replace("\\\n", " ")
            for line in text.splitlines():
                command = line.split(" #")[0].strip()
                if command.startswith(("python ", "make ", "bash ")):
                    out.append((path.name, " ".join(command.split())))
    return out


COMMANDS = documented_commands()


def plan(command: str, tmp: Path) -> tuple[str, list[list[str]]]:
    """("skip", [[reason]]) | ("fails", [argv]) | ("runs", [argv, ...]) for one documented
    command (a command that reads another's output runs after it)."""
    if command in COVERED_ELSEWHERE or command.split()[:2] == ["make", "test"]:
        return "skip", [[COVERED_ELSEWHERE.get(command, "the suite itself")]]
    words = command.split()
    if words[0] == "python":
        words[0] = sys.executable
    if NEEDS_ELSEWHERE.search(command):
        return "fails", [_smoke_run(words, tmp) if words[1:2] == ["run.py"] else words]
    reproduce = ["make", "reproduce", "PAPERS=tps", "SEEDS=0", "SCALE=smoke",
                 f"REPRODUCE_DIR={tmp / 'reproduce'}"]
    sweep = ["make", "sweep", "PAPER=ditherq", "SWEEP=bits",
             f"ARGS=scale=smoke hydra.sweep.dir={tmp / 'sweep'} paths.cache_dir={tmp / 'c'}"]
    if words[1:2] == ["run.py"]:
        return "runs", [_smoke_run(words, tmp)]
    if words[:2] == ["make", "run"]:
        return "runs", [words + [f"ARGS=scale=smoke hydra.run.dir={tmp / 'run'} "
                                 f"paths.cache_dir={tmp / 'cache'}"]]
    if words[:2] == ["make", "reproduce"]:  # the same target over one cheap paper and seed
        papers = next((w.split("=")[1] for w in words if w.startswith("PAPERS=")), "tps")
        return "runs", [[*reproduce[:2], f"PAPERS={papers.split(',')[0]}", *reproduce[3:]]]
    if words[:2] == ["make", "report"]:
        return "runs", [reproduce, words + [f"REPORT_FROM={tmp / 'reproduce'}",
                                            f"REPORT_OUT={tmp / 'report'}"]]
    if words[:2] == ["make", "sweep"] and any(w.startswith("SWEEP=") for w in words):
        return "runs", [words + [sweep[-1]]]
    if words[:2] == ["make", "summary"]:
        return "runs", [sweep, ["make", "summary", f"SWEEP_DIR={tmp / 'sweep'}"]]
    return "runs", [words]


def _smoke_run(words: list[str], tmp: Path) -> list[str]:
    """``run.py`` at its paper's smoke size, in ``tmp`` (a printing command as it is, one
    that must fail at its own settings)."""
    if "--cfg" in words or "--info" in words:
        return words
    key = next(w.split("=", 1)[1] for w in words if w.startswith("+paper="))
    extra = [f"paths.cache_dir={tmp / 'cache'}"]
    extra.append(f"hydra.sweep.dir={tmp / 'sweep'}" if "-m" in words
                 else f"hydra.run.dir={tmp / 'run'}")
    if key in SMOKE and not any(w.startswith("scale=") for w in words) and \
            not NEEDS_ELSEWHERE.search(" ".join(words)):
        extra.append("scale=smoke")
    return words + extra


def test_every_documented_command_is_run_or_covered(tmp_path):
    """The classification itself: every command has a plan, and what is covered elsewhere
    says where (the docs' command list cannot grow a command no test runs)."""
    assert len(COMMANDS) >= 25
    plans = [plan(c, tmp_path)[0] for _, c in COMMANDS]
    assert plans.count("skip") <= len(COVERED_ELSEWHERE) + 2
    assert {"runs", "fails"} <= set(plans)


def _children_cpu_seconds() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def _env() -> dict[str, str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "WANDB_MODE": "disabled", "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


@pytest.mark.slow  # each runs a paper at smoke size or a make target: make test-slow
@pytest.mark.parametrize("where,command", COMMANDS, ids=[c[:60] for _, c in COMMANDS])
def test_a_documented_command_works_or_fails_in_one_line(where, command, tmp_path):
    kind, steps = plan(command, tmp_path)
    if kind == "skip":
        pytest.skip(steps[0][0])
    for argv in steps:
        start, cpu_start = time.perf_counter(), _children_cpu_seconds()
        done = subprocess.run(argv, cwd=ROOT, env=_env(), capture_output=True, text=True,
                              timeout=600)
        seconds, cpu_seconds = time.perf_counter() - start, _children_cpu_seconds() - cpu_start
        output = done.stdout + done.stderr
        if kind == "runs":
            assert done.returncode == 0, f"{where}: {' '.join(argv)}: {output[-3000:]}"
    if kind == "fails":
        errors = [line for line in output.splitlines() if line.startswith(("error:", "  "))]
        assert done.returncode != 0, f"{where}: {command} ran here: {output[-2000:]}"
        # CPU time, not wall time, bounds the work: a loaded machine must not fail the test
        assert cpu_seconds < 10 and seconds < 60 and "Traceback" not in output, \
            f"{where}: {command}: {output[-3000:]}"
        assert any(line.startswith("error:") for line in errors) or "did not install" in \
            output, output[-2000:]
