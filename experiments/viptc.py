"""viptc protocol: every arm (finetune, joint upper bound, feature KD, CKA KD, S-PTC, CM-PTC,
both) over the same task streams, each stream's arms from the same pretrained backbone (the
synthetic stream's pretraining domain); cross-modal mAP on every seen task after every stage,
forgetting, intra-modal forgetting per modality (asymmetry), plasticity on the newest task,
the RGB/IR topology gap, and a check that no exemplar is stored."""

from __future__ import annotations

import numpy as np

from common.streams import Streams
from data.reid_stream import reid_pretraining, reid_stream
from experiments.helpers.figures import subplots
from experiments.helpers.parallel import map_jobs
from experiments.runner import register_paper
from experiments.runner.context import RunContext
from experiments.schemas.shared import RootConfig
from methods.viptc.lifelong import (
    Arm,
    LossOptions,
    first_stage,
    first_stage_is_shared,
    pretrain,
    run_stream,
)
from methods.viptc.networks import NetSpec
from methods.viptc.stream_stats import forgetting, image_shaped_tensors, paired_drops

LABELS = {"finetune": "finetune", "joint": "joint (upper bound)", "feature_kd": "feature KD",
          "cka_kd": "CKA KD", "sptc": "S-PTC", "cmptc": "CM-PTC", "both": "S-PTC + CM-PTC"}


def arms(cfg: RootConfig) -> list[Arm]:
    m = cfg.method
    table = {"finetune": Arm("finetune"), "joint": Arm("joint", joint=True),
             "feature_kd": Arm("feature_kd", feature_kd=m.lambda_kd),
             "cka_kd": Arm("cka_kd", cka_kd=m.lambda_kd),
             "sptc": Arm("sptc", sptc=m.lambda_sptc), "cmptc": Arm("cmptc", cmptc=m.lambda_cmptc),
             "both": Arm("both", sptc=m.lambda_sptc, cmptc=m.lambda_cmptc)}
    return [table[name] for name in cfg.protocol.arms]


def summarize(results) -> dict[str, float]:
    cross = [r.cross for r in results]
    f_rgb = forgetting([r.rgb for r in results])
    f_ir = forgetting([r.ir for r in results])
    return {"forgetting": forgetting(cross), "forgetting_rgb": f_rgb, "forgetting_ir": f_ir,
            "asymmetry": abs(f_ir - f_rgb),
            "new_task_map": float(np.mean([results[s].cross[s] for s in range(len(results))])),
            "final_map": float(np.mean(results[-1].cross)),
            "final_rank1": float(np.mean(results[-1].rank1)),
            "topology_gap": float(np.mean(results[-1].topology_gap))}


def train_arm(stream, arm: Arm, options: LossOptions, *train_args):
    """One (stream, arm) job: the evaluations after every stage, and how many image-shaped
    tensors the state kept between stages holds (0 for an exemplar-free arm; joint keeps
    all data by design and is not counted)."""
    results, state = run_stream(stream, arm, options, *train_args)
    shape = tuple(stream[0].train.images.shape[-2:])
    return results, 0 if arm.joint else image_shaped_tensors(state, *shape)


def start_stream(pretraining, stream, arm: Arm | None, options: LossOptions, *train_args):
    """One stream's common start, one job: the pretrained backbone (None without a
    pretraining set) and, for ``arm``, the first stage from it (a checkpoint)."""
    initial = None if pretraining is None else pretrain(pretraining, *train_args)
    return initial, None if arm is None else first_stage(stream, arm, options, *train_args,
                                                         initial)


@register_paper("viptc")
def run(cfg: RootConfig, ctx: RunContext) -> dict[str, float]:
    protocol, method, data = cfg.protocol, cfg.method, cfg.dataset
    options = LossOptions(method.tau, method.divergence.name, method.anchor.name,
                          method.form.name, method.margin, method.cmptc_topology.name)
    rows, stage_rows, exemplars = [], [], 0
    # the run's independent streams (replicates), each named by its index; "seed" in the
    # tables is the stream's seed
    seeds = [ctx.streams.seed(f"stream {k}") for k in range(protocol.seeds)]
    streams, pretraining = {}, {}
    for seed in seeds:
        streams[seed] = reid_stream(data, Streams(seed).numpy("tasks"))
        pretraining[seed] = reid_pretraining(data, Streams(seed).numpy("pretraining data"))
    spec = NetSpec(method.backbone, method.width, method.dim)
    if spec.backbone != "small_cnn":
        spec.build()  # fetched once here; a missing model fails before the jobs
    # worker processes fill a CPU's cores; on GPUs the jobs run in turn, each spread over the
    # devices by the trainer's strategy
    workers = protocol.workers if ctx.compute.accelerator == "cpu" else 1
    training = (protocol.epochs, protocol.lr, protocol.ids_per_batch, protocol.per_modality,
                spec)
    # the first stage is the same computation in every arm but batch-topology CM-PTC: on a
    # CPU it runs once per stream, after the stream's pretraining, and those arms go on from
    # it (the checkpoint carries the CPU generators' states, not a GPU's)
    shared = [arm for arm in arms(cfg) if first_stage_is_shared(arm, options)
              and ctx.compute.accelerator == "cpu"]
    with ctx.stage("pretraining and the shared first stage"):
        starts = map_jobs(start_stream, [
            (pretraining[seed], streams[seed], shared[0] if len(shared) > 1 else None,
             options, *training, seed, ctx.compute) for seed in seeds], workers,
            lambda items, total: ctx.progress(items, "streams' starts", total))
    initial = {seed: start[0] for seed, start in zip(seeds, starts, strict=True)}
    after = {seed: start[1] for seed, start in zip(seeds, starts, strict=True)}
    jobs = [(seed, arm) for seed in seeds for arm in arms(cfg)]
    with ctx.stage("arms x streams"):
        trained = map_jobs(train_arm, [
            (streams[seed], arm, options, *training, seed, ctx.compute, initial[seed],
             after[seed] if arm in shared else None)
            for seed, arm in jobs], workers,
            lambda items, total: ctx.progress(items, "arms x seeds", total))
    for (seed, arm), (results, stored) in zip(jobs, trained, strict=True):
        exemplars += stored
        rows.append({"arm": arm.name, "seed": seed, **summarize(results)})
        stage_rows += [{"arm": arm.name, "seed": seed, "stage": stage + 1, "task": task + 1,
                        "cross_map": r.cross[task], "rgb_map": r.rgb[task],
                        "ir_map": r.ir[task], "cross_rank1": r.rank1[task]}
                       for stage, r in enumerate(results) for task in range(len(r.cross))]
    ctx.save_table("arms", rows)
    ctx.save_table("stages", stage_rows)  # every seen task's mAP after every stage
    names = list(dict.fromkeys(r["arm"] for r in rows))
    mean = {a: {k: float(np.mean([r[k] for r in rows if r["arm"] == a]))
                for k in rows[0] if k not in ("arm", "seed")} for a in names}
    ctx.save_table("arms_mean", [{"arm": a, **v} for a, v in mean.items()])
    ctx.save_figure("forgetting", _figure(mean, stage_rows))
    metrics = {f"{k}_{a}": v for a, values in mean.items() for k, v in values.items()}
    metrics.update({f"forgetting_{a}": mean[a]["forgetting"] for a in mean})
    metrics.update({f"asymmetry_{a}": mean[a]["asymmetry"] for a in mean})
    if "sptc" in mean and "finetune" in mean:
        metrics["new_task_map_sptc_over_finetune"] = (mean["sptc"]["new_task_map"]
                                                      / mean["finetune"]["new_task_map"])
    metrics.update(paired_drops(rows, "forgetting"))
    metrics.update(paired_drops(rows, "asymmetry"))
    metrics["exemplars_stored"] = exemplars
    return metrics


def _figure(mean: dict, stage_rows: list[dict]):
    fig, axes = subplots(4, panel=(4.8, 3.6))
    names = list(mean)
    x = np.arange(len(names))
    labels = [LABELS.get(n, n) for n in names]
    axes[0].bar(x, [mean[n]["forgetting"] for n in names])
    axes[0].set(title="forgetting (cross-modal mAP)", ylabel="best - final")
    axes[1].bar(x - 0.2, [mean[n]["forgetting_rgb"] for n in names], 0.4, label="RGB -> RGB")
    axes[1].bar(x + 0.2, [mean[n]["forgetting_ir"] for n in names], 0.4, label="IR -> IR")
    axes[1].set(title="forgetting per modality")
    axes[1].legend(fontsize=7)
    for ax in axes[:2]:
        ax.set_xticks(x, labels, rotation=30, ha="right", fontsize=7)
    stages = sorted({r["stage"] for r in stage_rows})
    for n in names:
        mine = [r for r in stage_rows if r["arm"] == n]
        first = [np.mean([r["cross_map"] for r in mine if r["stage"] == s and r["task"] == 1])
                 for s in stages]
        seen = [np.mean([r["cross_map"] for r in mine if r["stage"] == s]) for s in stages]
        axes[2].plot(stages, first, "-o", label=LABELS.get(n, n))
        axes[3].plot(stages, seen, "-o", label=LABELS.get(n, n))
    axes[2].set(title="task 1 cross-modal mAP after each stage", xlabel="stage", ylabel="mAP",
                xticks=stages)
    axes[3].set(title="mean over seen tasks after each stage", xlabel="stage", ylabel="mAP",
                xticks=stages)
    axes[3].legend(fontsize=7)
    fig.tight_layout()
    return fig
