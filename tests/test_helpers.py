"""Protocol helpers: rate fits against known rates, the cache's atomicity and rebuilds, jobs
in worker processes."""

from __future__ import annotations

import numpy as np
import pytest

from common.cache import code_version, load_or_build
from experiments.helpers.fits import (
    bootstrap_slope_interval,
    fit_loglog_slope,
    fit_semilog_slope,
    slope_with_interval,
)


def test_slope_fit_recovers_a_known_rate():
    rng = np.random.default_rng(0)
    n = np.array([16, 64, 256, 1024, 4096], dtype=float)
    assert fit_loglog_slope(n, 3 * n**-0.37) == pytest.approx(-0.37)
    assert fit_semilog_slope([1, 2, 3], np.exp([0.5, 1.2, 1.9])) == pytest.approx(0.7)
    errs = 3 * n**-0.37 * np.exp(0.05 * rng.standard_normal((8, len(n))))
    mean, lo, hi = slope_with_interval(n, errs)
    assert lo < -0.37 < hi and hi - lo < 0.1


def test_slope_ignores_points_that_never_reached_the_target():
    assert fit_loglog_slope([1, 2, 4, 8], [1, 4, 16, np.inf]) == pytest.approx(2.0)
    assert np.isnan(fit_loglog_slope([1, 2], [1, np.nan]))


def test_bootstrap_interval_covers_the_true_slope():
    rng = np.random.default_rng(1)
    x = np.array([4.0, 8, 16, 32])
    samples = [x_i**2 * rng.exponential(1.0, 200) for x_i in x]  # mean = x^2
    slope, low, high = bootstrap_slope_interval(x, samples, np.mean, rng, n_boot=300)
    assert low < 2.0 < high and high - low < 0.3
    assert slope == pytest.approx(2.0, abs=0.1)


def test_cache_builds_once_and_rebuilds_broken_entries(tmp_path, caplog):
    builds = []

    def build(folder):
        builds.append(folder)
        (folder / "weights.txt").write_text("42")
        return 42

    def load(folder):
        return int((folder / "weights.txt").read_text())

    config, code = {"a": 1}, ["common.cache"]
    assert load_or_build(tmp_path, "thing", config, code, build, load) == 42
    assert load_or_build(tmp_path, "thing", config, code, build, load) == 42
    assert len(builds) == 1
    entry = next((tmp_path / "thing").iterdir())
    (entry / "weights.txt").write_text("17")  # same size, other bytes: a loader would not see it
    with caplog.at_level("WARNING", logger="paperlab"):
        assert load_or_build(tmp_path, "thing", config, code, build, load) == 42
    assert "corrupted (checksum mismatch: weights.txt)" in caplog.text
    (entry / ".complete").unlink()  # interrupted build: no completion marker
    assert load_or_build(tmp_path, "thing", config, code, build, load) == 42
    assert len(builds) == 3
    load_or_build(tmp_path, "thing", config, ["common.errors"], build, load)  # other code
    assert len(builds) == 4 and len(list((tmp_path / "thing").iterdir())) == 2
    assert not list((tmp_path / "thing").glob(".*tmp*"))


def test_editing_a_builders_source_invalidates_its_entries(tmp_path, monkeypatch):
    source = tmp_path / "made_up_builder.py"
    source.write_text("def make(folder):\n    (folder / 'x').write_text('1')\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import made_up_builder

    def load(folder):
        return int((folder / "x").read_text())

    calls = []

    def build(folder):
        calls.append(1)
        return made_up_builder.make(folder)

    cache = tmp_path / "cache"
    load_or_build(cache, "thing", {}, [made_up_builder], build, load)
    load_or_build(cache, "thing", {}, [made_up_builder], build, load)
    assert len(calls) == 1
    source.write_text(source.read_text() + "# a changed training loop\n")
    load_or_build(cache, "thing", {}, [made_up_builder], build, load)
    assert len(calls) == 2


def test_failed_build_leaves_no_entry(tmp_path):
    def build(folder):
        (folder / "half").write_text("x")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        load_or_build(tmp_path, "thing", {}, ["common.cache"], build, lambda f: None)
    assert not list((tmp_path / "thing").iterdir())


def test_code_version_follows_the_source():
    import common.cache as module

    assert code_version(module) == code_version("common.cache")
    assert code_version(module) != code_version("common.errors")


def test_map_jobs_in_worker_processes_equals_the_sequential_map():
    import operator

    from experiments.helpers.parallel import map_jobs

    jobs = [(k, k + 1) for k in range(5)]
    totals = []

    def progress(items, total):
        totals.append(total)
        return items

    expected = [k * (k + 1) for k in range(5)]
    assert map_jobs(operator.mul, jobs, workers=2, progress=progress) == expected
    assert map_jobs(operator.mul, jobs, workers=1) == expected
    assert totals == [5]


def test_map_jobs_in_a_launchers_worker_runs_in_turn(monkeypatch):
    """A joblib sweep's worker cannot spawn a pool of its own (the child cannot rebuild the
    launcher's start method): the jobs run in the worker, one after another."""
    import multiprocessing
    import os

    from experiments.helpers.parallel import map_jobs

    monkeypatch.setattr(multiprocessing.current_process(), "name", "LokyProcess-1")
    assert map_jobs(lambda _: os.getpid(), [(0,), (1,)], workers=2) == [os.getpid()] * 2
