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
