"""docs/bad_input.md, run: every row's command ends with its exit code and one ``error:``
line holding the row's text, before anything is written for the refused ones."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from .conftest import ROOT

ROW = re.compile(r"^\| `(python run\.py [^`]+)` \| (\d) \| (.+) \|$")
ROWS = [m.groups() for line in (ROOT / "docs" / "bad_input.md").read_text().splitlines()
        if (m := ROW.match(line))]


def test_the_table_has_its_rows():
    assert len(ROWS) >= 15


@pytest.mark.slow
@pytest.mark.parametrize("command,code,says", ROWS, ids=[r[0][14:60] for r in ROWS])
def test_a_bad_input_ends_in_one_line(command, code, says, tmp_path):
    words = command.split()
    words[0] = sys.executable
    folder = f"hydra.sweep.dir={tmp_path / 'sweep'}" if "-m" in words else \
        f"hydra.run.dir={tmp_path / 'run'}"
    done = subprocess.run([*words, folder, f"paths.cache_dir={tmp_path / 'cache'}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HYDRA_FULL_ERROR": "0"})
    output = done.stdout + done.stderr
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert done.returncode == int(code), output[-2000:]
    assert len(errors) == 1 and says in errors[0], output[-2000:]
    assert "Traceback" not in output
    if code == "1":  # refused before anything ran: no folder
        assert not (tmp_path / "run").exists() and not (tmp_path / "sweep").exists()


RUN_TIME_CHECK = re.compile(r"raise UserError\(\s*f?\"((?:method|dataset|protocol)\.\w+)")


def test_every_run_time_check_of_a_setting_is_one_the_page_explains():
    """A setting a paper checks when its run starts (not in the schema) is one of the
    documented checks that cannot be a schema range: a new run-time range check fails here
    until it moves into its schema or the page says why it cannot."""
    page = (ROOT / "docs" / "bad_input.md").read_text().split(
        "## The checks that stay at run time")[1]
    sources = [*(ROOT / "experiments").glob("*.py"), *(ROOT / "methods").rglob("*.py")]
    checked = {m.group(1) for path in sources
               for m in RUN_TIME_CHECK.finditer(path.read_text())}
    assert checked, "the pattern finds the known run-time checks"
    assert {name for name in checked if f"`{name}" not in page} == set()
