"""protofmri protocol: a procedural stimulus world with 12 known concepts and a simulated
voxel population with planted sparse tuning (3 repeats per image); frozen patch features,
sparse prototype activations and a ridge readout, against a black-box ridge on the full
features; prediction vs the noise ceiling, concept and tuning recovery, closed-loop
synthesis (insert a concept, check the true response rises where the model says)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from data.stimulus_world import (
    CONCEPTS,
    clean_responses,
    random_scenes,
    render,
    responses,
    voxel_population,
)
from experiments.helpers.figures import subplots
from experiments.runner import register_paper
from experiments.runner.context import RunContext
from experiments.schemas.shared import RootConfig
from methods.protofmri import (
    MaxReadout,
    PatchFeatures,
    auroc_table,
    concept_tuning,
    fit_pooled_readout,
    fit_prototypes,
    match_concepts,
    noise_ceiling,
    patch_features,
    patch_grid,
    pearson,
    pointing_chance,
    pointing_game,
    random_fourier_features,
    ridge_cv,
    select_prototypes,
    synthesize,
    tuning_recovery,
)


def _render_each(scenes, seeds) -> tuple[np.ndarray, np.ndarray]:
    """Images and masks, each image from its own seed (so that adding a concept to a
    scene leaves its texture and its other objects where they were)."""
    out = [render([scene], np.random.default_rng(int(seed))) for scene, seed in
           zip(scenes, seeds, strict=True)]
    return (np.concatenate([o.images for o in out]),
            np.concatenate([o.masks for o in out]))


def _tuning_unit(population) -> float:
    """The voxels' root-mean-square tuning norm: the unit of the selectivity metrics."""
    return float((population.weights ** 2).sum(1).mean() ** 0.5)


def synthesis_selectivity(features, layer, readout, population, scenes, images: int,
                          rng, progress=iter) -> float:
    """For every concept: insert it into scenes that lack it, let the model name the voxels
    it expects to rise (top decile of the predicted change), and compare the true
    (noise-free) rise there with the rest, in units of the voxels' root-mean-square tuning
    norm; averaged over concepts."""
    per_concept = []
    unit = _tuning_unit(population)
    for concept in progress(range(len(CONCEPTS))):
        lacking = [s for s in scenes if concept not in s][:images]
        seeds = rng.integers(2**31, size=len(lacking))
        before, masks_before = _render_each(lacking, seeds)
        after, masks_after = _render_each([s + [concept] for s in lacking], seeds)
        predicted = (readout.predict(layer.sparse_maps(features.tokens(after)))
                     - readout.predict(layer.sparse_maps(features.tokens(before)))).mean(0)
        true = (clean_responses(population, masks_after)
                - clean_responses(population, masks_before)).mean(0)
        tuned = predicted >= np.quantile(predicted, 0.9)
        per_concept.append((true[tuned].mean() - true[~tuned].mean()) / unit)
    return float(np.mean(per_concept))


def image_synthesis(features, layer, readout, population, images: np.ndarray,
                    presence: np.ndarray, match: np.ndarray, protocol, progress=iter):
    """For every concept: synthesize, from test images that lack it, pixels that raise its
    matched prototype (``synthesize``); report the rise of that prototype, the mean absolute
    change of the others, and how much more the model's predicted response rises in the
    voxels planted as tuned to the concept than in the rest (RMS tuning-norm units). The
    synthesized pixels have no rendered masks, so their true response is not known.
    Returns (metrics, one (before, after) image pair per concept)."""
    unit = _tuning_unit(population)
    target_rise, off_target, selectivity, pairs = [], [], [], []
    for concept in progress(range(len(CONCEPTS))):
        lacking = images[presence[:, concept] < 0.5][:protocol.image_synthesis_images]
        k = int(match[concept])
        after = synthesize(features, layer, lacking, k, protocol.image_synthesis_steps,
                           protocol.image_synthesis_lr, protocol.image_synthesis_hold)
        maps0 = layer.sparse_maps(features.tokens(lacking))
        maps1 = layer.sparse_maps(features.tokens(after))
        a0, a1 = maps0.max(-1), maps1.max(-1)
        target_rise.append((a1[:, k] - a0[:, k]).mean())
        off_target.append(np.abs(np.delete(a1 - a0, k, axis=1)).mean())
        rise = (readout.predict(maps1) - readout.predict(maps0)).mean(0)
        tuned = population.weights[:, concept] > 0
        selectivity.append((rise[tuned].mean() - rise[~tuned].mean()) / unit)
        pairs.append((lacking[0], after[0]))
    return {"image_synthesis_target_rise": float(np.mean(target_rise)),
            "image_synthesis_off_target_change": float(np.mean(off_target)),
            "image_synthesis_predicted_selectivity": float(np.mean(selectivity))}, pairs


def _synthesis_figure(pairs):
    fig, axes = subplots(len(pairs), 2, panel=(1.3, 1.4))
    for c, (before, after) in enumerate(pairs):
        for row, image in enumerate((before, after)):
            axes[row, c].imshow(image.transpose(1, 2, 0))
            axes[row, c].set_axis_off()
        axes[0, c].set_title(CONCEPTS[c], fontsize=7)
    fig.suptitle("image-space synthesis: test image (top), pixels raising the concept's "
                 "prototype (bottom)", fontsize=8)
    fig.tight_layout()
    return fig


@dataclass
class Encoders:
    """The prototype encoder and the black-box ridge fitted on the training images, with
    their held-out correlations per voxel."""

    features: object
    tokens: np.ndarray
    layer: object
    activations: np.ndarray
    readout: object
    r_proto: np.ndarray
    r_black: np.ndarray  # the stronger black box's
    r_black_by_features: dict[str, float]  # mean held-out r of each black box


def fit_encoders(images: np.ndarray, y: np.ndarray, train: np.ndarray, test: np.ndarray,
                 cfg: RootConfig, ctx: RunContext, rng: np.random.Generator) -> Encoders:
    method, protocol = cfg.method, cfg.protocol
    features = patch_features(method.backbone, method.channels,
                              ctx.streams.seed("feature extractor"),
                              method.colour_weight, ctx.device)
    tokens = features.tokens(images)
    if method.selection.name == "voxel_greedy":
        pool = fit_prototypes(tokens[train], method.candidates, method.candidates,
                              method.threshold_quantile, method.salient_fraction, rng)
        layer = select_prototypes(pool, tokens[train], y[train], method.prototypes,
                                  method.top_k)
    else:  # kmeans
        layer = fit_prototypes(tokens[train], method.prototypes, method.top_k,
                               method.threshold_quantile, method.salient_fraction, rng)
    maps = layer.sparse_maps(tokens)
    a = maps.max(-1)
    alphas = list(protocol.alphas)
    if method.readout.name == "receptive_field":
        readout = fit_pooled_readout(maps[train], y[train], list(method.receptive_field_sigmas),
                                     alphas, protocol.folds, rng)
    else:
        readout = MaxReadout(ridge_cv(a[train], y[train], alphas, protocol.folds, rng))
    # the black box: the strongest (on held-out mean r) of three ridges on the same
    # backbone's features, each with its penalty chosen by cross-validation: the
    # position-specific tokens, their mean and max over patches (the field's usual pooled
    # features), and a Gaussian-kernel expansion of those (random Fourier features: a
    # nonlinear readout, as the prototype bottleneck is one)
    pooled = np.concatenate([tokens.mean(1), tokens.max(1)], axis=1)
    candidates = {"flat": tokens.reshape(len(images), -1), "pooled": pooled,
                  "kernel": random_fourier_features(pooled, BLACK_BOX_FEATURES,
                                                    ctx.rng_for("black-box kernel"))}
    black = {name: pearson(ridge_cv(x[train], y[train], alphas, protocol.folds, rng).predict(
        x[test]), y[test]) for name, x in candidates.items()}
    r_black = max(black.values(), key=lambda r: r.mean())
    return Encoders(features, tokens, layer, a, readout,
                    pearson(readout.predict(maps[test]), y[test]), r_black,
                    {name: float(r.mean()) for name, r in black.items()})


BLACK_BOX_FEATURES = 2048  # random Fourier features of the kernel black box


def _random_split(n: int, fraction: float, rng: np.random.Generator) -> np.ndarray:
    """(n,) bool test mask of about ``fraction`` of the images."""
    test = np.zeros(n, dtype=bool)
    test[rng.permutation(n)[:max(1, int(round(fraction * n)))]] = True
    return test


def encode_real_subject(cfg: RootConfig, ctx: RunContext) -> dict[str, float]:
    """``dataset=algonauts2023`` or ``dataset=nsd``: the prototype encoder against the
    black-box ridge on one subject's real images and responses; held-out prediction (over
    the noise ceiling where the raw NSD repeats give one) and each prototype's top training
    images (what it stands for must be read off them: no concept labels here)."""
    data = cfg.dataset
    nc = None
    if data.name == "algonauts2023":
        from data.algonauts import load_algonauts

        subject = load_algonauts(data.root, data.subject, data.roi_class, data.image_size,
                                 data.limit)
        images, y, ids = subject.images, subject.fmri, subject.nsd_ids
        test = _random_split(len(images), data.test_fraction, ctx.rng_for("test split"))
        labels = {"hemisphere": subject.hemisphere}
    else:
        from data.nsd import load_nsd

        subject = load_nsd(data.root, data.subject, data.sessions, data.roi, data.image_size,
                           data.limit, lambda it: ctx.progress(it, "sessions"))
        images, y, ids = subject.images, subject.responses, subject.nsd_ids
        test = subject.shared if subject.shared.any() and not subject.shared.all() else \
            _random_split(len(images), data.test_fraction, ctx.rng_for("test split"))
        full = ~np.isnan(subject.repeats).any(axis=(0, 2))
        if full.sum() >= 10:  # images seen three times
            nc = noise_ceiling(subject.repeats[:, full])
        labels = {}
    train, test = np.flatnonzero(~test), np.flatnonzero(test)
    fit = fit_encoders(images, y, train, test, cfg, ctx, ctx.rng_for("encoder fit"))
    a, r_proto, r_black = fit.activations, fit.r_proto, fit.r_black
    ctx.save_table("voxels", [{"voxel": v, **{k: str(val[v]) for k, val in labels.items()},
                               "r_proto": float(r_proto[v]), "r_blackbox": float(r_black[v]),
                               **({"noise_ceiling": float(nc[v])} if nc is not None else {})}
                              for v in range(y.shape[1])])
    top = np.argsort(-a[train], axis=0)[:5]
    ctx.save_table("prototypes", [{"prototype": k, "top_nsd_ids": " ".join(
        str(ids[train[i]]) for i in top[:, k])} for k in range(a.shape[1])])
    fig, ax = subplots(1, panel=(4.2, 4.0))
    ax.scatter(r_black, r_proto, s=4, alpha=0.5)
    lims = [min(r_black.min(), r_proto.min()), max(r_black.max(), r_proto.max())]
    ax.plot(lims, lims, "k--", lw=0.8)
    ax.set(xlabel="r, black-box ridge on all patch features", ylabel="r, prototypes",
           title=f"subject {data.subject}: held-out prediction per voxel")
    fig.tight_layout()
    ctx.save_figure("encoder", fig)
    metrics = {"r_proto_over_r_blackbox": float(r_proto.mean() / r_black.mean()),
               "r_proto_mean": float(r_proto.mean()), "r_blackbox_mean": float(r_black.mean()),
               **{f"r_blackbox_{k}_mean": v for k, v in fit.r_black_by_features.items()},
               "active_prototypes_per_image": float((a[test] > 0).sum(1).mean()),
               "images": float(len(images)), "test_images": float(len(test)),
               "voxels": float(y.shape[1])}
    if nc is not None:
        metrics |= {"pred_over_noise_ceiling": float((r_proto ** 2).mean() / nc.mean()),
                    "noise_ceiling_mean": float(nc.mean())}
    return metrics


@register_paper("protofmri")
def run(cfg: RootConfig, ctx: RunContext) -> dict[str, float]:
    if cfg.dataset.name in ("algonauts2023", "nsd"):
        return encode_real_subject(cfg, ctx)
    data, protocol = cfg.dataset, cfg.protocol
    n = data.train_images + data.test_images
    scenes = random_scenes(n, ctx.rng_for("scenes"), data.max_concepts)
    stimuli = render(scenes, ctx.rng_for("rendering"))
    population = voxel_population(data.voxels, stimuli.masks, data.repeats,
                                  tuple(data.noise_ceiling), ctx.rng_for("voxel population"),
                                  data.prf_sigma)
    repeats = responses(population, stimuli.masks, data.repeats, ctx.rng_for("response noise"))
    y = repeats.mean(0)
    train, test = np.arange(data.train_images), np.arange(data.train_images, n)
    fit = fit_encoders(stimuli.images, y, train, test, cfg, ctx, ctx.rng_for("encoder fit"))
    features, tokens, layer, readout = fit.features, fit.tokens, fit.layer, fit.readout
    a, r_proto, r_black = fit.activations, fit.r_proto, fit.r_black
    nc = noise_ceiling(repeats[:, test])
    # concepts are matched to prototypes on the training images and scored on the test ones
    match, _ = match_concepts(auroc_table(a[train], stimuli.presence[train]))
    table = auroc_table(a[test], stimuli.presence[test])
    aurocs = table[np.arange(len(match)), match]
    tuning = concept_tuning(readout.coef, a[test], stimuli.presence[test], table)
    maps = layer.patch_activations(tokens[test])
    pointing = pointing_game(maps, stimuli.masks[test], match)
    ctx.save_figure("concept_maps", _concept_map_figure(stimuli.images[test], maps,
                                                        stimuli.presence[test], match))
    selectivity = synthesis_selectivity(features, layer, readout, population,
                                        [scenes[i] for i in test], protocol.synthesis_images,
                                        ctx.rng_for("synthesis scenes"),
                                        lambda it: ctx.progress(it, "synthesis"))
    if isinstance(features, PatchFeatures):
        synthesis, pairs = image_synthesis(features, layer, readout, population,
                                           stimuli.images[test], stimuli.presence[test], match,
                                           protocol, lambda it: ctx.progress(it, "pixels"))
        ctx.save_figure("image_synthesis", _synthesis_figure(pairs))
    else:  # a hub backbone's processor is not differentiable in the pixels
        synthesis = {}
    ctx.save_table("concepts", [{"concept": c, "prototype": int(match[i]),
                                 "auroc": float(aurocs[i])} for i, c in enumerate(CONCEPTS)])
    ctx.save_table("voxels", [{"voxel": v, "r_proto": float(r_proto[v]),
                               "r_blackbox": float(r_black[v]), "noise_ceiling": float(nc[v]),
                               "true_noise_ceiling": float(population.true_noise_ceiling[v])}
                              for v in range(data.voxels)])
    ctx.save_figure("encoder", _figure(r_proto, r_black, tuning, population, aurocs))
    return {"r_proto_over_r_blackbox": float(r_proto.mean() / r_black.mean()),
            "r_proto_mean": float(r_proto.mean()), "r_blackbox_mean": float(r_black.mean()),
            **{f"r_blackbox_{k}_mean": v for k, v in fit.r_black_by_features.items()},
            "pred_over_noise_ceiling": float((r_proto ** 2).mean() / nc.mean()),
            "noise_ceiling_mean": float(nc.mean()),
            "noise_ceiling_error_mean": float(np.abs(nc - population.true_noise_ceiling)
                                              .mean()),
            "concept_recovery_auroc_mean": float(aurocs.mean()),
            "localisation_pointing_game": pointing,
            "localisation_chance": pointing_chance(stimuli.masks[test], maps.shape[-1]),
            "tuning_recovery_corr": tuning_recovery(tuning, population.weights),
            "tuning_recovery_corr_matched_only": tuning_recovery(readout.coef[match].T,
                                                                 population.weights),
            "synthesis_selectivity": selectivity,
            "active_prototypes_per_image": float((a[test] > 0).sum(1).mean()), **synthesis}


def _concept_map_figure(images, maps, presence, match, count: int = 6):
    """Spatial concept maps: on test images, each present concept's matched prototype's
    patch activations ReLU(s_kp - theta_k), upsampled over the image."""
    fig, axes = subplots(count, panel=(1.8, 2.0))
    shown = 0
    for i in range(len(images)):
        concepts = np.flatnonzero(presence[i])
        if shown == count or not len(concepts):
            continue
        c = concepts[shown % len(concepts)]
        side = patch_grid(maps.shape[-1])
        height, width = images.shape[-2:]
        ax = axes[shown]
        ax.imshow(images[i].transpose(1, 2, 0))
        ax.imshow(maps[i, match[c]].reshape(side, side), alpha=0.5, cmap="magma",
                  extent=(-0.5, width - 0.5, height - 0.5, -0.5), interpolation="nearest")
        ax.set_title(f"{CONCEPTS[c]}: prototype {match[c]}", fontsize=7)
        ax.set_axis_off()
        shown += 1
    fig.tight_layout()
    return fig


def _figure(r_proto, r_black, tuning, population, aurocs):
    fig, axes = subplots(3, panel=(4.4, 3.8))
    axes[0].scatter(r_black, r_proto, s=6)
    lim = [min(r_black.min(), r_proto.min()), max(r_black.max(), r_proto.max())]
    axes[0].plot(lim, lim, "k:", lw=1)
    axes[0].set(xlabel="black-box ridge r", ylabel="prototype model r",
                title="held-out prediction per voxel")
    axes[1].bar(range(len(CONCEPTS)), aurocs)
    axes[1].set_xticks(range(len(CONCEPTS)), CONCEPTS, rotation=60, fontsize=7)
    axes[1].set(ylim=(0.4, 1.0), ylabel="AUROC", title="concept -> matched prototype")
    axes[2].scatter(population.weights.ravel(), tuning.ravel(), s=4)
    axes[2].set(xlabel="planted weight W*", ylabel="learned tuning (readout x rise)",
                title="tuning recovery")
    fig.tight_layout()
    return fig
