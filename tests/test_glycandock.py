"""glycandock: CHI energies against Rosetta's unit-test values, the internal-coordinate
builder against its own inputs and Biopython's dihedral, glycan text and Protenix JSON round
trips, the CHI linkage rules, RMSD oracles (rigid motion, translation, symmetric atoms against
spyrmsd, Kabsch against scipy), DockQ/DockQC identities and monotonicity, mmCIF/PDB round
trips through the file evaluator, the generator's splits, and protocol runs."""

from __future__ import annotations

import copy
import functools
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from data.glycan_complexes import (
    motifs,
    physical_ligand,
    random_glycan,
    random_rotation,
    sample_torsions,
    synthetic_benchmark,
    write_structure,
)
from data.glycans import (
    CHI_KINDS,
    Glycan,
    GlycanBuilder,
    bond_angle,
    chi_derivative,
    chi_energy,
    dihedral,
    from_protenix,
    internal_clashes,
    parse_iupac,
    place_atom,
    psi_kind,
    separated_pairs,
    to_protenix,
)
from methods.glycandock import (
    automorphisms,
    complex_topology,
    evaluate_files,
    evaluate_pose,
    glycan_features,
    kabsch,
    symmetric_rmsd,
    tree_distances,
)

from .conftest import run_failing, run_paper
from .smoke import SMOKE

# Rosetta test/core/scoring/CHIEnergyFunction.cxxtest.hh: E(0), E(60), E(-180), E'(0)
ROSETTA = {
    "alpha_phi": (9.42684, 0.431136, 4.99904, -0.117671),
    "beta_phi": (4.99893, 2.85052, 5.81316, 0.0251501),
    "psi_2ax_3eq_4ax": (4.47984, 3.94917, -0.120704, 0.00994998),
    "psi_2eq_3ax_4eq": (5.49093, 0.980713, 1.022, 2.90e-5),
    "alpha6_psi": (7.4798, 3.61764, 3.07e-5, -0.09549),
    "beta6_psi": (7.26952, 3.14496, 8.07e-6, 0.025375),
}
N_GLYCAN = "Man(a1-3)[Man(a1-6)]Man(b1-4)GlcNAc(b1-4)GlcNAc"


@pytest.mark.parametrize("kind", CHI_KINDS)
def test_chi_energies_match_rosetta_unit_values(kind):
    e0, e60, e180, d0 = ROSETTA[kind]
    assert float(chi_energy(0.0, kind)) == pytest.approx(e0, abs=2e-3)
    assert float(chi_energy(60.0, kind)) == pytest.approx(e60, abs=2e-3)
    assert float(chi_energy(-180.0, kind, wrap=False)) == pytest.approx(e180, abs=2e-3)
    assert float(chi_derivative(0.0, kind)) == pytest.approx(d0, abs=2e-3)
    x = torch.linspace(-170, 170, 35, dtype=torch.float64, requires_grad=True)
    chi_energy(x, kind).sum().backward()
    assert torch.allclose(x.grad, chi_derivative(x.detach(), kind), atol=1e-9)


def test_chi_energy_wraps_into_each_domain():
    assert float(chi_energy(-90.0, "psi_2ax_3eq_4ax")) == pytest.approx(
        float(chi_energy(270.0, "psi_2ax_3eq_4ax")))
    assert float(chi_energy(200.0, "alpha_phi")) == pytest.approx(
        float(chi_energy(-160.0, "alpha_phi")))


def test_linkage_rules():
    assert psi_kind("BGC", "BGC", 4) == "psi_2eq_3ax_4eq"  # Glc O4 equatorial, even
    assert psi_kind("BGC", "GAL", 4) == "psi_2ax_3eq_4ax"  # Gal O4 axial, even
    assert psi_kind("MAN", "BGC", 3) == "psi_2ax_3eq_4ax"  # Glc O3 equatorial, odd
    assert psi_kind("MAN", "BMA", 2) == "psi_2ax_3eq_4ax"  # Man O2 axial, even
    assert psi_kind("MAN", "BMA", 6) == "alpha6_psi"
    assert psi_kind("NAG", "BMA", 6) == "beta6_psi"


def test_nerf_places_the_requested_geometry_and_agrees_with_biopython():
    from Bio.PDB.vectors import Vector, calc_dihedral

    rng = np.random.default_rng(0)
    for _ in range(20):
        a, b, c = (torch.tensor(rng.normal(size=3) * 2) for _ in range(3))
        bond, angle, torsion = rng.uniform(1, 2), rng.uniform(60, 170), rng.uniform(-179, 179)
        d = place_atom(a, b, c, bond, angle, torsion)
        assert float((d - c).norm()) == pytest.approx(bond, abs=1e-9)
        assert float(bond_angle(b, c, d)) == pytest.approx(angle, abs=1e-6)
        assert float(dihedral(a, b, c, d)) == pytest.approx(torsion, abs=1e-6)
        ours = float(dihedral(a, b, c, d))
        theirs = math.degrees(calc_dihedral(*(Vector(*p.tolist()) for p in (a, b, c, d))))
        assert ours == pytest.approx(theirs, abs=1e-6)


def test_builder_round_trip_and_bond_lengths():
    glycan = parse_iupac("Gal(b1-4)GlcNAc(b1-2)Man(a1-3)[Man(a1-6)]Man(b1-4)GlcNAc")
    builder = GlycanBuilder(glycan, torch.float64)
    torsions = torch.rand(3, len(glycan) - 1, 2, dtype=torch.float64) * 360 - 180
    q, _ = torch.linalg.qr(torch.randn(3, 3, dtype=torch.float64))
    q = q * torch.sign(torch.det(q))
    x = builder.build(q.expand(3, 3, 3), torch.randn(3, 3, dtype=torch.float64), torsions)
    wrapped = torch.remainder(builder.measure_torsions(x) - torsions + 180, 360) - 180
    assert wrapped.abs().max() < 1e-6
    lengths = torch.stack([(x[:, i] - x[:, j]).norm(dim=-1) for i, j in builder.bonds])
    assert 1.2 < float(lengths.min()) and float(lengths.max()) < 1.55
    assert len(builder.bonds) == len(builder.atoms) - 1 + len(glycan)  # a tree of rings


def test_iupac_and_protenix_round_trips():
    glycan = parse_iupac(N_GLYCAN)
    assert glycan.codes == ["NAG", "NAG", "BMA", "MAN", "MAN"]
    assert glycan.parents == [-1, 0, 1, 2, 2] and glycan.positions == [0, 4, 4, 3, 6]
    assert parse_iupac(glycan.to_iupac()) == glycan
    job = json.loads(json.dumps(to_protenix("case", ["ACDE"], glycan)))
    assert job["sequences"][1]["ligand"]["ligand"] == "CCD_NAG_NAG_BMA_MAN_MAN"
    bond = job["covalent_bonds"][0]  # 1-based entities and positions
    assert (bond["left_entity"], bond["left_position"], bond["left_atom"]) == (2, 1, "O4")
    assert (bond["right_position"], bond["right_atom"]) == (2, "C1")
    assert from_protenix(job) == (["ACDE"], glycan)
    rng = np.random.default_rng(1)
    for _ in range(30):
        g = random_glycan(rng, 6)
        assert parse_iupac(g.to_iupac()) == g
        assert from_protenix(to_protenix("x", [], g))[1] == g


def test_bad_glycans_fail_clearly():
    from common.errors import UserError

    with pytest.raises(UserError, match="has no O2"):
        Glycan(["NAG", "MAN"], [-1, 0], [0, 2])
    with pytest.raises(UserError, match="unsupported monosaccharide"):
        Glycan(["XYZ"], [-1], [0])
    with pytest.raises(UserError, match="unbalanced|cannot parse"):
        parse_iupac("Man(a1-3)[Man(a1-6)Man")


@functools.cache  # shared by the tests that only read it (copy before changing one)
def _complexes(n=6, seed=0):
    cfg = OmegaConf.create(dict(families=6, held_out_families=2, topologies=30, max_residues=4,
                                held_out_topology_fraction=0.3, kt=0.6, train_complexes=n,
                                test_complexes=n))
    return synthetic_benchmark(cfg, np.random.default_rng(seed))


def test_generator_splits_hold_out_families_and_attachment_sites():
    bench = _complexes(16)
    held = set(bench.held_out_motifs)
    assert all(not (motifs(cx.glycan) & held) for cx in bench.train)
    assert all(motifs(cx.glycan) & held for cx in bench.test["glycan"])
    assert {cx.family for cx in bench.test["protein"]} <= set(bench.held_out_families)
    assert not {cx.family for cx in bench.train} & set(bench.held_out_families)
    cx = bench.train[0]
    built = GlycanBuilder(cx.glycan, torch.float64)
    wrapped = (built.measure_torsions(torch.tensor(cx.ligand_xyz)) - torch.tensor(cx.torsions)
               + 180) % 360 - 180
    assert wrapped.abs().max() < 1e-6  # the stored torsions are the built ones


def test_rmsd_oracles():
    rng = np.random.default_rng(0)
    for cx in _complexes(4).train:
        topo = complex_topology(cx)
        q = random_rotation(rng)
        moved = evaluate_pose(topo, cx.protein_xyz, cx.ligand_xyz, cx.protein_xyz @ q.T + 5,
                              cx.ligand_xyz @ q.T + 5)
        assert moved["lrmsd"] < 1e-9 and moved["dockq"] == pytest.approx(1.0)
        t = np.array([1.0, -2.0, 0.5])
        shifted = evaluate_pose(topo, cx.protein_xyz, cx.ligand_xyz, cx.protein_xyz,
                                cx.ligand_xyz + t)
        assert shifted["lrmsd"] == pytest.approx(np.linalg.norm(t), abs=1e-9)


def test_kabsch_matches_scipy():
    from scipy.spatial.transform import Rotation

    rng = np.random.default_rng(3)
    a = rng.normal(size=(12, 3))
    b = a @ Rotation.random(random_state=4).as_matrix().T + rng.normal(0, 0.1, (12, 3))
    r, t = kabsch(a, b)
    theirs, _ = Rotation.align_vectors(b - b.mean(0), a - a.mean(0))
    assert np.allclose(r, theirs.as_matrix(), atol=1e-8)
    assert np.allclose(t, b.mean(0) - r @ a.mean(0))


def test_symmetric_rmsd_matches_spyrmsd():
    spyrmsd = pytest.importorskip("spyrmsd.rmsd")
    # acetate: the two carboxylate oxygens are equivalent
    elements = ["C", "C", "O", "O"]
    bonds = [(0, 1), (1, 2), (1, 3)]
    ref = np.array([[0.0, 0, 0], [1.5, 0, 0], [2.2, 1.1, 0], [2.2, -1.1, 0]])
    swapped = ref[[0, 1, 3, 2]] + np.array([0.05, -0.02, 0.1])
    perms = automorphisms(elements, bonds)
    assert len(perms) == 2
    plain = np.sqrt(((swapped - ref) ** 2).sum(-1).mean())
    ours = symmetric_rmsd(swapped, ref, perms)
    adjacency = np.zeros((4, 4), dtype=int)
    for i, j in bonds:
        adjacency[i, j] = adjacency[j, i] = 1
    atomic = np.array([6, 6, 8, 8])
    theirs = spyrmsd.symmrmsd(ref, swapped, atomic, atomic, adjacency, adjacency)
    assert plain > 1.0 and ours == pytest.approx(theirs, abs=1e-9) and ours < 0.2


def test_dockq_is_one_for_the_native_pose_and_falls_with_displacement():
    cx = _complexes(2).train[0]
    topo = complex_topology(cx)
    native = evaluate_pose(topo, cx.protein_xyz, cx.ligand_xyz, cx.protein_xyz, cx.ligand_xyz)
    assert native["fnat"] == 1 and native["irms"] < 1e-9 and native["lrms"] < 1e-9
    assert native["dockq"] == pytest.approx(1.0)
    assert native["dockq_small_molecule"] == pytest.approx(2 / 3)
    assert native["dockqc"] == pytest.approx(1.0)
    direction = np.array([0.6, 0.0, 0.8])
    scores = [evaluate_pose(topo, cx.protein_xyz, cx.ligand_xyz, cx.protein_xyz,
                            cx.ligand_xyz + s * direction) for s in (0.5, 1, 2, 4, 8)]
    for key in ("dockq", "dockq_small_molecule", "dockqc"):
        values = [s[key] for s in scores]
        assert all(x > y for x, y in zip(values, values[1:], strict=False)), key


def test_structure_files_score_like_the_arrays(tmp_path):
    pytest.importorskip("gemmi")
    cx = _complexes(2).train[1]
    pose = cx.ligand_xyz + np.array([0.7, -0.4, 0.2])
    direct = evaluate_pose(complex_topology(cx), cx.protein_xyz, cx.ligand_xyz, cx.protein_xyz,
                           pose)
    for suffix, tol in ((".cif", 2e-3), (".pdb", 2e-3)):  # files keep three decimals
        ref = write_structure(tmp_path / f"ref{suffix}", cx)
        pred = write_structure(tmp_path / f"pred{suffix}", cx, pose)
        from_files = evaluate_files(ref, pred)
        for key in ("lrmsd", "dockq", "dockqc", "fnat"):
            assert from_files[key] == pytest.approx(direct[key], abs=tol), (suffix, key)


def test_references_are_clash_free_where_independent_draws_overlap():
    """Independent (phi, psi) draws of a branched glycan put atoms on top of each other
    (2.5% of 200 draws with a pair under 1.0 A, more than a third with a van der Waals
    clash); the generator's references have no clash within the glycan or with the pocket,
    as the evaluator scores them (``clashes`` of the native pose)."""
    glycan = parse_iupac("Man(a1-3)[Man(a1-6)]Man(b1-4)GlcNAc")
    builder = GlycanBuilder(glycan, torch.float64)
    pairs = separated_pairs(len(builder.atoms), builder.bonds)
    rng = np.random.default_rng(0)
    clashing = sum(internal_clashes(builder.build(torch.eye(3, dtype=torch.float64)[None],
                                                  torch.zeros(1, 3, dtype=torch.float64),
                                                  torch.tensor(sample_torsions(glycan, 0.6,
                                                                               rng))[None])[0]
                                    .numpy(), builder.elements, pairs) > 0 for _ in range(200))
    assert clashing > 20  # the check has something to catch
    for _ in range(20):
        ligand, _ = physical_ligand(glycan, 0.6, rng)
        assert internal_clashes(ligand, builder.elements, pairs) == 0
    bench = _complexes(16)
    for cx in bench.train + bench.test["glycan"]:
        native = evaluate_pose(complex_topology(cx), cx.protein_xyz, cx.ligand_xyz,
                               cx.protein_xyz, cx.ligand_xyz)
        assert native["clashes"] == 0 and native["clash_free"] == 1


def test_clash_count_sees_a_folded_glycan_and_a_pose_inside_the_protein():
    cx = _complexes(2).train[0]
    topo = complex_topology(cx)
    atom = int(np.argmin(np.linalg.norm(cx.protein_xyz - cx.ligand_xyz[0], axis=-1)))
    into_protein = cx.ligand_xyz + (cx.protein_xyz[atom] - cx.ligand_xyz[0])
    assert evaluate_pose(topo, cx.protein_xyz, cx.ligand_xyz, cx.protein_xyz,
                         into_protein)["clashes"] >= 1
    i, j = topo.ligand_pairs[0]
    folded = cx.ligand_xyz.copy()
    folded[j] = folded[i] + 0.5
    assert evaluate_pose(topo, cx.protein_xyz, cx.ligand_xyz, cx.protein_xyz,
                         folded)["clashes"] >= 1


@pytest.mark.parametrize("suffix", [".cif", ".pdb"])
def test_files_take_bonds_from_the_glycan_graph_even_for_overlapping_atoms(tmp_path, suffix):
    """Bonds inferred from distances join two overlapping atoms and make them
    interchangeable (a reference with O6 and O3 swapped then scores 0 from files); bonds
    from the monosaccharide templates and the link records keep the file path equal to the
    in-memory path, on a clashing reference and on a physical one, and without link records
    (the glycosidic bond then found from C1)."""
    pytest.importorskip("gemmi")
    cx = _complexes(2).train[1]
    builder = GlycanBuilder(cx.glycan)
    index = {atom: k for k, atom in enumerate(builder.atoms)}
    residue = next(r for r in range(len(cx.glycan)) if (r, "O6") in index and (r, "O3") in index)
    o6, o3 = index[residue, "O6"], index[residue, "O3"]
    swapped = cx.ligand_xyz.copy()
    swapped[[o6, o3]] = swapped[[o3, o6]]
    clashing = copy.deepcopy(cx)
    clashing.ligand_xyz = cx.ligand_xyz.copy()
    clashing.ligand_xyz[o6] = clashing.ligand_xyz[o3] + 0.3  # O6 folded onto O3
    for reference in (cx, clashing):
        pose = swapped if reference is cx else clashing.ligand_xyz[
            np.r_[[o3 if k == o6 else o6 if k == o3 else k for k in range(len(index))]]]
        direct = evaluate_pose(complex_topology(reference), reference.protein_xyz,
                               reference.ligand_xyz, reference.protein_xyz, pose)
        ref = write_structure(tmp_path / f"ref{suffix}", reference)
        pred = write_structure(tmp_path / f"pred{suffix}", reference, pose)
        from_files = evaluate_files(ref, pred)
        assert direct["lrmsd"] > 0.1
        for key in ("lrmsd", "clashes", "dockqc"):
            assert from_files[key] == pytest.approx(direct[key], abs=2e-3), key
    text = ref.read_text()
    unlinked = tmp_path / f"unlinked{suffix}"
    unlinked.write_text("\n".join(line for line in text.splitlines()
                                  if not line.startswith("LINK") and "glyco" not in line))
    assert evaluate_files(unlinked, pred)["lrmsd"] == pytest.approx(from_files["lrmsd"], abs=2e-3)


def test_topological_features():
    glycan = parse_iupac("Gal(b1-4)[Fuc(a1-3)]GlcNAc(b1-2)Man")
    import networkx as nx

    graph = nx.Graph([(j, glycan.parents[j]) for j in glycan.links])
    d = tree_distances(glycan)
    for i in range(len(glycan)):
        for j in range(len(glycan)):
            assert d[i, j] == nx.shortest_path_length(graph, i, j)
    base = glycan_features(glycan)
    full = glycan_features(glycan, ("anomer", "sugar", "stereo", "tree"))
    assert base.shape == (4, 15) and full.shape == (4, 15 + 2 + 5 + 3 + 4)
    gal = glycan.codes.index("GAL")
    assert full[gal, 15 + 7] == 0  # Gal hangs from GlcNAc O4: equatorial
    assert glycan_features(parse_iupac("Glc(b1-4)Gal"), ("stereo",))[1, 15] == 1  # Gal O4 axial
    with pytest.raises(ValueError, match="unknown topological"):
        glycan_features(glycan, ("colour",))


def test_energy_loss_is_the_chi_energy_of_the_built_torsions():
    from methods.glycandock.model import glycan_energy

    glycan = parse_iupac(N_GLYCAN)
    builder = GlycanBuilder(glycan, torch.float64)
    torsions = (torch.rand(2, 4, 2, dtype=torch.float64) * 360 - 180).requires_grad_()
    x = builder.build(torch.eye(3, dtype=torch.float64).expand(2, 3, 3),
                      torch.zeros(2, 3, dtype=torch.float64), torsions)
    energy = glycan_energy(builder, x, glycan.chi_kinds())
    expected = torch.stack([chi_energy(torsions[:, k, t], kind)
                            for k, pair in enumerate(glycan.chi_kinds())
                            for t, kind in enumerate(pair)], -1).mean(-1)
    assert torch.allclose(energy, expected, atol=1e-8)
    energy.sum().backward()
    direct = torch.stack([chi_derivative(torsions[:, k, t].detach(), kind)
                          for k, pair in enumerate(glycan.chi_kinds())
                          for t, kind in enumerate(pair)], -1).reshape(2, 4, 2) / 8
    assert torch.allclose(torsions.grad, direct, atol=1e-6)


def test_chi_minimum_arm_builds_every_linkage_at_its_chi_minimum():
    from methods.glycandock.model import DockingNet, Technique, chi_minima, predict

    bench = _complexes(6)
    net = DockingNet(15, 8, False)
    preds = predict(net, bench.train, Technique(), chi_minimum=True)
    grid = torch.arange(-180.0, 180.0, dtype=torch.float64)
    for cx, pred in zip(bench.train, preds, strict=True):
        kinds = cx.glycan.chi_kinds()
        want = chi_minima(kinds).double()
        got = torch.tensor(pred["torsions"], dtype=torch.float64)
        assert torch.allclose(torch.remainder(got - want + 180, 360) - 180,
                              torch.zeros_like(got), atol=1e-2)
        lowest = [float(chi_energy(grid, k).min()) for pair in kinds for k in pair]
        if kinds:
            assert pred["chi_energy"] == pytest.approx(np.mean(lowest), abs=1e-3)


SMALL_RUN = SMOKE["glycandock"]


def test_protocol_run(smoke_run, tmp_path):
    m, run_dir = smoke_run("glycandock")
    for key in ("success2A_base_glycan_split", "success2A_both_glycan_split", "chi_energy_base",
                "success2A_chi_minimum_glycan_split",
                "rmsd_oracle_max_err", "success2A_both_protein_split", "chi_energy_reference"):
        assert key in m and math.isfinite(m[key])
    assert m["rmsd_oracle_max_err"] < 1e-8 and m["file_rescore_max_err"] < 1e-2
    jobs = json.loads((run_dir / "protenix" / "inputs.json").read_text())
    assert len(jobs) == 2 and (run_dir / "figures" / "glycandock.png").exists()
    # the exported files score with the structure_pairs dataset
    pairs = run_paper(["+paper=glycandock", "dataset=structure_pairs",
                       f"dataset.root={run_dir / 'protenix'}"], tmp_path / "pairs")
    assert set(pairs) >= {"success2A_base", "success2A_both", "median_lrmsd_both"}


def test_offline_benchmark_and_missing_folder_fail_with_one_line(tmp_path):
    code, failed = run_failing(["+paper=glycandock", "dataset=protglycandock"],
                               tmp_path / "hub")
    assert code == 2 and "network access" in failed["error"]
    code, failed = run_failing(["+paper=glycandock", "dataset=structure_pairs",
                                f"dataset.root={tmp_path / 'nowhere'}"], tmp_path / "pairs")
    assert code == 2 and "not found" in failed["error"]


def _benzoate_files(folder: Path, seed: int, relabel: str = "mirror"
                    ) -> tuple[Path, Path, float, float]:
    """A benzoate-like ligand (6-ring + carboxylate) under a known sugar code but with atom
    names its template does not have, beside a few glycines: the reference, and a prediction
    moved rigidly with 0.3 A of noise on the ligand and its atoms relabelled, by the mirror
    symmetry (``mirror``: a symmetric RMSD near the noise) or by turning the ring labels one
    step (``rotate``: not a symmetry, so the symmetric RMSD stays large; a scorer that matched
    atoms by element alone would call it near 0). Returns the two PDB files (with CONECT
    records), spyrmsd's symmetry-corrected RMSD and the plain one after the same
    superposition."""
    spyrmsd = pytest.importorskip("spyrmsd.rmsd")
    from scipy.spatial.transform import Rotation

    angles = np.deg2rad(np.arange(6) * 60.0)
    ring = np.c_[1.39 * np.cos(angles), 1.39 * np.sin(angles), np.zeros(6)]
    carboxyl_c = np.array([1.39 + 1.50, 0.0, 0.0])
    oxygens = carboxyl_c + 1.25 * np.array([[0.5, 0.866, 0.0], [0.5, -0.866, 0.0]])
    ligand = np.vstack([ring, carboxyl_c, oxygens])
    names = ["CR1", "CR2", "CR3", "CR4", "CR5", "CR6", "CX", "OX1", "OX2"]
    elements = ["C"] * 7 + ["O"] * 2
    bonds = [(i, (i + 1) % 6) for i in range(6)] + [(0, 6), (6, 7), (6, 8)]
    protein = np.array([[x, y, 4.2 + 0.3 * k] for k, (x, y) in enumerate(
        [(-3, -2), (-1.5, -2.5), (0, -2), (1.5, -2.5), (3, -2), (4.5, -1.5), (-4, 1),
         (-2.5, 2), (-1, 1.5), (0.5, 2), (2, 1.5), (3.5, 2)])])
    rng = np.random.default_rng(seed)
    rotation = Rotation.random(random_state=seed).as_matrix()
    shift = rng.normal(0, 5, 3)
    order = {"mirror": [0, 5, 4, 3, 2, 1, 6, 8, 7],  # the ring's and the oxygens' mirror
             "rotate": [1, 2, 3, 4, 5, 0, 6, 7, 8]}[relabel]
    moved_ligand = (ligand[order] + rng.normal(0, 0.3, ligand.shape)) @ rotation.T + shift
    moved_protein = protein @ rotation.T + shift

    def write(path: Path, protein_xyz, ligand_xyz) -> Path:
        lines, serial = [], 0
        for k, xyz in enumerate(protein_xyz):
            serial += 1
            atom = ("N", "CA", "C", "O")[k % 4]
            lines.append(f"ATOM  {serial:5d} {atom:<4} GLY A{k // 4 + 1:4d}    "
                         f"{xyz[0]:8.3f}{xyz[1]:8.3f}{xyz[2]:8.3f}  1.00  0.00          "
                         f"{atom[0]:>2}")
        first = serial + 1
        for name, element, xyz in zip(names, elements, ligand_xyz, strict=True):
            serial += 1
            lines.append(f"HETATM{serial:5d} {name:<4} BGC B   1    "
                         f"{xyz[0]:8.3f}{xyz[1]:8.3f}{xyz[2]:8.3f}  1.00  0.00          "
                         f"{element:>2}")
        lines += [f"CONECT{first + i:5d}{first + j:5d}" for i, j in bonds]
        path.write_text("\n".join(lines + ["END"]) + "\n")
        return path

    ref = write(folder / "benzoate_ref.pdb", protein, ligand)
    pred = write(folder / "benzoate_pred.pdb", moved_protein, moved_ligand)
    model = (np.round(moved_ligand, 3) - shift) @ rotation  # the protein superposition, undone
    adjacency = np.zeros((9, 9), dtype=int)
    for i, j in bonds:
        adjacency[i, j] = adjacency[j, i] = 1
    atomic = np.array([6] * 7 + [8] * 2)
    symmetric = spyrmsd.symmrmsd(np.round(ligand, 3), model, atomic, atomic, adjacency,
                                 adjacency)
    plain = float(np.sqrt(((model - ligand) ** 2).sum(-1).mean()))
    return ref, pred, float(symmetric), plain


@pytest.mark.parametrize("seed,relabel", [(0, "mirror"), (1, "mirror"), (2, "mirror"),
                                          (0, "rotate"), (1, "rotate")])
def test_a_non_glycan_ligand_scores_like_spyrmsd_from_pdb_and_mmcif(tmp_path, seed, relabel):
    """Atom names its residue's template does not know: the bonds come from the file's
    CONECT records (PDB) or, with none in the file (mmCIF written from it), from distances;
    either way the ligand's symmetry is used, as spyrmsd uses it, and nothing more."""
    gemmi = pytest.importorskip("gemmi")
    ref, pred, symmetric, plain = _benzoate_files(tmp_path, seed, relabel)
    if relabel == "mirror":  # a scorer without the symmetry fails here
        assert plain > symmetric + 0.5
    else:  # a scorer that ignores the bonds fails here
        assert symmetric > 1.0
    assert evaluate_files(ref, pred)["lrmsd"] == pytest.approx(symmetric, abs=2e-3)
    cif = {}
    for name, path in (("ref", ref), ("pred", pred)):
        structure = gemmi.read_structure(str(path))
        structure.clear_conect()
        cif[name] = tmp_path / f"benzoate_{name}.cif"
        structure.make_mmcif_document().write_file(str(cif[name]))
    assert "CONECT" not in cif["ref"].read_text()
    assert evaluate_files(cif["ref"], cif["pred"])["lrmsd"] == pytest.approx(symmetric,
                                                                             abs=2e-3)


def test_an_atom_with_no_known_bond_is_refused_in_one_line(tmp_path):
    from common.errors import UserError

    ref, pred, _, _ = _benzoate_files(tmp_path, 0)
    lines = ref.read_text().splitlines()
    far = [line for line in lines if " OX2 " in line][0]
    moved = far[:30] + f"{40.0:8.3f}{40.0:8.3f}{40.0:8.3f}" + far[54:]
    broken = tmp_path / "broken.pdb"
    broken.write_text("\n".join(moved if line == far else line for line in lines
                                if not line.startswith("CONECT")) + "\n")
    with pytest.raises(UserError, match="OX2 are not in the BGC template, have no bond in the "
                                        "file"):
        evaluate_files(broken, pred)
