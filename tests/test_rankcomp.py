"""rankcomp: checkers against literal definitions, algorithms against brute force, domains."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from data.profiles import sample_profile
from methods.rankcomp import compress, pairwise_ok, positional_ok, psc_ok
from methods.rankcomp.algorithms import (
    psc_expanding_approvals,
    single_crossing_order,
    single_peaked_axis,
)
from methods.rankcomp.bruteforce import all_rankings, pairwise_proportional_outputs


def _literal_positional(profile, outputs):
    n, m = profile.shape
    k = len(outputs)
    for c in range(m):
        for j in range(m):
            voters = sum(1 for r in profile if r[j] == c)
            outs = sum(1 for r in outputs if r[j] == c)
            if not ((k * voters) // n <= outs <= -(-(k * voters) // n)):
                return False
    return True


def _literal_pairwise(profile, outputs):
    n, m = profile.shape
    k = len(outputs)
    for a, b in itertools.permutations(range(m), 2):
        voters = sum(list(r).index(a) < list(r).index(b) for r in profile)
        outs = sum(list(r).index(a) < list(r).index(b) for r in outputs)
        if not ((k * voters) // n <= outs <= -(-(k * voters) // n)):
            return False
    return True


def _literal_psc(profile, outputs, quota, reading):
    n, m = profile.shape
    k = len(outputs)
    for size in range(1, m + 1):
        for cands in itertools.combinations(range(m), size):
            group = sum(1 for r in profile if set(r[:size]) == set(cands))
            ell = 0
            while (group * k >= (ell + 1) * n if quota == "hare"
                   else group * (k + 1) > (ell + 1) * n):
                ell += 1
            if reading == "top":
                have = sum(1 for o in outputs if o[0] in cands)
            else:
                have = sum(1 for o in outputs if set(o[:size]) == set(cands))
            if have < ell:
                return False
    return True


@pytest.mark.parametrize("seed", range(30))
def test_checkers_agree_with_literal_definitions(seed):
    rng = np.random.default_rng(seed)
    m, n, k = int(rng.integers(3, 5)), int(rng.integers(2, 9)), int(rng.integers(1, 4))
    perms = all_rankings(m)
    profile = perms[rng.integers(0, len(perms), n)]
    outputs = perms[rng.integers(0, len(perms), k)]
    assert positional_ok(profile, outputs) == _literal_positional(profile, outputs)
    assert pairwise_ok(profile, outputs) == _literal_pairwise(profile, outputs)
    for quota in ("hare", "droop"):
        for reading in ("top", "prefix"):
            assert psc_ok(profile, outputs, quota, reading) == _literal_psc(
                profile, outputs, quota, reading)


@pytest.mark.parametrize("m,k", [(3, 2), (4, 2), (4, 3), (5, 2), (5, 3)])
def test_algorithm_outputs_pass_and_brute_force_agrees(m, k):
    rng = np.random.default_rng(m * 10 + k)
    perms = all_rankings(m)
    for _ in range(4):
        profile = perms[rng.integers(0, len(perms), int(rng.integers(k, 12)))]
        assert positional_ok(profile, compress("positional", profile, k))
        for quota in ("hare", "droop"):
            out = psc_expanding_approvals(profile, k, quota=quota)
            assert psc_ok(profile, out, quota, "top")
        if m <= 4:  # brute force: the pairwise bounds are checked on every multiset found
            for idx in pairwise_proportional_outputs(profile, k)[:20]:
                assert pairwise_ok(profile, perms[idx])


@pytest.mark.parametrize("culture,algorithm", [("single_crossing", "pairwise_single_crossing"),
                                               ("single_peaked_walsh", "pairwise_single_peaked"),
                                               ("single_peaked_conitzer",
                                                "pairwise_single_peaked")])
def test_pairwise_on_restricted_domains(culture, algorithm):
    for seed in range(6):
        m, k = 4, int(2 + seed % 3)
        profile = sample_profile(culture, 9 + seed, m, seed)
        if culture == "single_crossing":
            single_crossing_order(profile)
        else:
            single_peaked_axis(profile)
        assert len(pairwise_proportional_outputs(profile, k)) > 0  # brute force: one exists
        assert pairwise_ok(profile, compress(algorithm, profile, k))


def test_domain_recognition_rejects_impartial_culture():
    profile = sample_profile("impartial", 200, 6, seed=0)
    with pytest.raises(ValueError):
        single_crossing_order(profile)
    with pytest.raises(ValueError):
        single_peaked_axis(profile)


def test_large_instances_positional_and_psc():
    profile = sample_profile("mallows", 1000, 10, seed=1)
    assert positional_ok(profile, compress("positional", profile, 7))
    assert psc_ok(profile, compress("psc_ear", profile, 7))


def test_rankcomp_smoke_run(smoke_run):
    metrics, run_dir = smoke_run("rankcomp")
    assert metrics["positional_satisfied_frac"] == 1
    assert metrics["psc_satisfied_frac"] == 1
    assert (run_dir / "figures" / "axioms_and_runtime.png").is_file()


@pytest.mark.parametrize("quota", ["hare", "droop"])
def test_psc_rule_satisfies_its_quota_on_random_profiles(quota):
    """Property test: the top reading of PSC holds for both quotas on random profiles of
    every shape (the smallest former Droop failure: n = 7, m = 3, k = 4)."""
    rng = np.random.default_rng(11)
    failures = []
    for trial in range(320):
        n, m, k = int(rng.integers(2, 12)), int(rng.integers(2, 6)), int(rng.integers(1, 6))
        profile = np.array([rng.permutation(m) for _ in range(n)])
        outputs = psc_expanding_approvals(profile, k, quota=quota)
        if not psc_ok(profile, outputs, quota, "top"):
            failures.append((trial, n, m, k))
    assert not failures
    profile = np.array([[0, 1, 2]] * 3 + [[1, 2, 0], [2, 0, 1], [1, 0, 2], [2, 1, 0]])
    outputs = psc_expanding_approvals(profile, 4, quota="droop")
    assert sum(int(o[0]) == 0 for o in outputs) >= 2  # 3 of 7 voters > 2 * 7 / 5


def test_the_impossibility_verifier_agrees_with_the_exhaustive_search():
    """The integer program that re-verifies a saved profile and the exhaustive search over
    multisets agree on random small profiles (all feasible at this size, as far as either
    finds), and identical voters are met by copies of their ranking."""
    from methods.rankcomp.bruteforce import all_rankings, pairwise_proportional_outputs
    from methods.rankcomp.verify import no_pairwise_output

    rng = np.random.default_rng(0)
    perms = all_rankings(3)
    for _ in range(20):
        profile = perms[rng.integers(0, len(perms), int(rng.integers(2, 7)))]
        for k in (2, 3):
            assert no_pairwise_output(profile, k) == (
                len(pairwise_proportional_outputs(profile, k)) == 0)
    assert not no_pairwise_output(np.array([[0, 1, 2]] * 3), 2)
