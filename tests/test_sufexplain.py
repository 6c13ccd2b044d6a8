"""sufexplain: exact minima against dense grids, MILP lower bounds, sufficiency against an
exhaustive grid, cardinal minimality by brute force, the interaction-aware bound against
exact losses, agreement without interactions, monotonicity, and protocol runs."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from data.binary_tabular import planted_interactions, select_edges
from methods.sufexplain import (
    AdditiveNet,
    MLPNet,
    components,
    exact_explanation,
    exact_min_1d,
    free_box,
    interaction_aware_explanation,
    interval_minimum,
    is_sufficient,
    milp_minimum,
    nam_explanation,
    pattern_loss,
    perturbation_box,
    verix_explanation,
    worst_case,
)


def _model(n: int, edges, seed: int, hidden=(8,), scale: float = 1.0):
    torch.manual_seed(seed)
    net = AdditiveNet(n, edges, list(hidden))
    with torch.no_grad():
        net.bias.fill_(0.3)
        for p in net.parameters():
            p.mul_(scale)
    return net.export()


def _grid(lo, hi, free, x, points: int):
    axes = [np.linspace(lo[i], hi[i], points) if i in free else np.array([x[i]])
            for i in range(len(x))]
    return np.array(list(itertools.product(*axes)))


def test_exact_1d_minimum_matches_a_dense_grid_and_never_exceeds_it():
    model = _model(3, [], seed=0)
    for term in model.terms:
        (i,) = term.inputs
        z = np.zeros((20001, 3))
        z[:, i] = np.linspace(-2.0, 1.5, 20001)
        exact = exact_min_1d([term], -2.0, 1.5)
        grid = term(z).min()
        assert exact <= grid + 1e-12
        assert exact == pytest.approx(grid, abs=1e-3)


def test_milp_minimum_is_exact_against_a_grid_and_above_interval_bounds():
    model = _model(3, [(0, 1), (1, 2)], seed=1)
    lo, hi = np.array([-1.0, -0.5, -2.0]), np.array([1.0, 1.5, 0.0])
    for sign in (1.0, -1.0):
        value, argmin = milp_minimum(model.terms, sign, lo, hi)
        grid = sign * (model(_grid(lo, hi, {0, 1, 2}, lo, 61)) - model.bias)
        assert value <= grid.min() + 1e-7  # a lower bound
        assert value == pytest.approx(grid.min(), abs=0.05)  # and tight (grid spacing)
        assert sign * (model(argmin)[0] - model.bias) == pytest.approx(value, abs=1e-6)
        assert interval_minimum(model.terms, sign, lo, hi) <= value + 1e-9


def _instance(n=6, edges=((0, 1), (2, 3), (3, 4)), seed=2, eps=0.6):
    model = _model(n, list(edges), seed=seed)
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, n)
    lo, hi = perturbation_box(x, eps, np.full(n, -3.0), np.full(n, 3.0))
    return model, x, lo, hi


def _grid_sufficient(model, x, fixed, lo, hi, points=5) -> bool:
    free = set(range(len(x))) - set(fixed)
    y = np.sign(model(x)[0])
    return bool((y * model(_grid(lo, hi, free, x, points)) > 0).all())


@pytest.mark.parametrize("seed", [2, 3, 4])
def test_returned_explanations_are_sufficient_on_an_exhaustive_grid(seed):
    model, x, lo, hi = _instance(seed=seed)
    for explanation in (exact_explanation(model, x, lo, hi, max_component=6),
                        interaction_aware_explanation(model, x, lo, hi),
                        verix_explanation(model, x, lo, hi, list(range(6)))):
        assert _grid_sufficient(model, x, explanation.fixed, lo, hi)
        free = set(range(6)) - set(explanation.fixed)
        grid = np.sign(model(x)[0]) * model(_grid(lo, hi, free, x, 5))
        assert worst_case(model, x, free, lo, hi) <= grid.min() + 1e-7  # MILP LB <= grid min


@pytest.mark.parametrize("seed", [5, 6, 7, 8])
def test_exact_explanation_is_cardinally_minimal_by_brute_force(seed):
    model, x, lo, hi = _instance(n=7, edges=((0, 1), (1, 2), (4, 5)), seed=seed, eps=0.8)
    ours = exact_explanation(model, x, lo, hi, max_component=6)
    assert is_sufficient(model, x, ours.fixed, lo, hi)
    # fixing more features only shrinks the free box, so a sufficient set of any smaller
    # size would extend to one of size |ours| - 1: no set of that size may be sufficient
    for fixed in itertools.combinations(range(7), max(ours.size - 1, 0)):
        assert ours.size == 0 or not is_sufficient(model, x, list(fixed), lo, hi), fixed
    # and never larger than the subset-minimal baseline or the interaction-aware set
    assert ours.size <= verix_explanation(model, x, lo, hi, list(range(7))).size
    assert ours.size <= interaction_aware_explanation(model, x, lo, hi).size


def test_interaction_aware_charges_bound_the_exact_loss_on_random_subsets():
    model, x, lo, hi = _instance(n=6, seed=9, eps=0.8)
    y = float(np.sign(model(x)[0]))
    from methods.sufexplain.explain import unary_losses

    charges = unary_losses(model, x, lo, hi, y)
    for term in model.terms:
        if len(term.inputs) == 2:
            idx = list(term.inputs)
            value, _ = milp_minimum([term], y, *free_box(x, lo, hi, idx))
            for i in idx:
                charges[i] += y * term(x[None])[0] - value
    rng = np.random.default_rng(0)
    margin = abs(model(x)[0])
    for _ in range(20):
        free = {i for i in range(6) if rng.random() < 0.5}
        exact_loss = margin - worst_case(model, x, free, lo, hi)
        assert charges[list(free)].sum() >= exact_loss - 1e-7


def test_without_interactions_all_algorithms_agree():
    for seed in range(3):
        model, x, lo, hi = _instance(n=8, edges=(), seed=seed, eps=1.0)
        sizes = {nam_explanation(model, x, lo, hi).size,
                 exact_explanation(model, x, lo, hi, max_component=1).size,
                 interaction_aware_explanation(model, x, lo, hi).size}
        assert len(sizes) == 1


def test_supersets_of_sufficient_sets_are_sufficient():
    model, x, lo, hi = _instance(n=6, seed=11, eps=0.8)
    ours = exact_explanation(model, x, lo, hi, max_component=6)
    rest = sorted(set(range(6)) - set(ours.fixed))
    for extra in range(len(rest) + 1):
        for added in itertools.combinations(rest, extra):
            assert is_sufficient(model, x, ours.fixed + list(added), lo, hi)


def test_pattern_loss_equals_the_whole_model_worst_case_within_a_component():
    model, x, lo, hi = _instance(n=6, seed=12, eps=0.8)
    y = float(np.sign(model(x)[0]))
    margin = abs(model(x)[0])
    for component in components(6, model.edges):
        terms = model.terms_touching(set(component))
        for size in (1, 2):
            for pattern in itertools.combinations(component, size):
                loss = pattern_loss(model, x, lo, hi, y, terms, pattern)
                assert loss == pytest.approx(margin - worst_case(model, x, set(pattern), lo, hi),
                                             abs=1e-6)


def test_planted_task_and_edge_selection_find_the_planted_pairs():
    x, y = planted_interactions(4000, 9, 3, 0.1, np.random.default_rng(0))
    edges = select_edges(x, y, 3, max_component=4)
    assert sorted(edges) == [(0, 1), (2, 3), (4, 5)]
    assert components(9, edges)[0] == [0, 1]


def test_exported_models_compute_what_torch_computes():
    torch.manual_seed(0)
    net = AdditiveNet(5, [(0, 3), (1, 2)], [6, 4])
    mlp = MLPNet(5, [7, 3])
    x = torch.randn(11, 5)
    with torch.no_grad():
        for module in (net, mlp):
            np.testing.assert_allclose(module.export()(x.double().numpy()),
                                       module(x).double().numpy(), atol=1e-5)


def test_protocol_runs_and_every_explanation_is_sufficient(smoke_run):
    metrics, run_dir = smoke_run("sufexplain")
    assert metrics["insufficient_found"] == 0
    assert metrics["size_ours_exact_mean"] <= metrics["size_baseline_mean"]
    for key in ("acc_na2m_planted", "acc_nam_planted", "time_speedup_ours_vs_baseline"):
        assert np.isfinite(metrics[key])
    assert (run_dir / "figures" / "explanations.png").exists()


def test_planar_vertex_minimum_equals_the_milp_for_one_hidden_layer_nets():
    from methods.sufexplain.networks import exact_min_planar

    for seed in range(4):
        model = _model(4, [(0, 1), (1, 3)], seed=seed, hidden=(12,))
        x = np.random.default_rng(seed).uniform(-1, 1, 4)
        lo, hi = perturbation_box(x, 0.7, np.full(4, -3.0), np.full(4, 3.0))
        for free in ([1], [0, 1], [1, 3]):
            milp, _ = milp_minimum(model.terms, 1.0, *free_box(x, lo, hi, free))
            assert exact_min_planar(model.terms, free, x, lo, hi) == pytest.approx(milp, abs=1e-7)
    deep = _model(2, [], seed=0, hidden=(4, 4))
    assert exact_min_planar(deep.terms, [0], np.zeros(2), -np.ones(2), np.ones(2)) is None


def test_the_box_always_contains_the_point():
    lo, hi = perturbation_box(np.array([0.0, 5.0, -4.0]), 0.5, np.full(3, -1.0), np.full(3, 1.0))
    np.testing.assert_allclose(lo, [-0.5, 4.5, -4.0])
    np.testing.assert_allclose(hi, [0.5, 5.0, -3.5])
    lo, hi = perturbation_box(np.zeros(2), np.inf, np.full(2, -2.0), np.full(2, 3.0))
    np.testing.assert_allclose(lo, [-2.0, -2.0])
    np.testing.assert_allclose(hi, [3.0, 3.0])
