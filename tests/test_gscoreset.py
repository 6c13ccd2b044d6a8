"""gscoreset: the rasterizer against a brute-force per-pixel renderer and a Monte-Carlo
projection, the weighted-alpha identities, the optical-depth objective against the rendered
transmittance, sensitivity facts (sum <= |R|, the disjoint-tiny-Gaussians scene), unbiased
samplers, the PLY round trip, the PUP Fisher against finite differences, weight folding,
the finetune, protocol runs and gsplat on a GPU."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from data.splat_scenes import (
    SH_C0,
    load_ply,
    procedural_scene,
    save_ply,
    sphere_cameras,
    vertex_array,
)
from methods.gscoreset import (
    Camera,
    Gaussians,
    RayObjective,
    multinomial_sample,
    optical_depth,
    poisson_sample,
    project,
    pup_fisher,
    pup_fisher_scores,
    render,
    sensitivities,
)
from methods.gscoreset.rasterizer import ALPHA_MAX, ALPHA_MIN, T_STOP

from .conftest import run_failing
from .smoke import SMOKE


def _scene(n=25, seed=0, dtype=torch.float64, opacity=(0.2, 0.9)):
    rng = np.random.default_rng(seed)
    op = rng.uniform(*opacity, n)
    q = rng.standard_normal((n, 4))
    return Gaussians(
        means=torch.tensor(rng.uniform(-0.6, 0.6, (n, 3)), dtype=dtype),
        quats=torch.tensor(q, dtype=dtype),
        log_scales=torch.tensor(np.log(rng.uniform(0.03, 0.25, (n, 3))), dtype=dtype),
        opacity_logits=torch.tensor(np.log(op / (1 - op)), dtype=dtype),
        colors=torch.tensor(rng.uniform(0, 1, (n, 3)), dtype=dtype))


def _camera(size=16, seed=0):
    return sphere_cameras(1, np.random.default_rng(seed + 100), size)[0]


def _brute_force(g: Gaussians, cam: Camera, background=0.0) -> tuple[np.ndarray, np.ndarray]:
    """Per pixel in plain numpy: pinhole projection with gsplat's clamp, J Sigma J^T + 0.3 I,
    explicit inverse, depth order, the 3DGS kernel loop (skip alpha < 1/255, stop before
    T < 1e-4)."""
    view = cam.world_to_cam.double().numpy()
    rot, t = view[:3, :3], view[:3, 3]
    means, colors = g.means.double().numpy(), g.colors.double().numpy()
    opac = torch.sigmoid(g.opacity_logits.double()).numpy()
    items = []
    for i in range(len(g)):
        w, x, y, z = g.quats[i].double().numpy() / np.linalg.norm(g.quats[i].double().numpy())
        r = np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
                      [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
                      [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]])
        s = np.diag(np.exp(g.log_scales[i].double().numpy()))
        cov_c = rot @ (r @ s @ s @ r.T) @ rot.T
        pc = rot @ means[i] + t
        if pc[2] <= 0.01:
            continue
        tanx, tany = 0.5 * cam.width / cam.fx, 0.5 * cam.height / cam.fy
        limx = (cam.width - cam.cx) / cam.fx + 0.3 * tanx, cam.cx / cam.fx + 0.3 * tanx
        limy = (cam.height - cam.cy) / cam.fy + 0.3 * tany, cam.cy / cam.fy + 0.3 * tany
        tx = pc[2] * min(max(pc[0] / pc[2], -limx[1]), limx[0])
        ty = pc[2] * min(max(pc[1] / pc[2], -limy[1]), limy[0])
        jac = np.array([[cam.fx / pc[2], 0, -cam.fx * tx / pc[2] ** 2],
                        [0, cam.fy / pc[2], -cam.fy * ty / pc[2] ** 2]])
        cov2 = jac @ cov_c @ jac.T + 0.3 * np.eye(2)
        centre = np.array([cam.fx * pc[0] / pc[2] + cam.cx, cam.fy * pc[1] / pc[2] + cam.cy])
        items.append((pc[2], centre, np.linalg.inv(cov2), opac[i], colors[i]))
    items.sort(key=lambda it: it[0])
    image = np.zeros((cam.height, cam.width, 3))
    trans = np.ones((cam.height, cam.width))
    for py in range(cam.height):
        for px in range(cam.width):
            t_cur, c = 1.0, np.zeros(3)
            for _, centre, inv, o, col in items:
                d = np.array([px + 0.5, py + 0.5]) - centre
                sigma = 0.5 * d @ inv @ d
                if sigma < 0:
                    continue
                alpha = min(ALPHA_MAX, o * math.exp(-sigma))
                if alpha < ALPHA_MIN:
                    continue
                if t_cur * (1 - alpha) < T_STOP:
                    break
                c += col * alpha * t_cur
                t_cur *= 1 - alpha
            image[py, px] = c + background * t_cur
            trans[py, px] = t_cur
    return image, trans


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rasterizer_matches_a_brute_force_renderer(seed):
    """Gaussians reach beyond their 3-sigma box only below the 1/255 cut, so tile culling
    changes nothing; dense scenes also exercise the early stop."""
    g = _scene(30, seed, opacity=(0.3, 0.99))
    cam = _camera(20, seed)
    image, trans = render(g, cam, background=0.2, tile=8)
    ref_image, ref_trans = _brute_force(g, cam, background=0.2)
    assert np.abs(image.numpy() - ref_image).max() < 1e-6
    assert np.abs(trans.numpy() - ref_trans).max() < 1e-6
    assert (ref_trans < 0.5).any() and (ref_trans > 0.99).any()


def test_projected_covariance_matches_monte_carlo():
    """Project 2e5 samples of a small Gaussian far from the camera through the pinhole: their
    covariance is J Sigma J^T (the 0.3 blur removed)."""
    g = _scene(1, 3)
    g.means[:] = torch.tensor([0.05, -0.03, 0.1], dtype=torch.float64)
    g.log_scales[:] = torch.log(torch.tensor([0.02, 0.01, 0.015], dtype=torch.float64))
    cam = _camera(64, 1)
    proj = project(g, cam)
    from methods.gscoreset.rasterizer import covariances

    rng = np.random.default_rng(0)
    pts = rng.multivariate_normal(g.means[0].numpy(), covariances(g)[0].numpy(), 200000)
    view = cam.world_to_cam.double().numpy()
    pc = pts @ view[:3, :3].T + view[:3, 3]
    uv = np.stack([cam.fx * pc[:, 0] / pc[:, 2] + cam.cx, cam.fy * pc[:, 1] / pc[:, 2] + cam.cy],
                  1)
    expected = proj.cov2d[0].numpy() - 0.3 * np.eye(2)
    assert np.allclose(np.cov(uv.T), expected, rtol=0.03, atol=0.02 * np.abs(expected).max())
    assert np.allclose(uv.mean(0), proj.means2d[0].numpy(), atol=0.05)


def test_unit_weights_and_split_halves_render_the_same():
    g = _scene(12, 4, opacity=(0.2, 0.6))
    cam = _camera(24, 4)
    image, trans = render(g, cam)
    image_w, trans_w = render(g, cam, torch.ones(len(g), dtype=torch.float64))
    assert torch.equal(image, image_w) and torch.equal(trans, trans_w)
    doubled = Gaussians(*(torch.cat([t, t[:1]]) for t in (g.means, g.quats, g.log_scales,
                                                         g.opacity_logits, g.colors)))
    weights = torch.ones(len(doubled), dtype=torch.float64)
    weights[0] = weights[-1] = 0.5
    # the halves' alphas stay above the 1/255 cut where the whole one is visible enough
    image_s, trans_s = render(doubled, cam, weights)
    visible = trans > 0.02
    assert torch.allclose(trans_s[visible], trans[visible], atol=1e-3)
    assert torch.allclose(image_s[visible], image[visible], atol=2e-3)


def test_optical_depth_is_minus_log_rendered_transmittance():
    """F(r) = sum_i tau_i(r) from the objective equals -log T(r) from the renderer wherever
    the early stop did not trigger: sum_i tau_i(r) / F(r) = 1 on every ray."""
    g = _scene(40, 5)
    cam = _camera(24, 5)
    tau = optical_depth(g.detach(), cam)
    _, trans = render(g, cam)
    f_render = -torch.log(trans.flatten())
    ok = (trans.flatten() > 1e-3) & (f_render > 1e-6)
    assert ok.sum() > 100
    assert torch.allclose(tau.sum(1)[ok].double() / f_render[ok], torch.ones(int(ok.sum()),
                          dtype=torch.float64), atol=1e-5)


def test_total_sensitivity_is_at_most_the_number_of_rays():
    for seed in range(3):
        g = _scene(60, seed).detach()
        cams = [_camera(16, seed + k) for k in range(3)]
        objective = RayObjective(g, cams, eta=0.0)
        shares = objective.shares()
        assert float(shares["max"].sum()) <= objective.rays
        assert torch.all(shares["max"] <= 1 + 1e-6)
        assert float(shares["sum"].sum()) == pytest.approx(
            float((objective.full > 0).sum()), rel=1e-5)


def test_disjoint_tiny_gaussians_have_every_sensitivity_one():
    """The impossibility construction: each ray meets at most one Gaussian, so every
    Gaussian's sensitivity is 1 and S = N (no multiplicative coreset smaller than N)."""
    k = 5
    xs = torch.linspace(-0.8, 0.8, k, dtype=torch.float64)
    means = torch.stack([torch.stack([x, y, torch.tensor(0.0, dtype=torch.float64)])
                         for x in xs for y in xs])
    n = means.shape[0]
    g = Gaussians(means, torch.tensor([[1.0, 0, 0, 0]] * n, dtype=torch.float64),
                  torch.full((n, 3), math.log(0.01), dtype=torch.float64),
                  torch.full((n,), 2.0, dtype=torch.float64),
                  torch.full((n, 3), 0.5, dtype=torch.float64))
    cam = Camera.look_at((0, 0, -3.0), (0, 0, 0), (0, 1, 0), 50.0, 64, 64)
    objective = RayObjective(g, [cam], eta=0.0)
    s = sensitivities(objective.shares(), "max")
    assert torch.allclose(s, torch.ones(n, dtype=s.dtype)) and float(s.sum()) == pytest.approx(n)


@pytest.mark.parametrize("sampler", ["poisson", "multinomial"])
def test_weighted_estimates_are_unbiased(sampler):
    g = _scene(80, 6).detach()
    objective = RayObjective(g, [_camera(16, 6)], eta=0.05)
    s = sensitivities(objective.shares(), "mix")
    gen = torch.Generator().manual_seed(0)
    draws = torch.stack([objective.estimate(
        poisson_sample(s, 20, gen) if sampler == "poisson" else multinomial_sample(s, 20, gen))
        for _ in range(2000)])
    hit = objective.full > 0.05
    z = (draws.mean(0) - objective.full)[hit] / (draws.std(0)[hit] / math.sqrt(2000) + 1e-12)
    assert z.abs().max() < 4.5


def test_poisson_sampler_hits_the_budget_in_expectation():
    s = torch.rand(1000, generator=torch.Generator().manual_seed(0)) ** 3
    gen = torch.Generator().manual_seed(1)
    sizes = [len(poisson_sample(s, 100, gen)) for _ in range(300)]
    assert abs(np.mean(sizes) - 100) < 1.5


def test_ply_round_trip_is_bit_identical(tmp_path):
    g = procedural_scene(50, np.random.default_rng(0))
    save_ply(tmp_path / "a.ply", vertex_array(g))
    loaded, vertex = load_ply(tmp_path / "a.ply")
    save_ply(tmp_path / "b.ply", vertex)
    assert (tmp_path / "a.ply").read_bytes() == (tmp_path / "b.ply").read_bytes()
    assert torch.allclose(loaded.colors, g.colors, atol=1e-6)
    assert torch.allclose(loaded.opacities, g.opacities, atol=1e-6)
    assert torch.allclose(torch.tensor(vertex["f_dc_0"]) * SH_C0 + 0.5, g.colors[:, 0],
                          atol=1e-6)


def test_missing_ply_is_one_clear_error(tmp_path):
    _, failed = run_failing(["+paper=gscoreset", "dataset=ply",
                             f"dataset.path={tmp_path}/point_cloud.ply",
                             f"dataset.colmap={tmp_path}"], tmp_path / "run")
    assert "point_cloud.ply" in failed["error"] and "\n" not in failed["error"]


def test_pup_fisher_matches_finite_differences():
    """F_i = sum over channels of g g^T with g from central differences of the image's channel
    sums (one 24x24 patch) in float64; the log-det score follows the Gaussians' order."""
    g = _scene(3, 7, opacity=(0.4, 0.8))
    cam = _camera(24, 7)
    fisher = pup_fisher(g, [cam], patch=24)
    eps = 1e-6
    for i in range(len(g)):
        columns = []
        for field, dim in [("means", d) for d in range(3)] + [("log_scales", d)
                                                               for d in range(3)]:
            values = []
            for sign in (1, -1):
                moved = g.detach()
                getattr(moved, field)[i, dim] += sign * eps
                values.append(render(moved, cam)[0].sum((0, 1)))
            columns.append((values[0] - values[1]) / (2 * eps))
        jac = torch.stack(columns, 1)  # (3 channels, 6)
        expected = jac.T @ jac
        assert expected.abs().max() > 0
        assert torch.allclose(fisher[i], expected, rtol=1e-4, atol=1e-6 * expected.abs().max())
    scores = pup_fisher_scores(g, [cam], patch=24)
    perm = torch.tensor([2, 0, 1])
    assert torch.allclose(pup_fisher_scores(g.subset(perm), [cam], patch=24), scores[perm])


def test_folding_weights_into_opacity_is_exact_at_the_centre():
    g = _scene(1, 8, opacity=(0.5, 0.5))
    cam = Camera.look_at((0, 0, -3.0), (0, 0, 0), (0, 1, 0), 50.0, 33, 33)
    g.means[:] = 0
    w = torch.tensor([3.0], dtype=torch.float64)
    weighted = render(g, cam, w)[1][16, 16]
    folded = render(g.with_weights_in_opacity(w), cam)[1][16, 16]
    assert float(weighted) == pytest.approx(float(folded), abs=1e-6)
    assert float(weighted) == pytest.approx(0.5 ** 3, abs=1e-3)


def test_finetune_improves_a_pruned_scene():
    from methods.gscoreset import finetune, top_k

    rng = np.random.default_rng(0)
    scene = procedural_scene(200, rng)
    cams = sphere_cameras(3, rng, 24)
    targets = [render(scene, c)[0].clamp(0, 1).detach() for c in cams]
    kept = scene.subset(top_k(scene.opacities.detach(), 60).index)
    before = np.mean([float(((render(kept, c)[0].clamp(0, 1) - t) ** 2).mean())
                      for c, t in zip(cams, targets, strict=True)])
    tuned = finetune(kept, cams, targets, 30, 1.0)
    after = np.mean([float(((render(tuned, c)[0].clamp(0, 1) - t) ** 2).mean())
                     for c, t in zip(cams, targets, strict=True)])
    assert after < 0.8 * before


SMALL_RUN = SMOKE["gscoreset"]


def test_protocol_run(smoke_run):
    m, run_dir = smoke_run("gscoreset")
    for key in ("psnr_sensitivity_weighted_10pct", "psnr_opacity_topk_10pct",
                "psnr_uniform_weighted_10pct", "worst_objective_err_sensitivity_20pct",
                "worst_objective_err_importance_20pct", "total_sensitivity_over_rays",
                "guarantee_failure_rate_at_bound"):
        assert key in m and math.isfinite(m[key])
    assert m["total_sensitivity_over_rays"] <= 1
    assert "psnr_novel_sensitivity_10pct_finetuned" in m


@pytest.mark.gpu
def test_rasterizer_matches_gsplat_on_gpu():
    pytest.importorskip("gsplat")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from methods.gscoreset.rasterizer import render_gsplat

    g = _scene(200, 9, dtype=torch.float32)
    cam = _camera(64, 9)
    ours, ours_t = render(g, cam)
    on_gpu = Gaussians(*(t.cuda() for t in (g.means, g.quats, g.log_scales, g.opacity_logits,
                                            g.colors)))
    theirs, theirs_t = render_gsplat(on_gpu, cam)
    assert torch.abs(theirs.cpu() - ours).mean() < 5e-3
    assert torch.abs(theirs_t.cpu() - ours_t).mean() < 5e-3
