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

from data.bouncing_balls import (
    CORRUPTIONS,
    BallWorld,
    acceleration_error,
    contact_frames,
    corrupt,
    physics_error,
    real_clips,
    simulate,
)
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
from .miniatures import tiny_wan_pipeline
from .smoke import SMOKE

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


def test_acceleration_error_is_zero_on_true_trajectories_with_fast_bounces():
    """The simulator's own centres obey the ballistic model wherever the evaluator looks,
    including rebounds between two frames clear of the walls (57 of 6,825 such frames were
    charged up to 3.4 px/frame^2 when only the margin test excluded contacts), while a
    wrong gravity on the same kind of trajectories is charged."""
    world = BallWorld()
    centres = simulate(world, 2000, np.random.default_rng(5))
    assert np.abs(acceleration_error(world, centres)).max() < 1e-9
    falling = simulate(world, 300, np.random.default_rng(6), gravity_sign=-1.0)
    assert np.median(acceleration_error(world, falling)) > 0.5


def test_contact_detection_marks_a_fast_floor_bounce_and_not_free_flight():
    world = BallWorld()
    y = [4.64, 5.06, 5.84, 6.97, 8.44, 10.27, 12.45, 12.53]  # rebound between the last two
    centres = np.stack([np.linspace(10.6, 12.6, 8), np.array(y)], -1)
    assert contact_frames(world, centres).tolist() == [False] * 4 + [True, True]
    t = np.arange(8.0)
    flight = np.stack([7 + 0.3 * t, 3 + 0.2 * t + world.g * t**2 / 2], -1)
    assert not contact_frames(world, flight).any()


def test_physics_error_separates_real_clips_from_each_corruption():
    from sklearn.metrics import roc_auc_score

    world = BallWorld()
    rng = np.random.default_rng(0)
    real = physics_error(world, real_clips(world, 300, rng))
    for kind in CORRUPTIONS:
        bad = physics_error(world, corrupt(world, kind, 300, rng))
        auroc = roc_auc_score(np.r_[np.zeros(300), np.ones(300)], np.r_[real, bad])
        assert auroc > 0.8, kind


SMALL_RUN = SMOKE["proprio"]


def test_protocol_run(smoke_run):
    m, run_dir = smoke_run("proprio")
    for key in ("spearman_score_vs_physics_err", "auroc_real_vs_corrupted",
                "physics_err_bon4_over_bon1", "refine_physics_err_ratio", "mask_ablation_gain",
                "physics_iq_bon1"):
        assert key in m and math.isfinite(m[key]), key
    assert (run_dir / "figures" / "proprio.png").exists()


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


def test_wan_self_score_is_the_residual_of_its_transformer():
    from methods.proprio.wan import WanSelfScorer, latent_mask

    pipe = tiny_wan_pipeline()
    opts = ScoreOptions(sigmas=(0.3, 0.7), perturbations=2, beta=0.0, mask=False)
    scorer = WanSelfScorer(pipe, opts, seed=3)
    out = scorer.best_of_n("a ball falls", 3, torch.Generator().manual_seed(0), num_frames=5,
                           height=32, width=32, num_inference_steps=2, guidance_scale=1.0)
    latents, scores = out["latents"], out["scores"]
    assert latents.shape == (3, 4, 2, 4, 4) and out["best"] == int(scores.argmin())
    embeds = scorer.embed(["a ball falls"])
    eps = shared_perturbations(tuple(latents.shape[1:]), 2, 3)
    by_hand = torch.zeros(3)
    with torch.no_grad():  # the mean over (s, eps) of ||v(z_s, 1000 s, c) - (eps - z0)||^2 / n
        for e in eps:
            for s in opts.sigmas:
                v = pipe.transformer(hidden_states=(1 - s) * latents + s * e,
                                     timestep=torch.full((3,), 1000 * s),
                                     encoder_hidden_states=embeds.expand(3, -1, -1),
                                     return_dict=False)[0]
                by_hand += ((v - (e - latents)) ** 2).flatten(1).mean(1) / 4
    torch.testing.assert_close(scores, by_hand, rtol=1e-3, atol=1e-6)
    torch.testing.assert_close(scorer.score(latents, embeds), scores)  # shared perturbations
    # the normalisation round trip: decode then encode returns latents of the same layout
    assert scorer.encode(scorer.decode(latents)).shape == latents.shape
    mask = torch.zeros(1, 9, 16, 16)
    mask[0, 6, 9, 2] = 1  # pixel frame 6 is in latent frame 2 (frames 5-8), pixel (9, 2)
    pooled = latent_mask(mask, temporal=4, spatial=8)
    assert pooled.shape == (1, 1, 3, 2, 2) and pooled.sum() == 1 and pooled[0, 0, 2, 1, 0] == 1


def _check_self_selection(run_dir, metrics):
    """Each prompt's pick is the lowest of its recorded scores, and the ratio metric is
    recomputed from the table (a wrong pick or ratio fails here)."""
    import csv

    with open(run_dir / "tables" / "self_selection.csv") as f:
        rows = list(csv.DictReader(f))
    best, first = [], []
    for row in rows:
        scores = [float(v) for v in row["scores"].split()]
        assert int(row["best"]) == int(np.argmin(scores))
        best.append(min(scores))
        first.append(scores[0])
    assert metrics["score_best_over_first"] == pytest.approx(np.mean(best) / np.mean(first),
                                                             rel=1e-4)


def test_wan_path_runs_from_a_local_pipeline_and_fails_offline_with_one_line(tmp_path):
    tiny_wan_pipeline().save_pretrained(tmp_path / "wan")
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("a ball falls\na ball bounces\n")
    run_dir = tmp_path / "run"
    metrics = run_paper(["+paper=proprio", "model=wan2.1-t2v-1.3b",
                         f"model.hub_id={tmp_path / 'wan'}", "model.dtype=float32",
                         "dataset=videophy2", f"dataset.prompts_file={prompts}",
                         "protocol.video.samples_per_prompt=2", "protocol.video.num_frames=5",
                         "protocol.video.height=32", "protocol.video.width=32",
                         "protocol.video.num_inference_steps=2",
                         "protocol.video.guidance_scale=1.0"], run_dir)
    assert metrics["prompts"] == 2
    _check_self_selection(run_dir, metrics)
    assert len(list((run_dir / "videos").glob("*.mp4"))) == 4
    _, failed = run_failing(["+paper=proprio", "model=wan2.1-t2v-1.3b", "dataset=videophy2",
                             f"dataset.prompts_file={prompts}"], tmp_path / "offline")
    assert "Wan-AI/Wan2.1-T2V-1.3B-Diffusers" in failed["error"] and "\n" not in failed["error"]


@pytest.mark.gpu
def test_wan_self_selection_on_gpu(tmp_path):
    """The real Wan 2.1 1.3B pipeline (it must be in the local Hugging Face cache)."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("A ball is dropped onto a wooden floor and bounces twice.\n")
    metrics = run_paper(["+paper=proprio", "model=wan2.1-t2v-1.3b", "device=cuda",
                         "dataset=videophy2", f"dataset.prompts_file={prompts}",
                         "protocol.video.samples_per_prompt=2", "protocol.video.num_frames=17",
                         "protocol.video.height=240", "protocol.video.width=416",
                         "protocol.video.num_inference_steps=10"], tmp_path / "run")
    assert metrics["prompts"] == 1
    _check_self_selection(tmp_path / "run", metrics)


def test_best_of_n_picks_the_planted_lowest_score():
    from methods.proprio.selection import best_of_n_curves, best_of_n_error

    errors = [np.array([4.0, 1.0, 3.0, 2.0]), np.array([2.0, 6.0, 1.0, 5.0])]
    scores = [np.array([0.9, 0.1, 0.5, 0.7]), np.array([0.3, 0.8, 0.2, 0.9])]
    assert best_of_n_error(errors, scores, 1) == 3.0  # first samples: (4 + 2) / 2
    assert best_of_n_error(errors, scores, 2) == 1.5  # picks 1.0 and 2.0
    assert best_of_n_error(errors, scores, 4) == 1.0  # picks 1.0 and 1.0
    curves = best_of_n_curves(errors, {"planted": scores}, [1, 4])
    single = np.mean([e.mean() for e in errors])
    assert curves["planted"] == pytest.approx([3.0 / single, 1.0 / single])
    assert curves["random"] == pytest.approx([3.0 / single, 1.0])


def test_score_aggregations_read_the_same_residuals():
    """R is the full aggregation; one noise level or one perturbation is R on that slice;
    without the stability term it is the plain mean; each equals a hand computation."""
    from methods.proprio.score import aggregate, score_aggregations

    r = torch.rand(5, 3, 4, dtype=torch.float64)
    opts = ScoreOptions(sigmas=(0.2, 0.4, 0.6, 0.8), perturbations=3, beta=0.5)
    out = score_aggregations(r, opts)
    per_k = r.mean(-1)
    assert torch.allclose(out["full"], per_k.mean(1) + 0.5 * per_k.std(1))
    assert torch.allclose(out["no_stability"], r.mean((1, 2)))
    assert torch.allclose(out["sigma0.4"], r[:, :, 1].mean(1) + 0.5 * r[:, :, 1].std(1))
    assert torch.allclose(out["perturbation2"], r[:, 2].mean(-1))
    assert sorted(out) == sorted(["full", "no_stability", "sigma0.2", "sigma0.4", "sigma0.6",
                                  "sigma0.8", "perturbation0", "perturbation1",
                                  "perturbation2"])
    assert torch.equal(aggregate(r, 0.5), out["full"])


@pytest.mark.parametrize("architecture", ["mlp", "transformer"])
@pytest.mark.parametrize("condition_frames", [1, 2])
def test_generators_keep_the_condition_and_have_a_zero_loss_oracle(architecture,
                                                                    condition_frames):
    """Both networks map clips to clips; the sampler writes the given frames back; the
    held-out loss is the denoising error, zero for a network that returns the clean clip."""
    from methods.proprio.generator import (
        build_generator,
        condition_of,
        held_out_flow_loss,
        sample,
    )

    world = BallWorld(8, 16, 1.4, 0.35, 0.85)
    net = build_generator(world, architecture, 16, 2, condition_frames)
    clips = torch.as_tensor(real_clips(world, 3, np.random.default_rng(0)))
    cond = condition_of(clips, condition_frames)
    assert cond.shape == (3, condition_frames, 16, 16)
    with torch.no_grad():
        out = sample(net, cond, torch.randn_like(clips), 3, 3.0)
    assert out.shape == clips.shape and torch.equal(out[:, :condition_frames], cond)

    class Oracle(type(net)):
        def denoise(self, x, s, condition):
            return clips

    oracle = build_generator(world, architecture, 16, 2, condition_frames)
    oracle.__class__ = Oracle
    assert held_out_flow_loss(oracle, clips, 0) == 0.0
    assert held_out_flow_loss(net, clips, 0) > 0.0
