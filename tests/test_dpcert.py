"""dpcert: the profile -> tradeoff -> certificate route against closed forms, accountants
against each other, degenerate cases, monotonicity, and a smoke run."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
from dp_accounting import dp_event, rdp
from prv_accountant import PoissonSubsampledGaussianMechanism, PRVAccountant
from scipy.stats import norm
from statsmodels.stats.proportion import proportion_confint

from methods.dpcert import (
    EPS_GRID,
    certified_radii,
    clopper_pearson,
    cohen_radius,
    dpa_poisoning_pld,
    dpa_vote_certificate,
    dpsgd_group_pld,
    gaussian_pld,
    gaussian_profile,
    is_certified,
    naive_certified,
    profile_of,
    radius_by_bisection,
    tradeoff,
)


def _gauss_radius(p_a, sigma, one_piece=False):
    lo, hi = 0.0, 5.0
    for _ in range(60):
        mid = (lo + hi) / 2
        prof = gaussian_profile(mid / sigma)
        low_a = tradeoff(1 - p_a, prof, one_piece=one_piece)[0]
        up_b = 1 - tradeoff(1 - p_a, prof, one_piece=one_piece)[0]
        lo, hi = (mid, hi) if low_a > up_b else (lo, mid)
    return lo


def test_cohen_radius_through_the_profile_route():
    assert _gauss_radius(0.9, 0.5) == pytest.approx(0.6407758, abs=1e-6)
    assert 0.5 * norm.ppf(0.9) == pytest.approx(0.6407758, abs=1e-7)
    shortcut = _gauss_radius(0.9, 0.5, one_piece=True)
    assert shortcut == pytest.approx(0.524, abs=0.01)  # the 18%-loose one-piece shortcut


@pytest.mark.parametrize("sigma", [0.12, 0.5, 1.0, 4.0])
def test_profile_route_matches_cohen_to_1e8_and_never_exceeds_it(sigma):
    """With the sup over eps refined between grid points, the profile route reproduces
    Cohen's closed form over p_A in [0.51, 0.9999] (a 3001-point grid alone: 7e-6)."""
    for p_a in (0.51, 0.6, 0.75, 0.9, 0.99, 0.999, 0.9999):
        radius = radius_by_bisection(p_a, 1 - p_a,
                                     lambda r: partial(gaussian_profile, r / sigma),
                                     10 * sigma, iters=60)
        closed = sigma * norm.ppf(p_a)
        assert closed - 1e-8 <= radius <= closed


@pytest.mark.slow  # over 10 s: make test-slow
def test_radius_by_bisection_on_a_pld_profile():
    r = radius_by_bisection(0.9, 0.1, lambda R: profile_of(gaussian_pld(0.5, R, 1e-4)), 3.0,
                            iters=12)  # resolution 3 / 2^12 = 7e-4, inside the tolerance
    assert r == pytest.approx(0.6407758, abs=2e-3) and r <= 0.6407758 + 1e-6  # conservative


def test_composed_gaussian_profile_matches_closed_form():
    k, sigma = 10, 5.0
    pld = gaussian_pld(sigma, 1.0, discretization=1e-5)
    composed = pld
    for _ in range(k - 1):
        composed = composed.compose(pld)
    np.testing.assert_allclose(profile_of(composed), gaussian_profile(np.sqrt(k) / sigma),
                               atol=1e-6)


def test_poisson_subsampled_gaussian_pld_prv_rdp():
    pld = dpsgd_group_pld(4.0, 0.01, 1000, group=1, discretization=1e-4)
    eps_pld = pld.get_epsilon_for_delta(1e-5)
    assert eps_pld == pytest.approx(0.2722, abs=5e-4)
    prv = PRVAccountant(prvs=PoissonSubsampledGaussianMechanism(noise_multiplier=4.0,
                                                                sampling_probability=0.01),
                        max_self_compositions=1000, eps_error=0.01, delta_error=1e-10)
    low, _, high = prv.compute_epsilon(delta=1e-5, num_self_compositions=1000)
    assert low - 1e-3 <= eps_pld <= high + 1e-3
    acc = rdp.RdpAccountant()
    acc.compose(dp_event.SelfComposedDpEvent(
        dp_event.PoissonSampledDpEvent(0.01, dp_event.GaussianDpEvent(4.0)), 1000))
    assert acc.get_epsilon(1e-5) >= eps_pld


def test_dpa_mixture_profile_is_the_joint_convexity_bound():
    pld = dpa_poisoning_pld(3, 20, smoothing=gaussian_pld(0.5, 0.2, 1e-4), discretization=1e-4)
    expected = 3 / 20 + (1 - 3 / 20) * gaussian_profile(0.2 / 0.5)
    np.testing.assert_allclose(profile_of(pld), expected, atol=2e-4)


def test_dpa_degenerate_case_equals_the_vote_certificate():
    rng = np.random.default_rng(0)
    k = 30
    profiles = [profile_of(dpa_poisoning_pld(r, k)) for r in range(k + 1)]
    for _ in range(200):
        votes = rng.multinomial(k, rng.dirichlet(np.ones(4) * 0.5))
        a = int(np.argmax(votes))
        rest = votes.copy()
        rest[a] = -1
        b = int(np.argmax(rest))
        best = -1
        for r in range(k + 1):
            if is_certified(votes[a] / k, votes[b] / k, profiles[r], a < b)[0]:
                best = r
            else:
                break
        assert best == dpa_vote_certificate(votes[a], votes[b], a < b)


@pytest.mark.slow  # over 10 s: make test-slow
def test_certificate_monotonicity():
    def joint_radius(p_a, r, sigma):
        return radius_by_bisection(p_a, 1 - p_a, lambda R: profile_of(dpa_poisoning_pld(
            r, 50, smoothing=gaussian_pld(sigma, R))), 3.0, iters=14)

    assert joint_radius(0.95, 0, 0.5) > joint_radius(0.95, 2, 0.5) > joint_radius(0.95, 5, 0.5)
    assert joint_radius(0.9, 1, 0.5) < joint_radius(0.97, 1, 0.5)
    assert joint_radius(0.95, 1, 0.25) < joint_radius(0.95, 1, 0.5)


def test_joint_dominates_the_union_bound():
    p_a = np.linspace(0.55, 0.999, 40)
    p_b = 1 - p_a
    for r in (1, 2):
        train = dpsgd_group_pld(2.0, 0.05, 50, r)
        for radius in (0.1, 0.3):
            test = gaussian_pld(0.25, radius)
            joint = is_certified(p_a, p_b, profile_of(train.compose(test)))
            naive = naive_certified(p_a, p_b, profile_of(train), gaussian_profile(radius / 0.25))
            assert np.all(joint >= naive)


def test_clopper_pearson_matches_statsmodels():
    for k, n in [(0, 50), (7, 50), (50, 50), (480, 500)]:
        low, up = clopper_pearson(np.array([k]), n, 0.001)
        sm_low, sm_up = proportion_confint(k, n, alpha=0.002, method="beta")
        assert low[0] == pytest.approx(sm_low, abs=1e-10)
        assert up[0] == pytest.approx(sm_up, abs=1e-10)
    assert cohen_radius(np.array([0.4]), 1.0)[0] == 0.0
    assert EPS_GRID[0] == 0.0


def test_dpcert_smoke_run(smoke_run):
    metrics, run_dir = smoke_run("dpcert")
    assert metrics["degenerate_dpa_mismatches"] == 0
    assert metrics["joint_minus_naive_certified_acc_min"] >= 0
    assert (run_dir / "figures" / "certified_accuracy_heatmaps.png").is_file()


def test_certified_radii_match_cohen_without_poisoning():
    """With no poisoning the per-point grid radius is Cohen's radius rounded down to the grid;
    poisoning only shrinks it."""
    p_a = np.array([0.3, 0.6, 0.8, 0.95, 0.99])
    sigma, step = 0.25, 0.025  # one PLD composition a grid step: the grid's cost
    radius = certified_radii(p_a, 1 - p_a, gaussian_pld(sigma, 0.0), sigma, step)
    cohen = cohen_radius(p_a, sigma)
    assert radius[0] == -1.0
    assert np.all(radius[1:] <= cohen[1:] + 1e-9)
    assert np.all(radius[1:] > cohen[1:] - step - 1e-6)
    poisoned = certified_radii(p_a, 1 - p_a, dpa_poisoning_pld(1, 50), sigma, step)
    assert np.all(poisoned <= radius) and poisoned[-1] < radius[-1]


def test_the_boundary_attack_points_at_the_nearest_point_of_another_class():
    """Moving a point by the distance to the nearest point of another class along the
    attack's direction lands on that point: the attack crosses where the data does."""
    from methods.dpcert import toward_other_class

    x_train = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 3.0]], np.float32)
    y_train = np.array([0, 1, 1])
    x = np.array([[0.1, 0.0]], np.float32)
    direction = toward_other_class(x, np.array([0]), x_train, y_train)
    assert np.linalg.norm(direction) == pytest.approx(1.0)
    assert x[0] + 0.9 * direction[0] == pytest.approx(x_train[1])


def test_the_gradient_attack_descends_the_margin_as_the_closed_form_says():
    """For softmax regression the margin of class a over b is linear, (w_a - w_b) x + const:
    the attack's direction is -(w_a - w_b) / |w_a - w_b| where b is the runner-up, and a step
    along it lowers the margin by the step times that norm."""
    import torch

    from methods.dpcert.training import BatchedMLP, margin_descent_direction

    net = BatchedMLP(1, 4, 0, 3, torch.Generator().manual_seed(0))
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    with torch.no_grad():
        logits = net(torch.as_tensor(x))[0].numpy()
    a = logits.argmax(1)
    direction = margin_descent_direction(net, x, a)
    w = net.w2.detach()[0].numpy()  # (dim, classes)
    for i in range(len(x)):
        b = max((c for c in range(3) if c != a[i]), key=lambda c: logits[i, c])
        gap = w[:, a[i]] - w[:, b]
        assert direction[i] == pytest.approx(-gap / np.linalg.norm(gap), abs=1e-5)
