"""ditherq protocol: worst-case MSE over input families, dense rotation vs one RHT,
with and without a shared dither, at b = 1..6 bits; plus the per-vector rotation cost."""

from __future__ import annotations

import numpy as np

from common.errors import UserError
from data.vectors import npy_vectors, unit_vector_families
from experiments.helpers.figures import subplots
from experiments.runner import register_paper
from experiments.runner.context import RunContext
from experiments.schemas.shared import RootConfig
from methods.ditherq import (
    QUANTIZERS,
    RandomizedHadamard,
    haar_images,
    panter_dite_bound,
    quantize_rotated,
)
from methods.ditherq.quantizers import bits_per_coordinate
from methods.ditherq.timing import rotation_seconds_per_vector

ARMS = [(rot, dither) for rot in ("dense", "rht") for dither in (True, False)]


def _families(cfg: RootConfig, rng: np.random.Generator) -> dict[str, np.ndarray]:
    data_cfg = cfg.dataset
    if data_cfg.name == "unit_vectors":
        return unit_vector_families(data_cfg.dim, data_cfg.n_random, data_cfg.n_sparse,
                                    data_cfg.sparsity, data_cfg.n_basis, rng)
    if data_cfg.name == "npy_vectors":
        return npy_vectors(data_cfg.path, data_cfg.max_rows)
    raise UserError(f"ditherq needs dataset=unit_vectors or dataset=npy_vectors, "
                    f"not '{data_cfg.name}'")


def measure_nmse(families: dict[str, np.ndarray], quantizer: str, bits: list[int],
                 n_trials: int, rng: np.random.Generator, progress=iter, arms=tuple(ARMS)
                 ) -> dict[tuple, np.ndarray]:
    """Normalized MSE ||x_hat - x||^2 / ||x||^2 per (rotation, dither, b, family), one
    value per trial (mean over the family's vectors). Each trial draws one dense rotation
    (when an arm uses it), one RHT and fresh dither offsets for every arm."""
    names = list(families)
    x = np.concatenate([families[f] for f in names])
    owner = np.concatenate([[i] * len(families[f]) for i, f in enumerate(names)])
    sq_norm = np.sum(x**2, axis=1)
    dim = x.shape[1]
    out = {(r, dt, b, f): np.empty(n_trials) for r, dt in arms for b in bits for f in names}
    dense = any(rot == "dense" for rot, _ in arms)
    for trial in progress(range(n_trials)):
        # the dense arm's error is measured in the rotated space (Q is orthogonal)
        dense_y = haar_images(x, rng) if dense else None
        rht = RandomizedHadamard(dim, rng)
        rht_y = rht.forward(x)
        for b in bits:
            for rot, dither in arms:
                y = dense_y if rot == "dense" else rht_y
                y_hat = quantize_rotated(y, quantizer, b, dither, rng)
                if rot == "dense":
                    err = np.sum((y_hat - y) ** 2, axis=1)
                else:
                    err = np.sum((rht.inverse(y_hat) - x) ** 2, axis=1)
                nmse = err / sq_norm
                for i, f in enumerate(names):
                    out[(rot, dither, b, f)][trial] = nmse[owner == i].mean()
    return out


def dense_worst_case_spread(nmse: dict[tuple, np.ndarray], bits, families) -> float:
    """How much one dense rotation's worst case over the input families varies between
    independent draws: per trial (one Haar rotation and dither), the worst dithered MSE over
    the families; its standard deviation over trials relative to its mean, the largest over
    the bit widths. rht_matches_dense's margin: matching a dense rotation means staying
    within the variation of a dense rotation itself."""
    spreads = []
    for b in bits:
        per_trial = np.max([nmse[("dense", True, b, f)] for f in families], axis=0)
        spreads.append(float(per_trial.std(ddof=1) / per_trial.mean()))
    return max(spreads)


def _grid_comparisons(bits, families, mean, worst, quantizer, nmse) -> dict[str, float]:
    """RHT against dense over the bit-width grid: the worst ratio of dithered MSEs (and the
    dense rotation's own spread between draws), the undithered basis vector at b = 2, and
    dithered TurboQuant against its bound at b = 6."""
    ratio = {b: max(mean("rht", True, b, f) / mean("dense", True, b, f) for f in families)
             for b in bits}
    out = {"dithered_vs_dense_mse_ratio_max": max(ratio.values()),
           "dense_worst_case_rel_spread": dense_worst_case_spread(nmse, bits, families)}
    if any(b >= 4 for b in bits):
        out["dithered_vs_dense_mse_ratio_max_b4plus"] = max(
            v for b, v in ratio.items() if b >= 4)
    if 2 in bits and "basis" in families:
        out["rht_basis_vs_dense_mse_ratio_b2"] = (
            mean("rht", False, 2, "basis") / mean("dense", False, 2, "basis"))
    if 6 in bits and quantizer == "turboquant":
        out["dithered_turboquant_mse_over_bound_b6"] = (
            worst("rht", True, 6) / panter_dite_bound(6))
        # the Monte Carlo error of that MSE: the bound claims' margin
        out["dithered_turboquant_mse_rel_se_b6"] = max(
            float(nmse[("rht", True, 6, f)].std(ddof=1) / np.sqrt(len(nmse[("rht", True, 6, f)]))
                  / nmse[("rht", True, 6, f)].mean()) for f in families)
    return out


@register_paper("ditherq")
def run(cfg: RootConfig, ctx: RunContext) -> dict[str, float]:
    method = cfg.method
    quantizer = str(method.name)
    if quantizer not in QUANTIZERS:
        raise UserError(f"ditherq needs a quantizer method ({', '.join(QUANTIZERS)}), "
                        f"not '{quantizer}'")
    # method.bits is within the quantizer's range (its schema); the protocol's grid is cut to it
    bits = [method.bits] if method.bits is not None else [
        b for b in cfg.protocol.bits if b <= QUANTIZERS[quantizer].max_bits]
    rotation, dither = method.rotation.name, bool(method.dither)  # the arm under test

    families = _families(cfg, ctx.rng_for("input families"))
    ctx.info(f"{quantizer}: bits {bits}, {cfg.protocol.n_trials} trials, families "
             + ", ".join(f"{k}({len(v)})" for k, v in families.items()))
    nmse = measure_nmse(families, quantizer, bits, cfg.protocol.n_trials,
                        ctx.rng_for("rotations and dithers"),
                        progress=lambda it: ctx.progress(it, "trials"))

    rows = []
    for (rot, dt, b, fam), vals in nmse.items():
        rows.append({"bits": b, "rotation": rot, "dither": dt, "family": fam,
                     "nmse": vals.mean(), "nmse_sem": vals.std(ddof=1) / np.sqrt(len(vals)),
                     "bound": panter_dite_bound(b), "bits_per_coordinate":
                     bits_per_coordinate(b, dt)})
    ctx.save_table("nmse_by_family", rows)

    def mean(rot, dt, b, fam):
        return float(nmse[(rot, dt, b, fam)].mean())

    def worst(rot, dt, b):
        return max(mean(rot, dt, b, f) for f in families)

    metrics: dict[str, float] = {}
    for b in bits:
        for rot, dt in ARMS:
            tag = f"{rot}_{'dither' if dt else 'nodither'}"
            metrics[f"mse_worst_case_{tag}_b{b}"] = worst(rot, dt, b)
        ctx.log({f"worst_{r}_{'dither' if d else 'nodither'}": worst(r, d, b)
                 for r, d in ARMS}, step=b)
    if len(bits) == 1:
        b = bits[0]
        all_vals = [mean(rotation, dither, b, f) * len(families[f]) for f in families]
        metrics["mse_worst_case"] = worst(rotation, dither, b)
        metrics["mse_mean"] = sum(all_vals) / sum(len(v) for v in families.values())
        metrics["mse_worst_case_over_bound"] = metrics["mse_worst_case"] / panter_dite_bound(b)

    if len(bits) > 1:  # the grid's comparisons (a one-width sweep job reports its arm above)
        metrics.update(_grid_comparisons(bits, families, mean, worst, quantizer, nmse))

    uniformity = None
    if (len(bits) > 1 and quantizer == "turboquant" and cfg.dataset.name == "unit_vectors"
            and cfg.protocol.uniformity_dims):
        uniformity = _over_dimensions(cfg, ctx, bits)
        metrics.update(_uniformity_metrics(uniformity))

    metrics.update(_time_rotations(cfg, ctx))
    ctx.save_figure("mse_vs_bits", _figure(nmse, families, bits, quantizer, uniformity))
    return metrics


def _time_rotations(cfg: RootConfig, ctx: RunContext) -> dict[str, float]:
    """Per-vector dense rotation time over the (inverse) RHT's, per (dimension, batch)."""
    metrics, rows = {}, []
    grid = [(d, b) for d in cfg.protocol.timing_dims for b in cfg.protocol.timing_batches]
    for d, batch in ctx.progress(grid, "timing"):
        times = rotation_seconds_per_vector(d, cfg.protocol.timing_repeats,
                                            ctx.rng_for(f"timing inputs d{d} b{batch}"), batch)
        rows.append({"dim": d, "batch": batch, "dense_us": 1e6 * times.dense,
                     "rht_us": 1e6 * times.forward, "rht_inverse_us": 1e6 * times.inverse,
                     "speedup": times.dense / times.forward,
                     "speedup_inverse": times.dense / times.inverse})
        metrics[f"time_rht_speedup_vs_dense_d{d}_b{batch}"] = times.dense / times.forward
        metrics[f"time_rht_inverse_speedup_vs_dense_d{d}_b{batch}"] = times.dense / times.inverse
    if rows:
        ctx.save_table("rotation_time_per_vector", rows)
    return metrics


def _over_dimensions(cfg: RootConfig, ctx: RunContext, bits: list[int]
                     ) -> dict[int, dict[int, float]]:
    """Dithered TurboQuant with one RHT at every dimension of protocol.uniformity_dims: its
    worst-case NMSE over the same input families, over pi*sqrt(3)/2 * 4^-b, per (d, b)."""
    data_cfg, ratios, rows = cfg.dataset, {}, []
    for dim in ctx.progress(list(cfg.protocol.uniformity_dims), "dimensions"):
        families = unit_vector_families(dim, data_cfg.n_random, data_cfg.n_sparse,
                                        data_cfg.sparsity, data_cfg.n_basis,
                                        ctx.rng_for(f"input families d{dim}"))
        nmse = measure_nmse(families, "turboquant", bits, cfg.protocol.n_trials,
                            ctx.rng_for(f"rotations and dithers d{dim}"), arms=(("rht", True),))
        ratios[dim] = {b: max(float(nmse[("rht", True, b, f)].mean()) for f in families)
                       / panter_dite_bound(b) for b in bits}
        rows += [{"dim": dim, "bits": b, "worst_case_nmse_over_bound": r}
                 for b, r in ratios[dim].items()]
    ctx.save_table("bound_ratio_by_dimension", rows)
    return ratios


def _uniformity_metrics(ratios: dict[int, dict[int, float]]) -> dict[str, float]:
    """The b = 6 ratio's extremes over dimensions (the abstract: the o(1) term vanishes
    uniformly over all dimensions)."""
    at_b6 = [by_bits[6] for by_bits in ratios.values() if 6 in by_bits]
    if not at_b6:
        return {}
    return {"dithered_turboquant_mse_over_bound_b6_dims_min": min(at_b6),
            "dithered_turboquant_mse_over_bound_b6_dims_max": max(at_b6)}


def _figure(nmse, families, bits, quantizer, uniformity):

    fig, axes = subplots(3 if uniformity else 2, panel=(5.5, 4.2))
    left, right = axes[0], axes[1]
    styles = {("dense", True): ("C0", "-"), ("dense", False): ("C0", ":"),
              ("rht", True): ("C3", "-"), ("rht", False): ("C3", ":")}
    for (rot, dt), (color, ls) in styles.items():
        label = f"{rot}, {'dither' if dt else 'no dither'}"
        worst = [max(nmse[(rot, dt, b, f)].mean() for f in families) for b in bits]
        left.plot(bits, worst, color=color, ls=ls, marker="o", label=label)
        if rot == "rht":
            ratio = [max(nmse[("rht", dt, b, f)].mean() / nmse[("dense", dt, b, f)].mean()
                         for f in families) for b in bits]
            right.plot(bits, ratio, color=color, ls=ls, marker="o",
                       label=f"RHT / dense, {'dither' if dt else 'no dither'}")
    grid = np.array(bits)
    left.plot(grid, panter_dite_bound(grid), "k--", label=r"$\frac{\pi\sqrt{3}}{2}4^{-b}$")
    left.set(yscale="log", xlabel="bits per coordinate b", ylabel="worst-case NMSE over inputs",
             title=f"{quantizer}: worst case over input families")
    left.legend(fontsize=8)
    right.axhline(1.0, color="k", lw=0.8)
    right.axhspan(0.9, 1.1, color="0.9")
    right.set(yscale="log", xlabel="bits per coordinate b",
              ylabel="max over families of MSE ratio", title="one RHT vs dense rotation")
    right.legend(fontsize=8)
    if uniformity:
        dims = sorted(uniformity)
        for b in bits:
            axes[2].plot(dims, [uniformity[d][b] for d in dims], marker="o", label=f"b = {b}")
        axes[2].axhline(1.0, color="k", lw=0.8)
        axes[2].axhspan(0.95, 1.05, color="0.9")
        axes[2].set(xscale="log", xlabel="dimension d",
                    ylabel=r"worst-case NMSE / $\frac{\pi\sqrt{3}}{2}4^{-b}$",
                    title="dithered TurboQuant, one RHT: over dimensions")
        axes[2].legend(fontsize=8)
    fig.tight_layout()
    return fig
