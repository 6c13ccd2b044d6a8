"""Every paper's smoke run (tests/smoke.py): it writes the paper's primary metrics, and a
second run from another empty cache (viptc with one worker process instead of two) writes the
same metrics.json, timings aside."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from common.streams import Streams
from experiments.claims.metrics import contract, undeclared

from .conftest import ROOT, compose_config, run_paper
from .smoke import SMOKE


def _untimed(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if not k.startswith(("time_", "seconds_"))}


@pytest.mark.parametrize("key", sorted(SMOKE))
def test_smoke_run_writes_exactly_its_declared_metrics(key, smoke_run):
    """Every required metric the smoke configuration declares is written, and nothing
    undeclared (an optional declaration's pattern admits a name)."""
    metrics, run_dir = smoke_run(key)
    cfg = compose_config(SMOKE[key])
    required, _ = contract(cfg)
    assert not sorted(required - set(metrics)), f"{key}: declared, not written"
    assert not undeclared(metrics, cfg), f"{key}: written, not declared in paper.metrics"
    assert list((run_dir / "figures").glob("*.png"))


@pytest.mark.parametrize("key", sorted(SMOKE))
def test_runs_at_seeds_0_to_9_share_no_stream_but_the_declared_fixed_ones(key, smoke_run):
    """The streams a run drew (results.json), re-derived at seeds 0-9: every run stream's
    state differs across seeds and names; a fixed stream is the same at every seed."""
    _, run_dir = smoke_run(key)
    used = json.loads((run_dir / "results.json").read_text())["streams"]
    assert used, f"{key} drew from no named stream"
    states = {}
    for name, kind in used.items():
        at_seeds = [Streams(seed, fixed=kind == "fixed").seed(name) for seed in range(10)]
        if kind == "fixed":
            assert len(set(at_seeds)) == 1
        else:
            states |= {(name, seed): state for seed, state in enumerate(at_seeds)}
    assert len(set(states.values())) == len(states)


@pytest.mark.slow  # over 10 s: make test-slow
@pytest.mark.parametrize("key", sorted(SMOKE))
def test_a_second_run_from_an_empty_cache_repeats_the_metrics(key, smoke_run, tmp_path):
    first, _ = smoke_run(key)
    # the first ran in one process: a pool of two must not change a number
    protocol = OmegaConf.load(ROOT / "conf" / "paper" / f"{key}.yaml").get("protocol", {})
    workers = ["protocol.workers=2"] if "workers" in protocol else []
    second = run_paper([*SMOKE[key], *workers, f"paths.cache_dir={tmp_path / 'cache'}"],
                       tmp_path / "run")
    assert _untimed(second) == _untimed(first)
