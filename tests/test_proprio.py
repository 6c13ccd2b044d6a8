"""proprio: the flow residual of the exact velocity of Gaussian data equals the closed-form
conditional variance, shared perturbations make the score deterministic and cut the variance
of score differences, the motion mask equals a scipy reimplementation on a moving square,
the Physics-IQ formula on hand-made rows, gradcheck of the score, the physics evaluator
against controlled corruptions, and a protocol run."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from data.bouncing_balls import CORRUPTIONS, BallWorld, corrupt, physics_error, real_clips
from methods.proprio.score import (
    ScoreOptions,
    motion_mask,
    physics_iq_metrics,
    physics_iq_score,
    proprio_score,
    residuals,
    shared_perturbations,
)

from .conftest import run_failing, run_paper

MU, SD = 0.3, 0.7  # Gaussian data x0 ~ N(MU, SD^2) per pixel


class GaussianOracle(nn.Module):
    """The exact rectified-flow velocity E[eps - x0 | x_s] of Gaussian data."""

    def forward(self, x, s, condition):
        s = s.reshape(-1, 1, 1, 1)
        var = (1 - s) ** 2 * SD**2 + s**2
        centred = x - (1 - s) * MU
        e_eps = s / var * centred
        e_x0 = MU + (1 - s) * SD**2 / var * centred
        return e_eps - e_x0


@pytest.mark.parametrize("s", [0.2, 0.5, 0.8])
def test_residual_of_the_exact_flow_is_the_conditional_variance(s):
    torch.manual_seed(0)
    x0 = MU + SD * torch.randn(400, 4, 6, 6, dtype=torch.float64)
    eps = torch.randn(8, 4, 6, 6, dtype=torch.float64)
    opts = ScoreOptions(sigmas=(s,), perturbations=8, mask=False)
    r = residuals(GaussianOracle(), x0, x0[:, :2], eps, opts)  # (B, K, 1) per-pixel means
    var_s = (1 - s) ** 2 * SD**2 + s**2
    expected = 1 + SD**2 - (s - (1 - s) * SD**2) ** 2 / var_s
    assert float(r.mean()) == pytest.approx(expected, rel=0.03)


def test_shared_perturbations_are_deterministic_and_reduce_variance():
    torch.manual_seed(1)
    net = GaussianOracle()
    opts = ScoreOptions(perturbations=2, mask=False)
    a = MU + SD * torch.randn(1, 4, 6, 6, dtype=torch.float64)
    b = a + 0.3 * torch.randn_like(a)
    eps = shared_perturbations(a.shape[1:], 2, 0).double()
    assert torch.equal(proprio_score(net, a, a[:, :2], eps, opts),
                       proprio_score(net, a, a[:, :2], eps, opts))
    shared, independent = [], []
    for seed in range(200):
        e1 = shared_perturbations(a.shape[1:], 2, seed).double()
        e2 = shared_perturbations(a.shape[1:], 2, 10_000 + seed).double()
        ra = proprio_score(net, a, a[:, :2], e1, opts)
        shared.append(float(ra - proprio_score(net, b, b[:, :2], e1, opts)))
        independent.append(float(ra - proprio_score(net, b, b[:, :2], e2, opts)))
    assert np.var(shared) < 0.5 * np.var(independent)


def test_motion_mask_matches_a_scipy_reimplementation_on_a_moving_square():
    from scipy import ndimage

    t, size = 6, 24
    clip = np.zeros((t, size, size), dtype=np.float32)
    for i in range(t):
        clip[i, 8:14, 4 + 2 * i:10 + 2 * i] = 1.0
    opts = ScoreOptions(mask_kernel=3, mask_dilate=0, mask_threshold=0.04)
    ours = motion_mask(torch.tensor(clip)[None], opts)[0].numpy().astype(bool)
    avg = clip[0].astype(np.float64)
    expected = [np.zeros((size, size), bool)]
    for i in range(1, t):
        avg = 0.3 * clip[i] + 0.7 * avg
        m = np.abs(clip[i] - avg) > 0.04
        m = ndimage.binary_opening(m, np.ones((3, 3)))
        expected.append(ndimage.binary_closing(m, np.ones((3, 3))))
    assert not ours[0].any() and ours[1:].any()
    assert np.array_equal(ours[:, 2:-2, 2:-2], np.array(expected)[:, 2:-2, 2:-2])
    assert not ours[:, 18:].any()  # far from the square


def test_physics_iq_formula_on_hand_made_rows():
    score = physics_iq_score(0.5, 0.6, 0.4, 0.01, 0.8, 0.9, 0.7, 0.005)
    assert score == pytest.approx(((0.5 / 0.8 + 0.6 / 0.9 + 0.4 / 0.7) / 3 - 0.005) * 100)
    assert physics_iq_score(1, 1, 1, 0, 0.8, 0.9, 0.7, 0.0) == 100.0  # ratios > 1, clipped
    assert physics_iq_score(0, 0, 0, 0.5, 0.8, 0.9, 0.7, 0.0) == 0.0
    a = np.zeros((3, 4, 4), bool)
    a[1:, 1, 1] = True
    same = physics_iq_metrics(a, a, a.astype(float), a.astype(float))
    assert same == {"st_iou": 1.0, "s_iou": 1.0, "ws_iou": 1.0, "mse": 0.0}


def test_score_gradcheck():
    torch.manual_seed(2)
    net = nn.Sequential(nn.Flatten(), nn.Linear(3 * 4 * 4, 3 * 4 * 4), nn.Tanh(),
                        nn.Unflatten(1, (3, 4, 4))).double()

    class Wrapped(nn.Module):
        def forward(self, x, s, condition):
            return net(x) * s.reshape(-1, 1, 1, 1)

    x = torch.rand(2, 3, 4, 4, dtype=torch.float64, requires_grad=True)
    eps = torch.randn(2, 3, 4, 4, dtype=torch.float64)
    opts = ScoreOptions(sigmas=(0.3, 0.7), perturbations=2)
    assert torch.autograd.gradcheck(
        lambda v: proprio_score(Wrapped(), v, v[:, :2].detach(), eps, opts), (x,))


def test_physics_error_separates_real_clips_from_each_corruption():
    from sklearn.metrics import roc_auc_score

    world = BallWorld()
    rng = np.random.default_rng(0)
    real = physics_error(world, real_clips(world, 300, rng))
    for kind in CORRUPTIONS:
        bad = physics_error(world, corrupt(world, kind, 300, rng))
        auroc = roc_auc_score(np.r_[np.zeros(300), np.ones(300)], np.r_[real, bad])
        assert auroc > 0.8, kind


SMALL_RUN = ["+paper=proprio", "protocol.generator.steps=30", "protocol.conditions=3",
             "protocol.samples_per_condition=4", "protocol.eval_clips=40",
             "protocol.discriminator_clips=100", "protocol.refine.steps=2",
             "protocol.sampler_steps=4"]


def test_protocol_run(tmp_path):
    m = run_paper(SMALL_RUN, tmp_path / "run")
    for key in ("spearman_score_vs_physics_err", "auroc_real_vs_corrupted",
                "physics_err_bon4_over_bon1", "refine_physics_err_ratio", "mask_ablation_gain",
                "physics_iq_bon1"):
        assert key in m and math.isfinite(m[key]), key
    assert (tmp_path / "run" / "figures" / "proprio.png").exists()


def test_gaussian_blur_matches_opencv_rule_via_scipy():
    from scipy import ndimage

    from methods.proprio.score import gaussian_blur

    img = np.random.default_rng(0).random((12, 15))
    ours = gaussian_blur(torch.tensor(img)[None, None], 5)[0, 0].numpy()
    sigma = 0.3 * ((5 - 1) * 0.5 - 1) + 0.8  # OpenCV's default for a 5x5 kernel
    theirs = ndimage.gaussian_filter(img, sigma, mode="mirror", truncate=2 / sigma)
    assert np.allclose(ours, theirs, atol=1e-12)


def _write_video(path, frames, fps=10):
    import av

    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=fps)
        stream.width, stream.height, stream.pix_fmt = 32, 32, "yuv420p"
        for f in frames:
            img = np.repeat((f * 255).astype(np.uint8)[..., None], 3, -1)
            for packet in stream.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def _square(t, shift=0):
    out = np.zeros((t, 32, 32))
    for i in range(t):
        out[i, 10:18, 2 + 2 * i + shift:10 + 2 * i + shift] = 1.0
    return out


def test_physics_iq_dataset_scores_generated_videos(tmp_path):
    pytest.importorskip("av")
    real, perfect, frozen = tmp_path / "real", tmp_path / "perfect", tmp_path / "frozen"
    for folder in (real, perfect, frozen):
        folder.mkdir()
    name = "0001_testing-videos_10FPS_center_take-{}_ball-roll.mp4"
    _write_video(real / name.format(1), _square(10))
    _write_video(real / name.format(2), _square(10, shift=1))
    _write_video(perfect / "0001_center_ball-roll.mp4", _square(10))
    _write_video(frozen / "0001_center_ball-roll.mp4", np.repeat(_square(1), 10, 0))
    common = ["+paper=proprio", "dataset=physics_iq", f"dataset.real_root={real}",
              "dataset.seconds=1.0", "dataset.downscale=1"]
    good = run_paper([*common, f"dataset.generated_root={perfect}"], tmp_path / "good")
    bad = run_paper([*common, f"dataset.generated_root={frozen}"], tmp_path / "bad")
    assert good["scenarios"] == 1 and good["st_iou"] == 1.0 and good["mse"] == 0.0
    assert good["physics_iq_score"] == 100.0 > bad["physics_iq_score"]


def test_missing_physics_iq_folders_fail_with_one_line(tmp_path):
    code, failed = run_failing(["+paper=proprio", "dataset=physics_iq",
                                f"dataset.real_root={tmp_path}/nowhere",
                                f"dataset.generated_root={tmp_path}"], tmp_path / "run")
    assert code == 2 and "not found" in failed["error"]
