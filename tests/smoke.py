"""Each paper's smoke configuration: ``scale=smoke`` (conf/paper/<key>/scale/smoke.yaml),
its default shrunk to seconds, in one process (the worker pools' spawn costs more than the
work at this size; the empty-cache repeat in tests/test_papers.py runs them with two workers
and must print the same metrics). Tests add their own ``paths.cache_dir`` so every run
starts from an empty cache, and further overrides after these (the command line wins)."""

from __future__ import annotations

from pathlib import Path

from experiments.claims.papers import papers
from experiments.runner.cli import scale_override

from .conftest import ROOT


def smoke(key: str) -> list[str]:
    """The overrides that select ``key`` at ``scale=smoke``."""
    return scale_override([f"+paper={key}", "scale=smoke"], [key])


def smoke_settings(key: str, groups: tuple[str, ...]) -> list[str]:
    """The smoke preset's settings of ``groups`` as ``key=value`` overrides, for a test that
    swaps another group's option (whose keys the preset's would not fit)."""
    from omegaconf import OmegaConf

    preset = OmegaConf.load(ROOT / "conf" / "paper" / key / "scale" / "smoke.yaml")

    def flat(prefix: str, node) -> list[str]:
        if OmegaConf.is_dict(node):
            return [o for k, v in node.items() for o in flat(f"{prefix}.{k}", v)]
        value = OmegaConf.to_container(node) if OmegaConf.is_list(node) else node
        return [f"{prefix}={'null' if value is None else value}".replace(" ", "")]

    return [f"+paper={key}"] + [o for group in groups if group in preset
                                for o in flat(group, preset[group])]


# gcad's smoke run needs a chat model built by its test module (tests/test_gcad.py runs it
# twice there), so it has no preset.
SMOKE: dict[str, list[str]] = {
    key: smoke(key) for key in list(papers())
    if (ROOT / "conf" / "paper" / key / "scale" / "smoke.yaml").is_file()}


# ditherq at smoke size on vectors read from a .npy file: a sweep over a good and a bad file
# (shape (5,), refused when the run reads it) has one job that fails while it runs
DITHERQ_NPY = ["+paper=ditherq", "dataset=npy_vectors", "protocol.n_trials=3",
               "protocol.bits=[1,2]", "protocol.uniformity_dims=[16]",
               "protocol.timing_dims=[64]", "protocol.timing_repeats=2"]


def good_and_bad_vectors(folder: Path) -> str:
    """``dataset.path=<good>,<bad>`` for :data:`DITHERQ_NPY`."""
    import numpy as np

    good, bad = folder / "good.npy", folder / "bad.npy"
    np.save(good, np.random.default_rng(0).standard_normal((8, 16)))
    np.save(bad, np.zeros(5))
    return f"dataset.path={good},{bad}"
