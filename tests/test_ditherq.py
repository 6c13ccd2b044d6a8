"""ditherq: transforms, codebooks and quantizers against independent truths."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.linalg import hadamard
from scipy.stats import norm

from methods.ditherq import (
    RandomizedHadamard,
    fwht,
    fwht_torch,
    haar_images,
    haar_rotation,
    lloyd_max_gaussian,
    panter_dite_bound,
    quantize_rotated,
)
from methods.ditherq import hadamard as hadamard_module
from methods.ditherq.codebooks import gaussian_cell_mse
from methods.ditherq.hadamard import pad_pow2


@pytest.mark.parametrize("d", [4, 8, 32, 512, 2048])
def test_kronecker_gemm_form_equals_dense_hadamard_on_batches(d):
    x = np.random.default_rng(d).standard_normal((16, d))
    np.testing.assert_allclose(fwht(x), x @ hadamard(d), atol=1e-9)
    np.testing.assert_allclose(fwht(x.reshape(2, 8, d)), (x @ hadamard(d)).reshape(2, 8, d),
                               atol=1e-9)
    np.testing.assert_allclose(fwht_torch(torch.tensor(x)).numpy(), x @ hadamard(d), atol=1e-9)


@pytest.mark.parametrize("d, rows", [(4096, 37), (1024, 300), (64, 100)])
def test_blocked_transform_is_bit_identical_to_the_whole_batch(d, rows):
    """Blocks of rows (the last one shorter) give every output bit of one Kronecker product
    chain over the whole batch, with the signs and scaling applied as whole-array passes, and
    a vector alone gets the bits it gets in a batch: blocking changes speed, never the
    quantizer's numbers."""
    rng = np.random.default_rng(d)
    x = rng.standard_normal((rows, d))
    rht = RandomizedHadamard(d, rng)
    assert rows > hadamard_module.BLOCK_ROWS or 8 * d * rows > hadamard_module.BLOCK_BYTES
    whole = hadamard_module._kronecker_transform(x * rht.signs, d, np.matmul) / np.sqrt(d)
    assert np.array_equal(rht.forward(x), whole)
    inverse = hadamard_module._kronecker_transform(whole, d, np.matmul) / np.sqrt(d) * rht.signs
    assert np.array_equal(rht.inverse(whole), inverse)
    assert np.array_equal(fwht(x), hadamard_module._kronecker_transform(x, d, np.matmul))
    assert np.array_equal(rht.forward(x[3]), rht.forward(x)[3])  # alone or in a batch


@pytest.mark.parametrize("d", [1, 2, 8, 64, 512])
def test_fwht_equals_dense_hadamard_product(d):
    x = np.random.default_rng(d).standard_normal((3, d))
    np.testing.assert_allclose(fwht(x), x @ hadamard(d), atol=1e-10)
    np.testing.assert_allclose(fwht_torch(torch.tensor(x)).numpy(), x @ hadamard(d), atol=1e-10)


def test_fwht_rejects_non_power_of_two():
    with pytest.raises(ValueError, match="power-of-two"):
        fwht(np.ones(6))


@pytest.mark.parametrize("d", [256, 100])
def test_rht_is_orthogonal_with_exact_inverse(d):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, d))
    rht = RandomizedHadamard(d, rng)
    y = rht.forward(x)
    np.testing.assert_allclose(np.linalg.norm(y, axis=1), np.linalg.norm(x, axis=1))
    np.testing.assert_allclose(rht.inverse(y), x, atol=1e-12)
    dense = hadamard(rht.dim) / np.sqrt(rht.dim) @ np.diag(rht.signs)
    np.testing.assert_allclose(y, pad_pow2(x) @ dense.T, atol=1e-12)


def test_haar_images_match_a_full_haar_rotation_in_law():
    """The O(d n^2) sampler of rotated images preserves the Gram matrix, and its first
    coordinates have the Haar moments (E[t^2] = 1/d, E[t^4] = 3/(d(d+2)))."""
    d, rng = 16, np.random.default_rng(1)
    x = rng.standard_normal((3, d))
    y = haar_images(x, rng)
    np.testing.assert_allclose(y @ y.T, x @ x.T, atol=1e-10)
    e1 = np.eye(d)[:1]
    fast = np.array([haar_images(e1, rng)[0, 0] for _ in range(20000)])
    full = np.array([haar_rotation(d, rng)[0, 0] for _ in range(20000)])
    for t in (fast, full):
        assert abs(np.mean(t**2) - 1 / d) < 0.05 / d
        assert abs(np.mean(t**4) - 3 / (d * (d + 2))) < 0.1 * 3 / (d * (d + 2))


@pytest.mark.parametrize("bits,expected", [(1, 0.3634), (2, 0.1175), (3, 0.03455),
                                           (4, 0.0095), (5, 0.0025)])
def test_lloyd_max_gaussian_mse(bits, expected):
    bounds, centroids = lloyd_max_gaussian(bits)
    mse = gaussian_cell_mse(bounds, centroids)
    assert f"{mse:.3g}" == f"{expected:.3g}"
    mass = norm.cdf(bounds[1:]) - norm.cdf(bounds[:-1])  # centroid condition: 1 - sum P c^2
    assert mse == pytest.approx(1 - np.sum(mass * centroids**2), rel=1e-9)


def test_cell_mse_matches_monte_carlo():
    u = np.random.default_rng(2).standard_normal(2_000_000)
    bounds, levels = lloyd_max_gaussian(2)
    q = levels[np.searchsorted(bounds[1:-1], u)]
    assert np.mean((u - q) ** 2) == pytest.approx(gaussian_cell_mse(bounds, levels), rel=5e-3)


def test_undithered_rht_on_a_basis_vector_is_deterministic():
    """H D e_j has every normalized coordinate at +-1, so 2-bit Lloyd-Max maps all of them to
    the outer centroid 1.5104: NMSE = (1.5104 - 1)^2 exactly, 2.2x the dense-rotation MSE."""
    d, rng = 1024, np.random.default_rng(3)
    e = np.eye(d)[:1]
    rht = RandomizedHadamard(d, rng)
    y = rht.forward(e)
    err = np.sum((rht.inverse(quantize_rotated(y, "turboquant", 2, False, rng)) - e) ** 2)
    outer = lloyd_max_gaussian(2)[1][-1]
    assert err == pytest.approx((outer - 1) ** 2, rel=1e-9)
    assert err / gaussian_cell_mse(*lloyd_max_gaussian(2)) > 2


def _nmse(x, quantizer, bits, dither, trials, rng, rotation="rht"):
    out = []
    for _ in range(trials):
        if rotation == "rht":
            rht = RandomizedHadamard(x.shape[1], rng)
            x_hat = rht.inverse(quantize_rotated(rht.forward(x), quantizer, bits, dither, rng))
            out.append(np.sum((x_hat - x) ** 2, axis=1) / np.sum(x**2, axis=1))
        else:
            y = haar_images(x, rng)
            y_hat = quantize_rotated(y, quantizer, bits, dither, rng)
            out.append(np.sum((y_hat - y) ** 2, axis=1) / np.sum(x**2, axis=1))
    return np.mean(out)


def test_eden_one_bit_limits():
    """EDEN 1-bit vNMSE at d = 1024: unbiased -> pi/2 - 1, biased -> 1 - 2/pi."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((8, 1024))
    assert _nmse(x, "eden_unbiased", 1, False, 20, rng) == pytest.approx(np.pi / 2 - 1,
                                                                         rel=0.03)
    assert _nmse(x, "eden_biased", 1, False, 20, rng) == pytest.approx(1 - 2 / np.pi, rel=0.03)


def test_eden_unbiased_scale_is_unbiased():
    """EDEN's unbiased scale makes Q^T S u_hat unbiased over a Haar rotation Q (EDEN, Thm 2);
    the biased (MSE-optimal) scale shrinks towards 0."""
    rng = np.random.default_rng(5)
    d, draws = 32, 6000
    x = rng.standard_normal(d)
    mean = {"eden_unbiased": np.zeros(d), "eden_biased": np.zeros(d)}
    for _ in range(draws):
        q = haar_rotation(d, rng)
        for name in mean:
            mean[name] += quantize_rotated((q @ x)[None], name, 1, False, rng)[0] @ q / draws
    # one draw's per-coordinate error has variance vNMSE * ||x||^2 / d (vNMSE ~ pi/2 - 1)
    se = np.sqrt(0.6 * np.sum(x**2) / d / draws)
    assert np.max(np.abs(mean["eden_unbiased"] - x)) < 4.5 * se
    shrink = mean["eden_biased"] @ x / (x @ x)
    assert shrink < 0.9


def test_dithered_turboquant_reaches_the_panter_dite_constant():
    """Dithered TurboQuant MSE / (pi sqrt3 / 2 * 4^-b) -> 1, on a basis vector and a flat one."""
    rng = np.random.default_rng(6)
    d = 1024
    x = np.vstack([np.eye(d)[0], np.ones(d) / np.sqrt(d)])
    ratio = _nmse(x, "turboquant", 6, True, 60, rng) / panter_dite_bound(6)
    assert 0.85 < ratio < 1.1


def test_dither_removes_the_rht_basis_vector_penalty():
    rng = np.random.default_rng(7)
    d = 1024
    e = np.eye(d)[:1]
    dithered_rht = _nmse(e, "turboquant", 2, True, 300, rng)
    dithered_dense = _nmse(e, "turboquant", 2, True, 300, rng, rotation="dense")
    assert dithered_rht / dithered_dense < 1.25


def test_rabitq_is_one_bit_only():
    with pytest.raises(ValueError, match="1..1 bits"):
        quantize_rotated(np.ones((1, 8)), "rabitq", 2, False, np.random.default_rng(0))


def test_zero_vector_round_trips_to_zero():
    out = quantize_rotated(np.zeros((1, 16)), "turboquant", 3, True, np.random.default_rng(0))
    assert np.all(out == 0)
