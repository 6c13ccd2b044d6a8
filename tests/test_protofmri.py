"""protofmri: attribution completeness, ridge against scikit-learn (fixed alpha and the
cross-validated choice), the noise-ceiling estimator against planted values, top-k
sparsity, pushed prototypes are real patches, prototype-order invariance, the renderer's
masks, and a protocol run."""

from __future__ import annotations

import numpy as np
import pytest

from data.stimulus_world import (
    CONCEPTS,
    concept_drive,
    random_scenes,
    render,
    responses,
    voxel_population,
)
from methods.protofmri import (
    PatchFeatures,
    PrototypeLayer,
    attributions,
    auroc,
    auroc_table,
    concept_tuning,
    fit_pooled_readout,
    fit_prototypes,
    noise_ceiling,
    push,
    ridge_cv,
    ridge_fit,
    select_prototypes,
    synthesize,
    tuning_recovery,
)
from methods.protofmri.model import gaussian_pools

from .conftest import run_failing, run_paper
from .miniatures import write_nsd


def _tokens(n=40, seed=0):
    rng = np.random.default_rng(seed)
    scenes = [rng.choice(12, 2, replace=False).tolist() for _ in range(n)]
    stimuli = render(scenes, rng)
    return PatchFeatures(16, seed=seed).tokens(stimuli.images), stimuli


def test_attributions_sum_to_the_prediction():
    rng = np.random.default_rng(0)
    a = np.maximum(rng.standard_normal((30, 8)), 0)
    y = rng.standard_normal((30, 5))
    coef, intercept = ridge_fit(a, y, 1.0)
    contributions = attributions(coef, a)
    np.testing.assert_allclose(contributions.sum(-1) + intercept, a @ coef + intercept,
                               atol=1e-6)


def test_closed_form_ridge_equals_scikit_learn():
    from sklearn.linear_model import Ridge

    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((50, 7)), rng.standard_normal((50, 3))
    for alpha in (0.01, 1.0, 30.0):
        coef, intercept = ridge_fit(x, y, alpha)
        ref = Ridge(alpha=alpha).fit(x, y)
        np.testing.assert_allclose(coef, ref.coef_.T, atol=1e-8)
        np.testing.assert_allclose(intercept, ref.intercept_, atol=1e-8)


def test_cross_validated_alpha_is_the_brute_force_choice():
    from sklearn.linear_model import Ridge

    rng = np.random.default_rng(2)
    x = rng.standard_normal((60, 10))
    y = x @ rng.standard_normal((10, 4)) * np.array([0.05, 0.3, 1.0, 3.0]) \
        + rng.standard_normal((60, 4))
    alphas = [0.1, 1.0, 10.0, 100.0]
    fitted = ridge_cv(x, y, alphas, 4, np.random.default_rng(5))
    order = np.random.default_rng(5).permutation(60)
    errors = np.zeros((len(alphas), 4))
    for fold in np.array_split(order, 4):
        train = np.setdiff1d(order, fold)
        for i, alpha in enumerate(alphas):
            pred = Ridge(alpha=alpha).fit(x[train], y[train]).predict(x[fold])
            errors[i] += ((pred - y[fold]) ** 2).sum(0)
    np.testing.assert_array_equal(fitted.alpha, np.array(alphas)[errors.argmin(0)])
    assert len(set(fitted.alpha)) > 1  # the planted voxels differ in signal


def test_noise_ceiling_estimate_matches_the_planted_value():
    """40 voxels with ceilings from 0.2 to 0.8, 2000 images of 3 repeats: unbiased over the
    voxels (within 0.01), each within its sampling error (mean 0.014, at most 0.073 over
    seeds 3-8)."""
    rng = np.random.default_rng(3)
    masks = render(random_scenes(2000, rng), rng).masks
    population = voxel_population(40, masks, 3, (0.2, 0.8), rng, prf_sigma=12.0)
    error = noise_ceiling(responses(population, masks, 3, rng)) - population.true_noise_ceiling
    assert abs(error.mean()) < 0.01 and np.abs(error).mean() < 0.025
    assert np.abs(error).max() < 0.1


def test_top_k_sparsity_and_pushed_prototypes_are_real_patches():
    tokens, _ = _tokens()
    layer = fit_prototypes(tokens, 10, 3, 0.8, 0.5, np.random.default_rng(0), sample=2000)
    a = layer(tokens)
    assert ((a > 0).sum(1) <= 3).all() and ((a > 0).sum(1) == 3).mean() > 0.5
    flat = tokens.reshape(-1, tokens.shape[-1])
    distance = np.linalg.norm(layer.prototypes[:, None] - flat[None], axis=-1).min(1)
    np.testing.assert_allclose(distance, 0.0, atol=1e-6)
    again = push(layer.prototypes + 1e-3, flat, layer.centre)
    np.testing.assert_allclose(again, layer.prototypes, atol=1e-6)


def test_prototype_order_does_not_change_predictions():
    tokens, _ = _tokens(seed=1)
    layer = fit_prototypes(tokens, 8, 4, 0.8, 0.5, np.random.default_rng(1), sample=2000)
    perm = np.random.default_rng(2).permutation(8)
    permuted = PrototypeLayer(layer.prototypes[perm], layer.thresholds[perm], 4, layer.centre)
    y = np.random.default_rng(3).standard_normal((len(tokens), 6))
    a, b = layer(tokens), permuted(tokens)
    np.testing.assert_allclose(b, a[:, perm], atol=1e-12)
    coef_a, int_a = ridge_fit(a, y, 1.0)
    coef_b, int_b = ridge_fit(b, y, 1.0)
    np.testing.assert_allclose(a @ coef_a + int_a, b @ coef_b + int_b, atol=1e-8)


@pytest.mark.parametrize("voxels", [5, 90])  # 90 > 40 images: the SVD-reduced target
def test_greedy_selection_equals_brute_force_forward_selection(voxels):
    tokens, _ = _tokens()
    pool = fit_prototypes(tokens, 10, 10, 0.8, 0.5, np.random.default_rng(0), sample=2000)
    a = pool(tokens)
    rng = np.random.default_rng(4)
    y = a[:, [1, 6]] @ rng.standard_normal((2, voxels)) + 0.3 * rng.standard_normal(
        (len(a), voxels))
    z = (y - y.mean(0)) / y.std(0)
    chosen: list[int] = []
    for _ in range(4):  # refit least squares for every candidate at every step
        rss = {}
        for c in set(range(10)) - set(chosen):
            x = np.c_[np.ones(len(a)), a[:, chosen + [c]]]
            rss[c] = ((z - x @ np.linalg.lstsq(x, z, rcond=None)[0]) ** 2).sum()
        chosen.append(min(rss, key=rss.get))
    layer = select_prototypes(pool, tokens, y, 4, 2)
    np.testing.assert_array_equal(layer.prototypes, pool.prototypes[chosen])
    np.testing.assert_array_equal(layer.thresholds, pool.thresholds[chosen])
    assert layer.top_k == 2
    with pytest.raises(ValueError, match="pool of 10"):
        select_prototypes(pool, tokens, y, 11, 2)


def test_concept_tuning_recovers_the_planted_weights_of_perfect_detectors():
    rng = np.random.default_rng(6)
    presence = (rng.random((300, 4)) < 0.3).astype(float)
    planted = rng.lognormal(size=(20, 4)) * (rng.random((20, 4)) < 0.5)
    planted[np.arange(20), rng.integers(0, 4, 20)] = 1.0  # every voxel is tuned to something
    # prototypes 0 and 1 both detect concept 2 (activation 2 when shown); 2, 3, 4 detect 0, 1, 3
    a = 2.0 * presence[:, [2, 2, 0, 1, 3]]
    coef = np.stack([planted[:, 2] / 4, planted[:, 2] / 4, planted[:, 0] / 2,
                     planted[:, 1] / 2, planted[:, 3] / 2])
    tuning = concept_tuning(coef, a, presence, auroc_table(a, presence))
    np.testing.assert_allclose(tuning, planted, atol=1e-12)
    assert tuning_recovery(tuning, planted) == pytest.approx(1.0)


def test_tokens_do_not_depend_on_the_batch():
    rng = np.random.default_rng(7)
    images = render([[c] for c in range(12)] * 3, rng).images
    features = PatchFeatures(16, seed=3)
    np.testing.assert_allclose(features.tokens(images, batch=5), features.tokens(images),
                               rtol=1e-5, atol=1e-6)


def test_image_synthesis_raises_its_prototype_and_holds_the_others():
    tokens, stimuli = _tokens(n=24, seed=2)
    features = PatchFeatures(16, seed=2)
    layer = fit_prototypes(tokens, 8, 8, 0.9, 0.5, np.random.default_rng(2), sample=1500)
    before = layer(tokens)
    target = int(np.argsort(before.mean(0))[0])  # the least active prototype
    after = layer(features.tokens(synthesize(features, layer, stimuli.images, target, 60,
                                             0.03, hold=1.0)))
    rise = after - before
    assert rise[:, target].mean() > 0.02
    assert rise[:, target].mean() > 3 * np.abs(np.delete(rise, target, axis=1)).mean()
    untouched = synthesize(features, layer, stimuli.images, target, 0, 0.03, hold=1.0)
    np.testing.assert_array_equal(untouched, stimuli.images)


def test_renderer_masks_and_presence():
    stimuli = render([[0], [3, 7], []], np.random.default_rng(0))
    np.testing.assert_array_equal(stimuli.presence.sum(1), [1, 2, 0])
    assert stimuli.masks[1, 3].any() and stimuli.masks[1, 7].any()
    assert not stimuli.masks[0, 1:].any()
    assert len(CONCEPTS) == 12


def test_prf_drive_is_the_gaussian_over_the_concept_and_presence_without_prf():
    masks = np.zeros((2, 12, 64, 64), dtype=bool)
    masks[0, 3, 20:24, 40:44] = True  # one 4 x 4 block, centre (21.5, 41.5)
    masks[1, 5, 0:8, 0:4] = True  # two blocks, centres (1.5, 1.5) and (5.5, 1.5)
    centres = np.array([[21.5, 41.5], [1.5, 11.5]])
    drive = concept_drive(masks, centres, sigma=5.0)
    gauss = lambda p, c: np.exp(-((np.array(p) - c) ** 2).sum() / 50.0)  # noqa: E731
    np.testing.assert_allclose(drive[0, 3], [1.0, gauss((21.5, 41.5), centres[1])], rtol=1e-5)
    expected = [(gauss((1.5, 1.5), c) + gauss((5.5, 1.5), c)) / 2 for c in centres]
    np.testing.assert_allclose(drive[1, 5], expected, rtol=1e-5)
    assert drive[0, :3].sum() == 0 and drive[1, 6:].sum() == 0
    np.testing.assert_array_equal(concept_drive(masks, centres, None)[:, :, 0],
                                  masks.any(axis=(2, 3)))


def test_auroc_by_hand():
    assert auroc(np.array([0.1, 0.4, 0.35, 0.8]), np.array([0, 0, 1, 1])) == pytest.approx(0.75)
    assert auroc(np.ones(4), np.array([0, 1, 0, 1])) == pytest.approx(0.5)


def test_protocol_runs(smoke_run):
    metrics, run_dir = smoke_run("protofmri")
    for key in ("r_proto_over_r_blackbox", "concept_recovery_auroc_mean",
                "tuning_recovery_corr", "synthesis_selectivity", "pred_over_noise_ceiling"):
        assert np.isfinite(metrics[key]), key
    for figure in ("encoder", "concept_maps", "image_synthesis"):
        assert (run_dir / "figures" / f"{figure}.png").exists()


def test_pointing_game_by_hand():
    from methods.protofmri import pointing_game

    masks = np.zeros((2, 2, 16, 16), dtype=bool)
    masks[0, 0, :2, :2] = True  # concept 0 in patch 0 of image 0
    masks[1, 1, 14:, 14:] = True  # concept 1 in the last patch of image 1
    maps = np.zeros((2, 3, 64))
    maps[0, 2, 0] = 1.0  # prototype 2 (matched to concept 0) fires at patch 0: a hit
    maps[1, 1, 5] = 1.0  # prototype 1 (matched to concept 1) fires elsewhere: a miss
    assert pointing_game(maps, masks, np.array([2, 1])) == pytest.approx(0.5)
    # a hub ViT's 16 x 16 grid: patch 17 is row 1, column 1 (pixels 4-7 of 64)
    fine = np.zeros((1, 2, 256))
    fine[0, 0, 17] = 1.0
    small = np.zeros((1, 1, 64, 64), dtype=bool)
    small[0, 0, 5, 6] = True
    assert pointing_game(fine, small, np.array([0])) == pytest.approx(1.0)
    fine[0, 0, 18] = 2.0  # row 1, column 2: pixels 8-11, outside the mask
    assert pointing_game(fine, small, np.array([0])) == pytest.approx(0.0)
    with pytest.raises(ValueError, match="square"):
        pointing_game(np.zeros((1, 2, 60)), small, np.array([0]))


def test_a_backbone_by_name_fails_offline_with_one_line(tmp_path):
    _, failed = run_failing(["+paper=protofmri", "method.backbone=facebook/dinov2-small",
                             "dataset.train_images=20", "dataset.test_images=10"],
                            tmp_path / "run")
    assert "facebook/dinov2-small" in failed["error"] and "\n" not in failed["error"]


def _write_algonauts(root, images=120, vertices=30, seed=0):
    """A subject folder in the Algonauts 2023 layout: images of coloured quadrants and
    responses that are a linear function of the quadrant colours plus noise."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    split = root / "subj01" / "training_split"
    (split / "training_images").mkdir(parents=True)
    (split / "training_fmri").mkdir()
    (root / "subj01" / "roi_masks").mkdir()
    colours = rng.random((images, 4, 3))
    for i, c in enumerate(colours):
        pixels = np.zeros((64, 64, 3))
        for q, (r, s) in enumerate([(0, 0), (0, 32), (32, 0), (32, 32)]):
            pixels[r:r + 32, s:s + 32] = c[q]
        Image.fromarray((pixels * 255).astype(np.uint8)).save(
            split / "training_images" / f"train-{i + 1:04d}_nsd-{1000 + 7 * i:05d}.png")
    for h in ("lh", "rh"):
        weights = rng.normal(size=(12, vertices))
        fmri = colours.reshape(images, 12) @ weights + 0.3 * rng.normal(size=(images, vertices))
        np.save(split / "training_fmri" / f"{h}_training_fmri.npy", fmri.astype(np.float32))
        labels = np.zeros(vertices, dtype=int)
        labels[:vertices // 2] = rng.integers(1, 4, vertices // 2)
        np.save(root / "subj01" / "roi_masks" / f"{h}.prf-visualrois_challenge_space.npy",
                labels)


def test_algonauts_layout_loads_and_runs(tmp_path):
    from data.algonauts import load_algonauts

    _write_algonauts(tmp_path / "algonauts")
    subject = load_algonauts(str(tmp_path / "algonauts"), 1, "prf-visualrois", 64, limit=100)
    assert subject.images.shape == (100, 3, 64, 64) and subject.fmri.shape == (100, 30)
    assert subject.nsd_ids[:2].tolist() == [1000, 1007]
    assert (subject.hemisphere == "lh").sum() == 15 and 0 <= subject.images.min()
    whole = load_algonauts(str(tmp_path / "algonauts"), 1, None, 32)
    assert whole.fmri.shape == (120, 60) and whole.images.shape[-1] == 32
    run_dir = tmp_path / "run"
    metrics = run_paper(["+paper=protofmri", "dataset=algonauts2023",
                         f"dataset.root={tmp_path / 'algonauts'}", "method.prototypes=12",
                         "method.candidates=30", "dataset.test_fraction=0.25"], run_dir)
    assert metrics["voxels"] == 60 and metrics["r_blackbox_mean"] > 0.5
    assert metrics["r_proto_mean"] > 0.1  # some of the planted colour signal passes 12 prototypes
    assert (run_dir / "tables" / "prototypes.csv").is_file()
    _, failed = run_failing(["+paper=protofmri", "dataset=algonauts2023",
                             f"dataset.root={tmp_path / 'missing'}"], tmp_path / "fail")
    assert "subject 1 not found" in failed["error"]


def test_nsd_layout_groups_repeats_and_runs(tmp_path):
    import nibabel

    from data.nsd import load_nsd

    ids, positions, roi, betas, colours = write_nsd(tmp_path / "nsd")
    subject = load_nsd(str(tmp_path / "nsd"), 1, 2, "nsdgeneral", 64)
    trial_ids = ids[positions] - 1
    first = trial_ids[np.sort(np.unique(trial_ids, return_index=True)[1])]
    np.testing.assert_array_equal(subject.nsd_ids, first)
    assert subject.repeats.shape == (3, 400, int((roi > 0).sum()))
    counts = np.minimum(np.bincount(trial_ids, minlength=1000)[first], 3)
    np.testing.assert_array_equal((~np.isnan(subject.repeats[..., 0])).sum(0), counts)
    # the HDF5 session reads the same voxels in the same order as its NIfTI twin
    from data.nsd import _session_betas

    folder = tmp_path / "nsd/nsddata_betas/ppdata/subj01/func1pt8mm/betas_fithrf_GLMdenoise_RR"
    from_hdf5 = _session_betas(folder, 2, roi > 0)
    nibabel.save(nibabel.Nifti1Image(betas[..., 750:], np.eye(4)),
                 folder / "betas_session02.nii.gz")
    np.testing.assert_allclose(_session_betas(folder, 2, roi > 0), from_hdf5, atol=1e-2)
    # repeats of an image agree far above chance: the trials were grouped by image
    both = ~np.isnan(subject.repeats[:2, :, 0]).any(0)
    r = [np.corrcoef(subject.repeats[0, both, v], subject.repeats[1, both, v])[0, 1]
         for v in range(subject.repeats.shape[2])]
    assert np.median(r) > 0.5
    # the stimuli (each image's top-left quadrant has its id's colour) and shared-1000 flags
    assert subject.images.shape == (400, 3, 64, 64) and subject.shared.sum() == 60
    np.testing.assert_allclose(subject.images[:, :, 8, 8], colours[subject.nsd_ids, :3],
                               atol=0.01)
    run_dir = tmp_path / "run"
    metrics = run_paper(["+paper=protofmri", "dataset=nsd", f"dataset.root={tmp_path / 'nsd'}",
                         "dataset.sessions=2", "method.prototypes=12", "method.candidates=30"],
                        run_dir)
    assert metrics["test_images"] == 60 and 0.5 < metrics["noise_ceiling_mean"] <= 1
    assert metrics["r_blackbox_mean"] > 0.5 and np.isfinite(metrics["pred_over_noise_ceiling"])
    _, failed = run_failing(["+paper=protofmri", "dataset=nsd", f"dataset.root={tmp_path}",
                             "dataset.sessions=2"], tmp_path / "fail")
    assert "experimental design not found" in failed["error"]


def test_pooled_readout_finds_each_voxels_receptive_field():
    """Voxels that pool planted prototype maps through known Gaussian fields (centres on the
    8 x 8 patch grid, widths 1 and 2 patches): the fit names each field and predicts held-out
    responses almost exactly, where one global max per prototype cannot see position."""
    rng = np.random.default_rng(0)
    n, k, side = 600, 4, 8
    maps = np.maximum(rng.standard_normal((n, k, side * side)), 0) * (rng.random((n, k, 1)) < .5)
    pools = gaussian_pools(side, [1.0, 2.0])
    fields = rng.choice(len(pools), 20, replace=False)
    beta = rng.lognormal(0, 0.5, (k, 20))
    y = np.einsum("nkp,vp,kv->nv", maps, pools[fields], beta)
    y = y + 0.01 * y.std() * rng.standard_normal(y.shape)
    readout = fit_pooled_readout(maps[:500], y[:500], [1.0, 2.0], [1e-3, 1e-1, 10.0], 5, rng)
    assert np.array_equal(readout.pools[readout.field], pools[fields])
    r = [np.corrcoef(readout.predict(maps[500:])[:, v], y[500:, v])[0, 1] for v in range(20)]
    assert min(r) > 0.99
    blind = ridge_cv(maps[:500].max(-1), y[:500], [1e-3, 1e-1, 10.0], 5, rng)
    r_max = [np.corrcoef(blind.predict(maps[500:].max(-1))[:, v], y[500:, v])[0, 1]
             for v in range(20)]
    assert np.mean(r_max) < 0.9


def test_sparse_maps_keep_the_top_k_prototypes_of_each_image():
    rng = np.random.default_rng(1)
    tokens = rng.standard_normal((5, 16, 6))
    layer = fit_prototypes(tokens, 6, 2, 0.5, 1.0, rng)
    maps = layer.sparse_maps(tokens)
    assert np.array_equal(maps.max(-1), layer(tokens))
    assert ((maps.max(-1) > 0).sum(1) <= 2).all()


def test_the_pointing_games_chance_is_the_share_of_patches_a_concept_touches():
    """A concept covering one quadrant of a 2 x 2 grid in every image: a random patch lands
    on it a quarter of the time."""
    from methods.protofmri import pointing_chance

    masks = np.zeros((3, 1, 8, 8), dtype=bool)
    masks[:, 0, :4, :4] = True
    assert pointing_chance(masks, 4) == pytest.approx(0.25)
    masks[0, 0] = False  # an image without the concept does not count
    assert pointing_chance(masks, 4) == pytest.approx(0.25)


def test_random_fourier_features_approximate_the_gaussian_kernel():
    """Inner products of the features approach exp(-|z - z'|^2 / (2 l^2)) on the
    standardized rows, l their median distance (Rahimi & Recht 2007)."""
    from methods.protofmri import random_fourier_features

    rng = np.random.default_rng(0)
    x = rng.standard_normal((40, 5)) * [1, 2, 3, 4, 5] + 7
    phi = random_fourier_features(x, 20000, np.random.default_rng(1))
    z = (x - x.mean(0)) / x.std(0)
    d2 = ((z[:, None] - z[None]) ** 2).sum(-1)
    scale = np.median(np.sqrt(d2)[np.triu_indices(40, 1)])
    assert np.abs(phi @ phi.T - np.exp(-d2 / (2 * scale**2))).max() < 0.05
