"""tps: strict propriety, exact q_t of the processes, library agreement, censoring, smoke."""

from __future__ import annotations

import numpy as np
import pytest
from omegaconf import OmegaConf
from sklearn.metrics import brier_score_loss, log_loss

from data.trajectories import (
    gamblers_ruin,
    hidden_bernoulli,
    load_agent_log,
    polya_urn,
    synthetic_trajectories,
    write_example_agent_log,
)
from methods.tps import (
    BASE_SCORES,
    censored_reduced_score,
    expected_score,
    pooled_auroc,
    scalarized_brier,
    step_weights,
    tps,
    trajectory_ece,
)
from methods.tps.predictors import fit_recalibration, predictor_families


@pytest.mark.parametrize("score", list(BASE_SCORES))
@pytest.mark.parametrize("q", [0.03, 0.2, 0.5, 0.77, 0.95])
def test_each_base_score_is_strictly_proper(score, q):
    grid = np.linspace(0.001, 0.999, 999)
    expected = expected_score(score, grid, np.full_like(grid, q))
    best = grid[np.argmin(expected)]
    assert abs(best - q) < 2e-3
    others = expected[np.abs(grid - q) > 0.02]
    assert np.all(others > expected_score(score, np.array([q]), np.array([q]))[0])


def test_base_scores_match_scikit_learn():
    rng = np.random.default_rng(0)
    p, y = rng.uniform(0.01, 0.99, 500), rng.integers(0, 2, 500)
    assert BASE_SCORES["brier"](p, y).mean() == pytest.approx(brier_score_loss(y, p))
    assert BASE_SCORES["log"](p, y).mean() == pytest.approx(log_loss(y, p))


def _mc_q(sampler, n, step):
    """Monte-Carlo P(Y=1 | state at ``step``) grouped by the exact q value there."""
    q, mask, y = sampler(n)
    alive = mask[:, step]
    table = {}
    for value in np.unique(q[alive, step]):
        sel = alive & (q[:, step] == value)
        if sel.sum() > 400:
            table[value] = y[sel].mean()
    return table


@pytest.mark.parametrize("sampler", [
    lambda n: gamblers_ruin(n, 3, 6, np.random.default_rng(1)),
    lambda n: polya_urn(n, 2, 1, 10, np.random.default_rng(2)),
    lambda n: hidden_bernoulli(n, 1.0, 1.0, 10, np.random.default_rng(3)),
])
def test_closed_form_q_matches_simulation(sampler):
    for step in (0, 2, 5):
        table = _mc_q(sampler, 40000, step)
        assert table
        for q_value, freq in table.items():
            assert abs(freq - q_value) < 0.035, (step, q_value, freq)


def test_weights_positive_on_every_observed_step_except_last_schedule():
    mask = np.array([[1, 1, 1, 0], [1, 1, 1, 1]], dtype=bool)
    for schedule in ("uniform", "geometric", "per_trajectory"):
        w = step_weights(schedule, mask)
        assert np.all(w[mask] > 0) and np.all(w[~mask] == 0)
    last = step_weights("last", mask)
    assert last.tolist() == [[0, 0, 1, 0], [0, 0, 0, 1]]
    assert np.allclose(step_weights("per_trajectory", mask).sum(1), 1)


def _data(name="hidden_bernoulli", n=3000, seed=0):
    cfg = {"gamblers_ruin": dict(name=name, n=n, up=3, down=6),
           "hidden_bernoulli": dict(name=name, n=n, alpha=1.0, beta=1.0, horizon=15)}[name]
    return synthetic_trajectories(OmegaConf.create(cfg), np.random.default_rng(seed))


def test_oracle_minimizes_expected_tps_among_families():
    d = _data()
    fams = predictor_families(d.q, d.mask, float(d.y.mean()), 2.5, 0.7,
                              np.random.default_rng(1))
    for score in BASE_SCORES:
        means = {k: tps(p, d.y, d.mask, score, "uniform").mean() for k, p in fams.items()}
        assert min(means, key=means.get) == "oracle"


def test_mean_matched_ties_on_scalarized_brier_and_differs_on_tps():
    d = _data()
    fams = predictor_families(d.q, d.mask, 0.5, 2.5, 0.7, np.random.default_rng(1))
    a = scalarized_brier(fams["oracle"], d.y, d.mask)
    b = scalarized_brier(fams["mean_matched"], d.y, d.mask)
    assert a == pytest.approx(b, abs=1e-12)
    # E[(q + w - Y)^2] - E[(q - Y)^2] = w^2 on each perturbed step
    gap = (tps(fams["mean_matched"], d.y, d.mask) - tps(fams["oracle"], d.y, d.mask)).mean()
    assert gap == pytest.approx(2 * 0.1**2 / d.mask.shape[1], rel=0.3)


def test_constant_base_rate_has_small_ece_but_worse_tps():
    d = _data()
    pooled = np.broadcast_to(d.y[:, None], d.mask.shape)[d.mask].mean()
    fams = predictor_families(d.q, d.mask, float(pooled), 2.5, 0.7, np.random.default_rng(1))
    assert trajectory_ece(fams["constant"], d.y, d.mask) < 1e-9  # one bin, exact base rate
    assert tps(fams["constant"], d.y, d.mask).mean() > tps(fams["oracle"], d.y, d.mask).mean()


def test_monotone_recalibration_keeps_auroc_exactly():
    d = _data()
    fams = predictor_families(d.q, d.mask, 0.5, 2.5, 0.7, np.random.default_rng(1))
    p = fams["tempered"]
    pooled_y = np.broadcast_to(d.y[:, None], d.mask.shape)[d.mask]
    for kind in ("temperature", "platt"):
        fmap = fit_recalibration(kind, p[d.mask], pooled_y)
        after = np.where(d.mask, fmap(p), 0.5)
        assert pooled_auroc(after, d.y, d.mask) == pooled_auroc(p, d.y, d.mask)
        assert tps(after, d.y, d.mask).mean() < tps(p, d.y, d.mask).mean()


def test_auroc_invariance_is_specific_to_monotone_maps():
    """The check above can fail: a non-monotone map (folding forecasts around 0.5) changes
    AUROC, and an isotonic fit (monotone but not strictly: ties) may change it too."""
    d = _data()
    fams = predictor_families(d.q, d.mask, 0.5, 2.5, 0.7, np.random.default_rng(1))
    p = fams["tempered"]
    folded = np.where(d.mask, np.abs(p - 0.5) + 0.25, 0.5)
    assert abs(pooled_auroc(folded, d.y, d.mask) - pooled_auroc(p, d.y, d.mask)) > 0.05
    reversed_map = np.where(d.mask, 1 - p, 0.5)
    assert pooled_auroc(reversed_map, d.y, d.mask) == pytest.approx(
        1 - pooled_auroc(p, d.y, d.mask))


def test_exact_censored_score_equals_restricted_complete_score_in_mean():
    d = _data(n=20000)
    t = np.arange(d.mask.shape[1])
    observed = d.mask & (t[None, :] < d.censor[:, None])
    stop = np.minimum(d.censor, d.mask.sum(1)) - 1
    q_stop = d.q[np.arange(len(stop)), stop]
    p = np.where(d.mask, np.clip(d.q + 0.1, 0, 1), 0.5)  # any predictable forecast
    diff = censored_reduced_score(p, q_stop, observed) - tps(p, d.y, observed)
    assert abs(diff.mean()) < 4 * diff.std() / np.sqrt(len(diff))


def test_agent_log_round_trip(tmp_path):
    path = tmp_path / "log.jsonl"
    write_example_agent_log(path, n=12)
    d = load_agent_log(str(path))
    assert d.q.shape[0] == 12 and set(np.unique(d.y)) <= {0, 1}
    assert np.all((d.q[d.mask] > 0) & (d.q[d.mask] < 1))


def test_tps_smoke_run(smoke_run):
    metrics, run_dir = smoke_run("tps")
    assert metrics["auroc_change_under_recalibration"] == 0
    assert metrics["last_step_oracle_vs_final_only_gap"] == 0
    assert metrics["tps_gap_constant_vs_oracle"] > 0
    assert (run_dir / "figures" / "leaderboard_ranks.png").is_file()
