"""proprio protocol: train (or load from the cache) the small image-to-video flow generator on
bouncing-ball clips, then with the generator frozen
- discrimination: the self-score R of held-out real clips against controlled corruptions
  (AUROC, per corruption and pooled), next to a learned discriminator trained on other clips;
- correlation: per condition, N samples; Spearman of R against the physics error over all
  samples (and without the mask), and within each condition (averaged; the ranking that
  best-of-N needs);
- best-of-N: the physics error of the argmin-R sample among the first N, over the mean
  physics error of single samples, for N in 1, 2, 4, 8, 16, against random and
  discriminator-picked samples;
- refinement: gradient steps against R on the sampler's initial noise (or on the clip),
  with a proximity term;
- a Physics-IQ-style score of single and best-of-16 samples against two physical "takes".

``dataset=physics_iq``: the Physics-IQ score of any model's generated videos in the
benchmark's layout (no generator needed).

``model=wan2.1-t2v-1.3b`` (a real diffusers pipeline, GPU) with ``dataset=videophy2``:
best-of-N by the self-score on each text prompt; the selected and the first sample of each
prompt are written as mp4 with their scores, and ``videophy2_inputs.csv`` lists them for
VideoPhy-2's AutoEval (not run here).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
from scipy.stats import spearmanr
from sklearn.metrics import roc_auc_score

from common.errors import UserError
from data.bouncing_balls import (
    CORRUPTIONS,
    BallWorld,
    corrupt,
    physics_error,
    real_clips,
    render,
    track,
)
from data.physics_iq import physics_iq_cases, read_video
from experiments.helpers.figures import subplots
from experiments.runner import register_paper
from experiments.runner.context import RunContext
from experiments.schemas.proprio import PhysicsIQConfig
from experiments.schemas.shared import RootConfig
from methods.proprio.score import (
    ScoreOptions,
    motion_mask,
    physics_iq_metrics,
    physics_iq_score,
    proprio_score,
    refine,
    residuals,
    score_aggregations,
    shared_perturbations,
    train_discriminator,
)
from methods.proprio.selection import best_of_n_curves

HELD_OUT_CLIPS = 256  # real clips no generator trains on (their own stream)


def world_of(cfg) -> BallWorld:
    d = cfg.dataset
    return BallWorld(d.frames, d.size, d.radius, d.g, d.restitution)


def options_of(method, mask: bool | None = None) -> ScoreOptions:
    return ScoreOptions(tuple(method.sigmas), method.perturbations, method.beta,
                        method.mask if mask is None else mask, method.mask_threshold)


@register_paper("proprio")
def run(cfg: RootConfig, ctx: RunContext) -> dict[str, float]:
    if cfg.model.source == "diffusers":
        return self_select_real_videos(cfg, ctx)
    if cfg.dataset.name == "physics_iq":
        return score_physics_iq(cfg.dataset, ctx)
    if cfg.dataset.name != "bouncing_balls":
        raise UserError(f"dataset={cfg.dataset.name} needs a real video generator "
                        "(model=wan2.1-t2v-1.3b)")
    from methods.proprio.generator import held_out_flow_loss

    p, world = cfg.protocol, world_of(cfg)
    net = trained_generator(world, p.generator, ctx)
    held_out = torch.as_tensor(real_clips(world, HELD_OUT_CLIPS, ctx.rng_for("held-out clips")))
    rng = ctx.rng_for("clips")
    opts = options_of(cfg.method)
    shape = (world.frames, world.size, world.size)
    scorer = SelfScorer(net, shared_perturbations(shape, opts.perturbations,
                                                  ctx.streams.seed("perturbations")), opts)
    metrics, r_real, scores, disc = discrimination(world, scorer, p, rng,
                                                   ctx.streams.seed("discriminator"))
    metrics["generator_heldout_flow_loss"] = held_out_flow_loss(
        net, held_out, ctx.streams.seed("held-out noise"))
    conditions = torch.as_tensor(real_clips(world, p.conditions, rng))
    pools = sample_pools(net, world, conditions, scorer, disc,
                         options_of(cfg.method, mask=False), p, ctx)
    metrics |= ranking(pools)
    curves, ns = best_of_n(pools, p.samples_per_condition)
    metrics |= {f"physics_err_{tag}bon{m}_over_bon1": curves[name][i]
                for name, tag in (("proprio", ""), ("discriminator", "disc_"))
                for i, m in enumerate(ns)}
    ctx.save_table("best_of_n", [{"n": m, **{k: v[i] for k, v in curves.items()}}
                                 for i, m in enumerate(ns)])
    refinement, before, after = refine_first_samples(net, world, conditions, pools, scorer, p)
    metrics |= refinement
    metrics |= physics_iq(world, conditions, pools, opts)
    ctx.save_table("discrimination", [{"clips": k, "score_mean": float(v.mean()),
                                       "auroc": metrics.get(f"auroc_{k}", np.nan)}
                                      for k, v in {"real": r_real, **scores}.items()])
    ctx.save_figure("proprio", figure(r_real, scores, ns, curves, before, after))
    return metrics


class SelfScorer:
    """The frozen generator's self-score R of clips, with shared perturbations."""

    def __init__(self, net, eps, opts: ScoreOptions):
        self.net, self.eps, self.opts = net, eps, opts

    def __call__(self, clips, opts: ScoreOptions | None = None) -> np.ndarray:
        from methods.proprio.generator import condition_of

        with torch.no_grad():
            x = torch.as_tensor(clips)
            return proprio_score(self.net, x, condition_of(x, self.net.condition_frames),
                                 self.eps, opts or self.opts).numpy()

    def aggregations(self, clips) -> dict[str, np.ndarray]:
        """R and the other ways to aggregate the same residuals (``score_aggregations``)."""
        from methods.proprio.generator import condition_of

        with torch.no_grad():
            x = torch.as_tensor(clips)
            r = residuals(self.net, x, condition_of(x, self.net.condition_frames), self.eps,
                          self.opts)
        return {k: v.numpy() for k, v in score_aggregations(r, self.opts).items()}


def trained_generator(world: BallWorld, g, ctx: RunContext):
    """The flow generator for this world and seed, trained once and cached; frozen."""
    from methods.proprio.generator import build_generator, train_generator

    width = g.hidden if g.architecture == "mlp" else g.token_width

    seed = ctx.streams.seed("generator training")

    def build(folder):
        net = train_generator(world, g.steps, g.batch, width, g.blocks, g.lr, seed,
                              ctx.compute, progress=True, architecture=g.architecture,
                              condition_frames=g.condition_frames)
        torch.save(net.state_dict(), folder / "generator.pt")
        return net

    def load(folder):
        net = build_generator(world, g.architecture, width, g.blocks, g.condition_frames)
        net.load_state_dict(torch.load(folder / "generator.pt", weights_only=True))
        return net.eval()

    key = {"world": vars(world), **dataclasses.asdict(g), "seed": seed}
    net = ctx.cached("proprio_generator", key, ["methods.proprio.generator", "data.bouncing_balls"],
                     build, load)
    for param in net.parameters():
        param.requires_grad_(False)
    return net


def discrimination(world: BallWorld, scorer: SelfScorer, p, rng: np.random.Generator,
                   seed: int):
    """AUROC of R for held-out real clips against each corruption and pooled, beside a
    learned discriminator trained on other clips of the same corruption kinds."""
    real = real_clips(world, p.eval_clips, rng)
    r_real = scorer(real)
    fakes = {k: corrupt(world, k, p.eval_clips, rng) for k in CORRUPTIONS}
    disc = train_discriminator(real_clips(world, p.discriminator_clips, rng),
                               np.concatenate([corrupt(world, k, p.discriminator_clips
                                                       // len(CORRUPTIONS), rng)
                                               for k in CORRUPTIONS]), 5, seed)
    scores = {k: scorer(v) for k, v in fakes.items()}
    labels = np.r_[np.zeros(len(real)), np.ones(len(real) * len(CORRUPTIONS))]
    metrics = {"auroc_real_vs_corrupted": float(roc_auc_score(
        labels, np.concatenate([r_real, *scores.values()])))}
    with torch.no_grad():
        d_real = -disc(torch.as_tensor(real)).numpy()
        d_fake = [-disc(torch.as_tensor(v)).numpy() for v in fakes.values()]
    metrics["auroc_discriminator"] = float(roc_auc_score(labels, np.concatenate([d_real,
                                                                                 *d_fake])))
    for k, v in scores.items():
        metrics[f"auroc_{k}"] = float(roc_auc_score(np.r_[np.zeros(len(real)),
                                                          np.ones(len(v))], np.r_[r_real, v]))
    metrics["physics_err_real"] = float(physics_error(world, real).mean())
    return metrics, r_real, scores, disc


def sample_pools(net, world: BallWorld, conditions, scorer: SelfScorer, disc,
                 plain: ScoreOptions, p, ctx: RunContext) -> list[dict]:
    """N samples per condition with their physics error, R (with and without the motion
    mask) and the discriminator's score."""
    from methods.proprio.generator import condition_of, sample

    shape = (world.frames, world.size, world.size)
    n, pools = p.samples_per_condition, []
    noise_streams = ctx.streams.child("sample noise")
    for i in ctx.progress(range(len(conditions)), "conditions"):
        cond = condition_of(conditions[i:i + 1], net.condition_frames).expand(n, -1, -1, -1)
        noise = torch.randn((n, *shape), generator=noise_streams.torch(f"condition {i}"))
        with torch.no_grad():
            clips = sample(net, cond, noise, p.sampler_steps, p.shift)
            d = -disc(clips).numpy()
        aggregations = scorer.aggregations(clips)
        pools.append({"clips": clips, "noise": noise,
                      "err": physics_error(world, clips.numpy()),
                      "R": aggregations.pop("full"), "aggregations": aggregations,
                      "R_plain": scorer(clips, plain), "disc": d})
    return pools


def ranking(pools: list[dict]) -> dict[str, float]:
    """Spearman of R (and without the mask) against physics error, pooled and within each
    condition (the ranking best-of-N needs); the within-condition Spearman of every other
    aggregation of the same residuals (one perturbation: the mean over perturbations); the
    spread of physics error among one condition's samples (std over mean, averaged)."""
    errors = np.concatenate([q["err"] for q in pools])
    pooled = spearmanr(np.concatenate([q["R"] for q in pools]), errors)[0]
    pooled_plain = spearmanr(np.concatenate([q["R_plain"] for q in pools]), errors)[0]

    def within(scores: list[np.ndarray]) -> float:
        return float(np.nanmean([spearmanr(s, q["err"])[0]
                                 for s, q in zip(scores, pools, strict=True)]))

    def aggregation(name: str) -> list[np.ndarray]:
        return [q["aggregations"][name] for q in pools]

    out = {"spearman_score_vs_physics_err": float(pooled),
           "spearman_without_mask": float(pooled_plain),
           "mask_ablation_gain": float(pooled - pooled_plain),
           "spearman_within_condition": within([q["R"] for q in pools]),
           "physics_err_bon1": float(np.mean([q["err"].mean() for q in pools])),
           "physics_err_spread_within_condition": float(np.mean(
               [q["err"].std() / max(q["err"].mean(), 1e-12) for q in pools]))}
    names = list(pools[0]["aggregations"])
    for name in names:
        if not name.startswith("perturbation"):
            out[f"spearman_within_condition_{name}"] = within(aggregation(name))
    out["spearman_within_condition_one_perturbation"] = float(np.mean(
        [within(aggregation(n)) for n in names if n.startswith("perturbation")]))
    return out


def best_of_n(pools: list[dict], n: int) -> tuple[dict[str, list[float]], list[int]]:
    """Best-of-N curves for N in 1, 2, 4, 8, 16 (up to the pool size): R, the
    discriminator and random picks."""
    ns = [m for m in (1, 2, 4, 8, 16) if m <= n]
    errors = [q["err"] for q in pools]
    curves = best_of_n_curves(errors, {"proprio": [q["R"] for q in pools],
                                       "discriminator": [q["disc"] for q in pools]}, ns)
    return curves, ns


def refine_first_samples(net, world: BallWorld, conditions, pools, scorer: SelfScorer, p):
    """Refinement of each condition's first sample: gradient steps against R through the
    sampler's initial noise (``refine.space=noise``) or on the free frames (``clip``)."""
    from methods.proprio.generator import condition_of, sample

    first = torch.stack([q["clips"][0] for q in pools])
    cond = condition_of(conditions, net.condition_frames)
    r = p.refine
    if r.space.name == "noise":
        start = torch.stack([q["noise"][0] for q in pools])

        def to_clip(z):
            return sample(net, cond, z, p.sampler_steps, p.shift)
    else:
        kept = first[:, :cond.shape[1]]
        start = first[:, cond.shape[1]:]

        def to_clip(free):
            return torch.cat([kept, free], 1)
    refined = refine(net, to_clip, start, cond, scorer.eps, scorer.opts, r.steps, r.lr,
                     r.proximity)
    before, after = physics_error(world, first.numpy()), physics_error(world, refined.numpy())
    metrics = {"refine_physics_err_ratio": float(after.mean() / before.mean()),
               "refine_score_ratio": float(scorer(refined.numpy()).mean()
                                           / np.mean([q["R"][0] for q in pools]))}
    return metrics, before, after


def physics_iq(world, conditions, pools, opts) -> dict[str, float]:
    """Physics-IQ of single and best-of-16 samples: take 1 is the real clip, take 2 the same
    trajectory shifted by 0.05 px (the physical variance between takes)."""
    out = {}
    takes = conditions.numpy()
    rows = {"bon1": [], "bon16": [], "variance": []}
    for i, q in enumerate(pools):
        centres = track(takes[i])[0]
        take2 = render(world, (centres + 0.05)[None])[0]
        best = q["clips"][int(np.argmin(q["R"]))].numpy()
        masks = [motion_mask(torch.as_tensor(v)[None], opts)[0].numpy() > 0.5
                 for v in (takes[i], take2, q["clips"][0].numpy(), best)]
        rows["variance"].append(physics_iq_metrics(masks[0], masks[1], takes[i], take2))
        rows["bon1"].append(physics_iq_metrics(masks[0], masks[2], takes[i],
                                               q["clips"][0].numpy()))
        rows["bon16"].append(physics_iq_metrics(masks[0], masks[3], takes[i], best))
    var = {k: np.mean([r[k] for r in rows["variance"]]) for k in rows["variance"][0]}
    for name in ("bon1", "bon16"):
        m = {k: np.mean([r[k] for r in rows[name]]) for k in var}
        out[f"physics_iq_{name}"] = physics_iq_score(m["st_iou"], m["s_iou"], m["ws_iou"],
                                                     m["mse"], var["st_iou"], var["s_iou"],
                                                     var["ws_iou"], var["mse"])
    return out


def score_physics_iq(data: PhysicsIQConfig, ctx: RunContext) -> dict[str, float]:
    """The Physics-IQ score of a model's generated videos: per scenario, masks (the
    benchmark's rule: 5x5 blur, running average 0.3, threshold 10/255, 5x5 open/close) and
    metrics of take 1 vs the generated video and of take 1 vs take 2 (the physical
    variance), averaged over scenarios, then the score formula."""
    opts = ScoreOptions(mask_threshold=10 / 255, mask_kernel=5, mask_dilate=0, mask_blur=5)
    rows = []
    for case in ctx.progress(physics_iq_cases(data.real_root, data.generated_root), "cases"):
        videos = [read_video(p, data.seconds, data.downscale)
                  for p in (case.take1, case.take2, case.generated)]
        t = min(len(v) for v in videos)
        videos = [v[:t] for v in videos]
        masks = [motion_mask(torch.as_tensor(v)[None], opts)[0].numpy() > 0.5
                 for v in videos]
        model = physics_iq_metrics(masks[0], masks[2], videos[0], videos[2])
        variance = physics_iq_metrics(masks[0], masks[1], videos[0], videos[1])
        rows.append({"case": case.name, **model, **{f"var_{k}": v for k, v in variance.items()}})
    ctx.save_table("physics_iq", rows)
    mean = {k: float(np.mean([r[k] for r in rows])) for k in rows[0] if k != "case"}
    score = physics_iq_score(mean["st_iou"], mean["s_iou"], mean["ws_iou"], mean["mse"],
                             mean["var_st_iou"], mean["var_s_iou"], mean["var_ws_iou"],
                             mean["var_mse"])
    return {"physics_iq_score": score, "scenarios": float(len(rows)), **mean}


def self_select_real_videos(cfg: RootConfig, ctx: RunContext) -> dict[str, float]:
    """Best-of-N by the self-score of a real text-to-video pipeline, per prompt."""
    from data.physics_iq import write_video
    from data.video_prompts import video_prompts
    from methods.proprio.wan import WanSelfScorer, load_wan_pipeline

    if cfg.dataset.name != "videophy2":
        raise UserError(f"model={cfg.model.name} generates from text prompts: use "
                        "dataset=videophy2 (by name, or dataset.prompts_file=...)")
    prompts = video_prompts(cfg.dataset)
    scorer = WanSelfScorer(load_wan_pipeline(cfg.model, ctx.compute.device),
                           options_of(cfg.method), ctx.streams.seed("perturbations"))
    video = dataclasses.asdict(cfg.protocol.video)
    n = int(video.pop("samples_per_prompt"))
    generator = ctx.streams.torch("sampling", ctx.compute.device)
    rows, inputs = [], []
    for i, prompt in enumerate(ctx.progress(prompts, "prompts")):
        out = scorer.best_of_n(prompt, n, generator, **video)
        scores, best = out["scores"].numpy(), out["best"]
        frames = scorer.decode(out["latents"][[best, 0]]).cpu().numpy()
        for tag, clip in (("best", frames[0]), ("first", frames[1])):
            path = write_video(ctx.output_dir / "videos" / f"{i:03d}_{tag}.mp4", clip)
            inputs.append({"caption": prompt, "videopath": str(path), "pick": tag})
        rows.append({"prompt": prompt, "best": best, "score_best": float(scores[best]),
                     "score_first": float(scores[0]), "score_mean": float(scores.mean()),
                     "scores": " ".join(f"{v:.5g}" for v in scores)})
        ctx.save_table("self_selection", rows)  # after each prompt: kept if a later one fails
    ctx.save_table("videophy2_inputs", inputs)
    best = np.array([r["score_best"] for r in rows])
    first = np.array([r["score_first"] for r in rows])
    return {"prompts": float(len(rows)), "samples_per_prompt": float(n),
            "score_best_mean": float(best.mean()), "score_first_mean": float(first.mean()),
            "score_best_over_first": float(best.mean() / first.mean())}


def figure(r_real, scores, ns, curve, before, after):
    fig, axes = subplots(3, panel=(4.8, 3.6))
    bins = np.linspace(0, np.percentile(np.concatenate([r_real, *scores.values()]), 99), 40)
    axes[0].hist(r_real, bins, alpha=0.6, label="real", density=True)
    for k, v in scores.items():
        axes[0].hist(v, bins, histtype="step", label=k, density=True)
    axes[0].set(title="self-score R of real and corrupted clips", xlabel="R (lower = plausible)")
    axes[0].legend(fontsize=7)
    for k, v in curve.items():
        axes[1].plot(ns, v, "-o", label=k)
    axes[1].set(xscale="log", title="best-of-N", xlabel="N", ylabel="physics error / single")
    axes[1].set_xticks(ns, [str(m) for m in ns])
    axes[1].legend(fontsize=7)
    axes[2].bar([0, 1], [before.mean(), after.mean()])
    axes[2].set_xticks([0, 1], ["sample", "refined"])
    axes[2].set(title="gradient self-refinement", ylabel="mean physics error")
    fig.tight_layout()
    return fig

