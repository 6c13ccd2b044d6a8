"""glycandock protocol.

``dataset=complexes`` (default): synthetic complexes with both generalisation splits; the
docking model is trained per arm (base, +topology, +energy, both) on the same training set
(plus a physics-only arm: the base model's pose with every linkage at its CHI minimum)
and every test pose is scored by the model-agnostic evaluator (symmetry-corrected ligand
RMSD, success@2A/5A, DockQ in both styles, DockQC), per split and stratified by glycan size
and branching; evaluator oracles (rigid motion, pure translation, native pose) are checked in
the run; a few test complexes are exported as Protenix JSON inputs with reference and
predicted mmCIF files, which are scored again from the files.

``dataset=structure_pairs``: scores any model's predicted files against references.
``dataset=protglycandock``: the benchmark table by name; writes Protenix inputs and scores
predictions when a predictions folder is given.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from common.errors import UserError
from data.glycan_complexes import (
    ONE_LETTER,
    load_protglycandock,
    random_rotation,
    synthetic_benchmark,
    write_structure,
)
from data.glycans import chi_energy, parse_iupac, to_protenix
from experiments.helpers.figures import subplots
from experiments.runner import register_paper
from experiments.runner.context import RunContext
from experiments.schemas.glycandock import Arm, GlycandockConfig
from experiments.schemas.shared import RootConfig
from methods.glycandock import complex_topology, evaluate_files, evaluate_pose

SCORES = ("lrmsd", "success2A", "success5A", "dockq", "dockq_small_molecule", "dockqc",
          "clash_free")


def technique(arm: Arm, method: GlycandockConfig):
    from methods.glycandock.model import Technique

    if arm == "chi_minimum":  # the base model's pose with every linkage at its CHI minimum
        return Technique()
    topology = tuple(method.topology_features) if arm in ("topology", "both") else ()
    return Technique(topology, method.lambda_energy if arm in ("energy", "both") else 0.0)


@register_paper("glycandock")
def run(cfg: RootConfig, ctx: RunContext) -> dict[str, float]:
    if cfg.dataset.name == "structure_pairs":
        return score_folder(Path(cfg.dataset.root), cfg.dataset.reference, ctx)
    if cfg.dataset.name == "protglycandock":
        return benchmark_by_name(cfg, ctx)
    from methods.glycandock.model import predict, train_docking

    protocol = cfg.protocol
    with ctx.stage("benchmark"):
        bench = synthetic_benchmark(cfg.dataset, ctx.rng_for("benchmark"))
    ctx.info(f"{len(bench.train)} training complexes; held-out attachment sites "
             f"{bench.held_out_motifs}, families {bench.held_out_families}; "
             f"{len(bench.skipped_topologies)} topologies without a clash-free complex left out")
    automorphism_cache: dict = {}
    topologies = {cx.name: complex_topology(cx, automorphism_cache)
                  for complexes in bench.test.values() for cx in complexes}
    metrics = {"rmsd_oracle_max_err": rmsd_oracles(bench.test["glycan"][:25],
                                                   ctx.rng_for("rmsd oracle"), topologies)}
    rows, predictions, nets = [], {}, {}
    for arm in ctx.progress(list(protocol.arms), "arms"):
        tech = technique(arm, cfg.method)
        trained_as = "base" if arm == "chi_minimum" else arm
        if trained_as not in nets:
            with ctx.stage("training"):
                nets[trained_as] = train_docking(bench.train, tech, protocol.epochs,
                                                 protocol.batch_size, protocol.hidden,
                                                 protocol.lr, ctx.streams.seed("training"),
                                                 ctx.compute)
        for split, complexes in bench.test.items():
            with ctx.stage("prediction"):
                preds = predict(nets[trained_as], complexes, tech,
                                chi_minimum=arm == "chi_minimum")
            predictions[arm, split] = preds
            for cx, pred in zip(complexes, preds, strict=True):
                scores = evaluate_pose(topologies[cx.name], cx.protein_xyz, cx.ligand_xyz,
                                       cx.protein_xyz, pred["ligand"])
                rows.append({"arm": arm, "split": split, "case": cx.name,
                             "topology": cx.topology, "residues": len(cx.glycan),
                             "branched": any(len(cx.glycan.children(i)) > 1
                                             for i in range(len(cx.glycan))),
                             **{k: scores[k] for k in SCORES},
                             "chi_energy": pred["chi_energy"] if pred["links"] else np.nan,
                             "pointer_ok": float(pred["pointer_ok"])})
        ctx.save_table("poses", rows)  # after every arm: a run stopped later keeps these
    for arm in protocol.arms:  # the glycan split's complexes, paired across arms
        ctx.save_instances(f"success2A_{arm}_glycan_split", {
            r["case"]: r["success2A"] for r in rows if r["arm"] == arm and r["split"] == "glycan"})
    summary = summarize(rows)
    ctx.save_table("summary", summary)
    ctx.save_table("stratified", stratify(rows))
    metrics.update(headline(summary, rows, bench))
    metrics["file_rescore_max_err"] = export_cases(bench.test["glycan"][:protocol.export_protenix],
                                                   predictions, rows, ctx)
    ctx.save_figure("glycandock", figure(summary, rows, predictions, bench))
    return metrics


def rmsd_oracles(complexes, rng, topologies: dict) -> float:
    """Largest evaluator error on poses with a known answer: the whole complex moved rigidly
    (RMSD 0, DockQ 1), the glycan alone translated by t (RMSD |t|)."""
    worst = 0.0
    for cx in complexes:
        topo = topologies[cx.name]
        q = random_rotation(rng)
        shift = rng.normal(0, 10, size=3)
        moved = evaluate_pose(topo, cx.protein_xyz, cx.ligand_xyz, cx.protein_xyz @ q.T + shift,
                              cx.ligand_xyz @ q.T + shift)
        t = rng.normal(0, 2, size=3)
        translated = evaluate_pose(topo, cx.protein_xyz, cx.ligand_xyz, cx.protein_xyz,
                                   cx.ligand_xyz + t)
        worst = max(worst, moved["lrmsd"], abs(moved["dockq"] - 1),
                    abs(translated["lrmsd"] - np.linalg.norm(t)))
    return float(worst)


def summarize(rows: list[dict]) -> list[dict]:
    out = []
    for arm in dict.fromkeys(r["arm"] for r in rows):
        for split in dict.fromkeys(r["split"] for r in rows):
            sel = [r for r in rows if r["arm"] == arm and r["split"] == split]
            out.append({"arm": arm, "split": split, "cases": len(sel),
                        "median_lrmsd": float(np.median([r["lrmsd"] for r in sel])),
                        **{k: float(np.mean([r[k] for r in sel])) for k in SCORES[1:]},
                        "chi_energy": float(np.nanmean([r["chi_energy"] for r in sel])),
                        "pointer_accuracy": float(np.mean([r["pointer_ok"] for r in sel]))})
    return out


def stratify(rows: list[dict]) -> list[dict]:
    """success@2A per arm, split, glycan size and branching."""
    size = {1: "1", 2: "2-3", 3: "2-3"}
    out = []
    keys = sorted({(r["arm"], r["split"], size.get(r["residues"], "4+"), r["branched"])
                   for r in rows})
    for arm, split, band, branched in keys:
        sel = [r for r in rows if (r["arm"], r["split"], size.get(r["residues"], "4+"),
                                   r["branched"]) == (arm, split, band, branched)]
        out.append({"arm": arm, "split": split, "residues": band, "branched": branched,
                    "cases": len(sel), "success2A": float(np.mean([r["success2A"] for r in sel])),
                    "median_lrmsd": float(np.median([r["lrmsd"] for r in sel]))})
    return out


def headline(summary: list[dict], rows: list[dict], bench) -> dict[str, float]:
    out = {}
    for s in summary:
        tag = f"{s['arm']}_{s['split']}_split"
        for key in ("success2A", "success5A", "median_lrmsd", "dockq", "dockqc",
                    "pointer_accuracy", "chi_energy", "clash_free"):
            out[f"{key}_{tag}"] = s[key]
    for arm in dict.fromkeys(r["arm"] for r in rows):
        out[f"chi_energy_{arm}"] = float(np.nanmean([r["chi_energy"] for r in rows
                                                     if r["arm"] == arm]))
    if "chi_energy_energy" in out:
        out["chi_energy_energyloss"] = out["chi_energy_energy"]
    reference = [float(chi_energy(cx.torsions[k, t], kind))
                 for cx in bench.test["glycan"] + bench.test["protein"]
                 for k, kinds in enumerate(cx.glycan.chi_kinds()) for t, kind in enumerate(kinds)]
    out["chi_energy_reference"] = float(np.mean(reference))
    return out


def export_cases(complexes, predictions: dict, rows: list[dict], ctx: RunContext) -> float:
    """Protenix JSON inputs, reference and predicted mmCIF files of a few test complexes under
    ``protenix/``; returns the largest difference between the from-file ligand RMSD and the
    one already scored in ``rows`` (files keep three decimals, so an atom at the 10 A pocket
    cut-off can flip and move the superposition by a few thousandths of an angstrom)."""
    folder = ctx.output_dir / "protenix"
    jobs, worst = [], 0.0
    glycan_preds = {arm: preds for (arm, split), preds in predictions.items()
                    if split == "glycan"}
    scored = {(r["arm"], r["case"]): r["lrmsd"] for r in rows if r["split"] == "glycan"}
    for k, cx in enumerate(complexes):
        sequence = "".join(ONE_LETTER[a] for a in cx.residue_names)
        jobs.append(to_protenix(cx.name, [sequence], cx.glycan))
        if not ctx.writes:
            continue
        reference = write_structure(folder / cx.name / "reference.cif", cx)
        for arm, preds in glycan_preds.items():
            path = write_structure(folder / cx.name / f"{arm}.cif", cx, preds[k]["ligand"])
            worst = max(worst, abs(evaluate_files(reference, path)["lrmsd"]
                                   - scored[arm, cx.name]))
    if ctx.writes:
        (folder / "inputs.json").write_text(json.dumps(jobs, indent=1))
    return float(worst)


def score_folder(root: Path, reference: str, ctx: RunContext) -> dict[str, float]:
    """Score every ``<case>/<model>.{cif,pdb}`` against ``<case>/<reference>.*``."""
    if not root.is_dir():
        raise UserError(f"structure folder not found: {root}")
    rows = []
    for case in ctx.progress(sorted(p for p in root.iterdir() if p.is_dir()), "cases"):
        files = sorted(p for p in case.iterdir() if p.suffix in (".cif", ".pdb"))
        refs = [p for p in files if p.stem == reference]
        if not refs:
            raise UserError(f"{case}: no {reference}.cif or {reference}.pdb")
        for pred in files:
            if pred.stem != reference:
                rows.append({"case": case.name, "model": pred.stem,
                             **evaluate_files(refs[0], pred)})
    if not rows:
        raise UserError(f"{root}: no <case>/<model>.cif next to a {reference} file")
    ctx.save_table("poses", rows)
    out = {}
    for model in dict.fromkeys(r["model"] for r in rows):
        sel = [r for r in rows if r["model"] == model]
        for key in ("success2A", "success5A", "dockq", "dockqc"):
            out[f"{key}_{model}"] = float(np.mean([r[key] for r in sel]))
        out[f"median_lrmsd_{model}"] = float(np.median([r["lrmsd"] for r in sel]))
    return out


def benchmark_by_name(cfg: RootConfig, ctx: RunContext) -> dict[str, float]:
    data = cfg.dataset
    rows = load_protglycandock(data.hub_id, data.split, data.limit)
    ctx.info(f"{len(rows)} rows; columns: {', '.join(rows[0]) if rows else '(none)'}")
    jobs = []
    for r in rows:
        sequences = [v for k, v in r.items() if "sequence" in k.lower() and isinstance(v, str)]
        glycan = next((r[k] for k in r if k.lower() in ("glycan", "iupac", "glycan_iupac")),
                      None)
        if sequences and glycan:
            jobs.append(to_protenix(str(r.get("case_name", r.get("pdb_id"))), sequences,
                                    parse_iupac(glycan)))
    if ctx.writes:
        (ctx.output_dir / "protenix_inputs.json").write_text(json.dumps(jobs, indent=1))
    out = {"cases": float(len(rows)), "protenix_inputs": float(len(jobs))}
    if data.predictions_root:
        out.update(score_folder(Path(data.predictions_root), "reference", ctx))
    return out


def figure(summary, rows, predictions, bench):
    fig, axes = subplots(3, panel=(4.8, 3.6))
    arms = list(dict.fromkeys(s["arm"] for s in summary))
    splits = list(dict.fromkeys(s["split"] for s in summary))
    width = 0.8 / len(arms)
    for a, arm in enumerate(arms):
        values = [next(s["success2A"] for s in summary if s["arm"] == arm and s["split"] == sp)
                  for sp in splits]
        axes[0].bar(np.arange(len(splits)) + a * width, values, width, label=arm)
    axes[0].set_xticks(np.arange(len(splits)) + 0.4 - width / 2,
                       [f"{s} generalisation" for s in splits])
    axes[0].set(title="success@2A (ligand RMSD < 2 A)", ylabel="fraction of test complexes")
    axes[0].legend(fontsize=7)
    grid = np.linspace(0, 10, 200)
    for arm in arms:
        r = np.sort([x["lrmsd"] for x in rows if x["arm"] == arm and x["split"] == "glycan"])
        axes[1].plot(grid, np.searchsorted(r, grid) / max(len(r), 1), label=arm)
    axes[1].axvline(2.0, color="grey", lw=0.8, ls="--")
    axes[1].set(title="glycan split: ligand RMSD CDF", xlabel="RMSD (A)", ylabel="fraction")
    axes[1].legend(fontsize=7)
    _landscape(axes[2], arms, predictions, bench)
    fig.tight_layout()
    return fig


def _landscape(ax, arms, predictions, bench):
    """The most frequent (phi, psi) CHI pair of the glycan split: its energy surface, the
    reference torsions, and the base and combined arms' predictions."""
    counts: dict = {}
    for cx in bench.test["glycan"]:
        for pair in cx.glycan.chi_kinds():
            counts[pair] = counts.get(pair, 0) + 1
    if not counts:
        return
    pair = max(counts, key=counts.get)
    grid = np.arange(-180, 181, 3.0)
    import torch

    surface = (chi_energy(torch.tensor(grid), pair[0])[None, :]
               + chi_energy(torch.tensor(grid), pair[1])[:, None]).numpy()
    ax.contourf(grid, grid, np.minimum(surface, 12), levels=12, cmap="Greys_r")

    def points(source):
        return np.array([t[k] for cx, t in source
                         for k, kinds in enumerate(cx.glycan.chi_kinds()) if kinds == pair])

    truth = points([(cx, cx.torsions) for cx in bench.test["glycan"]])
    ax.scatter(truth[:, 0], truth[:, 1], s=4, c="tab:green", label="reference")
    for arm, colour in (("base", "tab:red"), ("both", "tab:blue")):
        if (arm, "glycan") in predictions:
            pts = points([(cx, p["torsions"]) for cx, p in
                          zip(bench.test["glycan"], predictions[arm, "glycan"], strict=True)])
            ax.scatter(pts[:, 0], pts[:, 1], s=10, marker="x", c=colour, label=arm)
    ax.set(title=f"{pair[0]} x {pair[1]} (CHI energy)", xlabel="phi (deg)", ylabel="psi (deg)",
           xlim=(-180, 180), ylim=(-180, 180))
    ax.legend(fontsize=7)

