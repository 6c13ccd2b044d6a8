"""Protein-glycan complexes: a synthetic generator with both generalisation splits, writers
and readers for PDB/mmCIF files, and the ProtGlycanDock benchmark by name.

Synthetic complexes (every coordinate known):
- Glycans: random trees of 1..``max_residues`` hexopyranoses (``data/glycans.py``), each
  linkage's (phi, psi) drawn from the Boltzmann distribution exp(-E_CHI / kT) on a 1-degree
  grid (as Rosetta samples glycosidic torsions).
- Pockets: a family fixes the bowl radius, its ellipticity, the residue count and amino-acid
  composition, the stacking aromatic (TRP/TYR/PHE) and the hydrogen-bond anchor
  (ASP/GLU/ASN/GLN). The reducing-end ring stacks 3.8 A above the aromatic ring's face
  (the CH-pi motif of carbohydrate-binding sites), its C5 turned toward the anchor, with
  positional and angular noise. Wall residues sit on the bowl where they do not clash with
  the ligand (shape complementarity). Side chains are pseudo-atoms (CB plus one atom, or
  a six-atom ring for aromatics); every residue has backbone N, CA, C, O.
- Each complex is moved by a random rigid motion, so no absolute frame carries information.
- Splits: ``protein`` holds out whole pocket families (train topologies); ``glycan`` holds
  out every topology that links to a held-out attachment site (parent sugar, ring
  position), on train families: test glycans use linkages no training glycan has.

Real data: ``ProtGlycanDock/ProtGlycanDock`` through ``datasets`` (columns read at run time),
and folders of (reference, prediction) structure files read with gemmi.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import torch

from common.errors import UserError
from data.glycans import (
    LINK_POSITIONS,
    MONOSACCHARIDES,
    Glycan,
    GlycanBuilder,
    canonical_glycan,
    chi_energy,
    contact_clashes,
    has_oxygen,
    internal_clashes,
    monosaccharide,
    separated_pairs,
)

AMINO_ACIDS = ["ALA", "ARG", "ASN", "ASP", "CYS", "GLN", "GLU", "GLY", "HIS", "ILE", "LEU",
               "LYS", "MET", "PHE", "PRO", "SER", "THR", "TRP", "TYR", "VAL"]
ONE_LETTER = dict(zip(AMINO_ACIDS, "ARNDCQEGHILKMFPSTWYV", strict=True))
AROMATIC = ("TRP", "TYR", "PHE")
ANCHORS = ("ASP", "GLU", "ASN", "GLN")
RING_NAMES = ("CG", "CD1", "CE1", "CZ", "CE2", "CD2")
STACK_HEIGHT = 4.3  # the stacking ring's plane below the reducing-end ring's centroid (A)
ANCHOR_X = 7.0  # the anchor's CA (x, A), on the reducing-end ring's C5 side
ANCHOR_INWARD = (-1.0, 0.0, -0.3)  # its side chain, below a beta-O1 (not onto it)


@dataclass
class Complex:
    name: str
    family: int
    glycan: Glycan
    protein_xyz: np.ndarray  # (M, 3)
    protein_atoms: list[tuple[int, str]]  # (residue index, atom name)
    residue_names: list[str]
    ligand_xyz: np.ndarray  # (N, 3), atoms in GlycanBuilder order
    torsions: np.ndarray  # (links, 2) phi, psi in degrees

    @property
    def topology(self) -> str:
        return self.glycan.to_iupac()


# -------------------------------------------------------------------------------- glycans

def random_glycan(rng: np.random.Generator, max_residues: int) -> Glycan:
    codes = [str(rng.choice(["NAG", "BGC", "GLC", "MAN", "BMA", "GAL"]))]
    parents, positions = [-1], [0]
    size = int(rng.integers(1, max_residues + 1))
    while len(codes) < size:
        taken = set(zip(parents, positions, strict=True))
        free = [(p, x) for p, code in enumerate(codes) for x in LINK_POSITIONS
                if monosaccharide(code).sugar != "Fuc" and (p, x) not in taken
                and has_oxygen(code, x)]
        p, x = free[int(rng.integers(len(free)))]
        codes.append(str(rng.choice(list(MONOSACCHARIDES))))
        parents.append(p), positions.append(x)
    return canonical_glycan(codes, parents, positions)


def topology_library(n: int, max_residues: int, rng: np.random.Generator) -> list[Glycan]:
    """``n`` distinct glycan topologies (by canonical IUPAC text)."""
    seen: dict[str, Glycan] = {}
    for _ in range(200 * n):
        g = random_glycan(rng, max_residues)
        seen.setdefault(g.to_iupac(), g)
        if len(seen) == n:
            break
    return list(seen.values())


def motifs(glycan: Glycan) -> set[tuple[str, int]]:
    """(parent sugar, position) of each linkage: the attachment sites the glycan uses."""
    return {(monosaccharide(glycan.codes[glycan.parents[j]]).sugar, glycan.positions[j])
            for j in glycan.links}


GRID = np.arange(-180.0, 180.0)


@cache
def _boltzmann(kind: str, kt: float) -> np.ndarray:
    energy = chi_energy(torch.tensor(GRID), kind).numpy()
    p = np.exp(-(energy - energy.min()) / kt)
    return p / p.sum()


def sample_torsions(glycan: Glycan, kt: float, rng: np.random.Generator) -> np.ndarray:
    """(links, 2) Boltzmann draws of (phi, psi) under the CHI energies at temperature kT (on
    a 1-degree grid, jittered within the bin), each linkage on its own (atoms may overlap:
    :func:`physical_ligand` draws references without clashes)."""
    return np.array([sample_link(kinds, kt, rng) for kinds in glycan.chi_kinds()]).reshape(-1, 2)


def sample_link(kinds: tuple[str, str], kt: float, rng: np.random.Generator) -> np.ndarray:
    """One linkage's (phi, psi) drawn from the CHI Boltzmann distributions of its kinds."""
    return np.array([rng.choice(GRID, p=_boltzmann(kind, kt)) + rng.uniform(-0.5, 0.5)
                     for kind in kinds])


MAX_DRAWS_PER_STEP, MAX_RESTARTS = 40, 10


class Unbuildable(RuntimeError):
    """A glycan without a conformation free of clashes with itself and the pocket's floor
    (e.g. a residue under the reducing-end ring's stacking face) within the draws allowed."""


def physical_ligand(glycan: Glycan, kt: float, rng: np.random.Generator,
                    pocket_xyz: np.ndarray | None = None, pocket_elements=()
                    ) -> tuple[np.ndarray, np.ndarray]:
    """(coordinates (atoms, 3), torsions (links, 2)) of a reference glycan with no steric
    clash (``data.glycans.clashes``) within itself or with ``pocket_xyz`` (the pocket's
    floor), grown residue by residue: the root's pose (a small rotation about the stacking
    geometry), then each linkage in tree order, each redrawn from its CHI Boltzmann
    distribution until the residues placed so far are clash-free; a step without a
    clash-free draw restarts the glycan, and ``Unbuildable`` is raised after
    ``MAX_RESTARTS``. Drawing all linkages at once and rejecting the whole glycan would
    accept under 1% of the draws for some branched topologies; this samples the Boltzmann
    distribution restricted to clash-free conformations, up to the bias of the growth
    order."""
    builder = GlycanBuilder(glycan, torch.float64)
    residue_of = np.array([r for r, _ in builder.atoms])
    pairs = separated_pairs(len(builder.atoms), builder.bonds)
    kinds = glycan.chi_kinds()

    def build(rotation, translation, torsions):
        return builder.build(torch.tensor(rotation)[None], torch.tensor(translation)[None],
                             torch.tensor(torsions)[None])[0].numpy()

    def clash_free(ligand, placed: int) -> bool:  # residues 0..placed-1 (parents first)
        inside = residue_of < placed
        own = pairs[inside[pairs[:, 0]] & inside[pairs[:, 1]]]
        elements = [e for e, keep in zip(builder.elements, inside, strict=True) if keep]
        return not (internal_clashes(ligand, builder.elements, own)
                    or (pocket_xyz is not None and contact_clashes(
                        ligand[inside], elements, pocket_xyz, pocket_elements)))

    for _ in range(MAX_RESTARTS):
        torsions = sample_torsions(glycan, kt, rng)
        for _ in range(MAX_DRAWS_PER_STEP):
            rotation, translation = random_rotation(rng, 8.0), rng.normal(0, 0.3, size=3)
            ligand = build(rotation, translation, torsions)
            if clash_free(ligand, 1):
                break
        else:
            continue
        for k, child in enumerate(glycan.links):
            for _ in range(MAX_DRAWS_PER_STEP):
                torsions[k] = sample_link(kinds[k], kt, rng)
                ligand = build(rotation, translation, torsions)
                if clash_free(ligand, child + 1):
                    break
            else:
                break
        else:
            return ligand, torsions
    raise Unbuildable(f"no clash-free conformation of {glycan.to_iupac()} after "
                      f"{MAX_RESTARTS} restarts at kT = {kt}")


# -------------------------------------------------------------------------------- pockets

@dataclass
class Family:
    radius: float
    ellipticity: float
    residues: int
    composition: np.ndarray  # over AMINO_ACIDS
    stacker: str
    anchor: str


def random_family(rng: np.random.Generator) -> Family:
    return Family(float(rng.uniform(9.0, 12.0)), float(rng.uniform(0.0, 0.25)),
                  int(rng.integers(28, 46)), rng.dirichlet(np.full(20, 0.5)),
                  str(rng.choice(AROMATIC)), str(rng.choice(ANCHORS)))


def _unit(v):
    return v / np.linalg.norm(v)


def random_rotation(rng, degrees: float | None = None) -> np.ndarray:
    """A uniform random rotation, or one by a N(0, degrees) angle about a random axis."""
    if degrees is None:
        q, r = np.linalg.qr(rng.normal(size=(3, 3)))
        q *= np.sign(np.diag(r))
        return q if np.linalg.det(q) > 0 else -q
    axis, angle = _unit(rng.normal(size=3)), np.deg2rad(rng.normal(0, degrees))
    k = np.array([[0, -axis[2], axis[1]], [axis[2], 0, -axis[0]], [-axis[1], axis[0], 0]])
    return np.eye(3) + np.sin(angle) * k + (1 - np.cos(angle)) * k @ k


def _residue_atoms(name, ca, inward, rng, ring_centre=None, ring_normal=None):
    """Backbone N, CA, C, O around ``ca`` and pseudo side-chain atoms pointing ``inward``."""
    side = _unit(np.cross(inward, rng.normal(size=3)))
    atoms = {"N": ca + 1.46 * _unit(-0.35 * inward + side),
             "CA": ca, "C": ca + 1.52 * _unit(-0.35 * inward - side)}
    atoms["O"] = atoms["C"] + 1.23 * _unit(-inward)
    if name != "GLY":
        atoms["CB"] = ca + 1.53 * inward
    if name in AROMATIC:
        centre = ca + 3.9 * inward if ring_centre is None else ring_centre
        normal = _unit(np.cross(inward, side)) if ring_normal is None else ring_normal
        e1 = _unit(np.cross(normal, side if abs(side @ normal) < 0.9 else inward))
        e2 = np.cross(normal, e1)
        for k, ring_name in enumerate(RING_NAMES):
            a = k * np.pi / 3
            atoms[ring_name] = centre + 1.39 * (np.cos(a) * e1 + np.sin(a) * e2)
    elif name in ANCHORS:
        atoms["CG"] = ca + 2.5 * inward
        atoms["OD1"] = ca + 3.5 * inward + 0.6 * side
    elif name != "GLY":
        atoms["CG"] = ca + 2.5 * inward
    return atoms


def make_complex(name: str, family_id: int, family: Family, glycan: Glycan, kt: float,
                 rng: np.random.Generator) -> Complex:
    """One synthetic complex: the pocket's floor (an aromatic stacking under the reducing-end
    ring, centroid near the origin with its face down -z, and an anchor toward its C5, +x),
    a physical reference glycan on it (:func:`physical_ligand`) and wall residues that do
    not touch the glycan."""
    residues = [
        (family.stacker, _residue_atoms(
            family.stacker, np.array([0.0, 2.4, -2.6 - STACK_HEIGHT]), _unit([0, -0.6, 0.8]),
            rng, ring_centre=np.array([0.0, 0.0, -STACK_HEIGHT]),
            ring_normal=np.array([0.0, 0.0, 1.0]))),
        (family.anchor, _residue_atoms(family.anchor, np.array([ANCHOR_X, 0.0, -2.0]),
                                       _unit(ANCHOR_INWARD), rng))]
    floor = [(atom, xyz) for _, atoms in residues for atom, xyz in atoms.items()]
    ligand, torsions = physical_ligand(glycan, kt, rng, np.stack([xyz for _, xyz in floor]),
                                       [atom[0] for atom, _ in floor])
    elements = GlycanBuilder(glycan).elements

    def touches(atoms: dict) -> bool:
        return contact_clashes(ligand, elements, np.stack(list(atoms.values())),
                               [atom[0] for atom in atoms]) > 0

    # wall residues: candidate CA sites on the bowl away from the ligand, kept greedily
    # while they stay 3.8 A from every kept CA and no atom of theirs touches the glycan
    theta = np.deg2rad(rng.uniform(60, 170, size=600))
    az = rng.uniform(0, 2 * np.pi, size=600)
    sites = np.stack([np.sin(theta) * np.cos(az) * (1 + family.ellipticity),
                      np.sin(theta) * np.sin(az) * (1 - family.ellipticity), np.cos(theta)], 1)
    sites *= family.radius + rng.normal(0, 0.5, size=(600, 1))
    clear = np.linalg.norm(sites[:, None] - ligand[None], axis=-1).min(1) > 5.5
    kept = [atoms["CA"] for _, atoms in residues]
    for ca in sites[clear]:
        if len(kept) == family.residues:
            break
        if np.linalg.norm(ca - np.array(kept), axis=-1).min() > 3.8:
            aa = str(rng.choice(AMINO_ACIDS, p=family.composition))
            atoms = _residue_atoms(aa, ca, _unit(-ca), rng)
            if not touches(atoms):
                kept.append(ca)
                residues.append((aa, atoms))
    motion, shift = random_rotation(rng), rng.normal(0, 20.0, size=3)
    protein_atoms, protein_xyz = [], []
    for r, (_, atoms) in enumerate(residues):
        for atom_name, xyz in atoms.items():
            protein_atoms.append((r, atom_name))
            protein_xyz.append(xyz)
    return Complex(name, family_id, glycan, np.stack(protein_xyz) @ motion.T + shift,
                   protein_atoms, [n for n, _ in residues], ligand @ motion.T + shift, torsions)


@dataclass
class SyntheticBenchmark:
    train: list[Complex]
    test: dict[str, list[Complex]]  # split name -> complexes
    held_out_motifs: list[tuple[str, int]]
    held_out_families: list[int]
    skipped_topologies: list[str]  # drawn, but without a clash-free complex: drawn again


def synthetic_benchmark(cfg, rng: np.random.Generator) -> SyntheticBenchmark:
    """Train complexes and the ``protein`` / ``glycan`` generalisation test sets of the
    ``synthetic`` dataset config."""
    families = [random_family(rng) for _ in range(int(cfg.families))]
    held_families = sorted(rng.choice(len(families), int(cfg.held_out_families),
                                      replace=False).tolist())
    library = topology_library(int(cfg.topologies), int(cfg.max_residues), rng)
    all_motifs = sorted({m for g in library for m in motifs(g)})
    held_motifs: list = []
    held_topologies: set[int] = set()
    for k in rng.permutation(len(all_motifs)):  # hold out motifs until the target fraction
        if len(held_topologies) >= cfg.held_out_topology_fraction * len(library):
            break
        held_motifs.append(all_motifs[k])
        held_topologies |= {i for i, g in enumerate(library) if all_motifs[k] in motifs(g)}
    seen_families = [f for f in range(len(families)) if f not in held_families]
    seen_topologies = [i for i in range(len(library)) if i not in held_topologies]

    skipped: set[str] = set()

    def draw(count, family_ids, topology_ids, tag):
        out = []
        for k in range(count):
            f = int(rng.choice(family_ids))
            while True:  # a topology without a clash-free complex is left out from then on
                usable = [i for i in topology_ids if library[i].to_iupac() not in skipped]
                if not usable:
                    raise UserError(f"no topology of the {tag} split has a clash-free complex")
                g = library[int(rng.choice(usable))]
                try:
                    out.append(make_complex(f"{tag}{k:05d}", f, families[f], g, float(cfg.kt),
                                            rng))
                    break
                except Unbuildable:
                    skipped.add(g.to_iupac())
        return out

    return SyntheticBenchmark(
        train=draw(int(cfg.train_complexes), seen_families, seen_topologies, "train"),
        test={"protein": draw(int(cfg.test_complexes), held_families, seen_topologies, "prot"),
              "glycan": draw(int(cfg.test_complexes), seen_families, sorted(held_topologies),
                             "glyc")},
        held_out_motifs=held_motifs, held_out_families=held_families,
        skipped_topologies=sorted(skipped))


# ---------------------------------------------------------------- structure files (gemmi)

def _gemmi():
    try:
        import gemmi
    except ImportError:
        raise UserError("reading and writing PDB/mmCIF files needs gemmi: pip install gemmi "
                        "(the 'bio' extra)") from None
    return gemmi


def write_structure(path: Path, cx: Complex, ligand_xyz: np.ndarray | None = None) -> Path:
    """The complex (protein chain A, glycan chain B, one residue per monosaccharide) as PDB or
    mmCIF by the file suffix; ``ligand_xyz`` replaces the glycan's coordinates (a pose)."""
    gemmi = _gemmi()
    ligand_xyz = cx.ligand_xyz if ligand_xyz is None else ligand_xyz
    structure = gemmi.Structure()
    model = gemmi.Model("1")
    protein, sugar = gemmi.Chain("A"), gemmi.Chain("B")
    for r, name in enumerate(cx.residue_names):
        res = gemmi.Residue()
        res.name, res.seqid = name, gemmi.SeqId(r + 1, " ")
        res.entity_type = gemmi.EntityType.Polymer
        for (ri, atom_name), xyz in zip(cx.protein_atoms, cx.protein_xyz, strict=True):
            if ri == r:
                res.add_atom(_atom(gemmi, atom_name, xyz))
        protein.add_residue(res)
    atoms = GlycanBuilder(cx.glycan).atoms
    for i, code in enumerate(cx.glycan.codes):
        res = gemmi.Residue()
        res.name, res.seqid, res.het_flag = code, gemmi.SeqId(i + 1, " "), "H"
        res.entity_type = gemmi.EntityType.Branched
        for (ri, atom_name), xyz in zip(atoms, ligand_xyz, strict=True):
            if ri == i:
                res.add_atom(_atom(gemmi, atom_name, xyz))
        sugar.add_residue(res)
    model.add_chain(protein)
    model.add_chain(sugar)
    structure.add_model(model)
    for child in range(1, len(cx.glycan)):  # glycosidic bonds as LINK / struct_conn records
        parent = cx.glycan.parents[child]
        link = gemmi.Connection()
        link.name, link.type = f"glyco{child}", gemmi.ConnectionType.Covale
        link.partner1 = gemmi.AtomAddress("B", gemmi.SeqId(parent + 1, " "),
                                          cx.glycan.codes[parent],
                                          f"O{cx.glycan.positions[child]}", "\0")
        link.partner2 = gemmi.AtomAddress("B", gemmi.SeqId(child + 1, " "),
                                          cx.glycan.codes[child], "C1", "\0")
        structure.connections.append(link)
    structure.setup_entities()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".cif":
        structure.make_mmcif_document().write_file(str(path))
    else:
        structure.write_pdb(str(path))
    return path


def _atom(gemmi, name, xyz):
    atom = gemmi.Atom()
    atom.name, atom.pos = name, gemmi.Position(*map(float, xyz))
    atom.element = gemmi.Element(name[0])
    return atom


@dataclass
class StructureAtoms:
    """Heavy atoms of one structure file, split into protein and sugar."""

    protein_keys: list[tuple[str, int, str]]  # (chain, residue number, atom name)
    protein_xyz: np.ndarray
    protein_residue_names: list[str]
    sugar_keys: list[tuple[str, int, str, str]]  # (chain, residue number, CCD code, atom)
    sugar_xyz: np.ndarray
    # covalent bonds the file records between two sugar atoms (mmCIF struct_conn, PDB LINK
    # and CONECT), within or between residues
    sugar_links: list[tuple[tuple, tuple]]
    sugar_elements: list[str]


def read_structure(path: Path) -> StructureAtoms:
    """Protein (standard amino acids) and sugar (known CCD codes) heavy atoms of a PDB or
    mmCIF file; the first model only."""
    gemmi = _gemmi()
    if not Path(path).exists():
        raise UserError(f"structure file not found: {path}")
    structure = gemmi.read_structure(str(path))
    structure.remove_hydrogens()
    pk, px, pn, sk, sx, se, by_serial = [], [], [], [], [], [], {}
    for chain in structure[0]:
        for res in chain:
            for atom in res:
                if res.name in AMINO_ACIDS:
                    pk.append((chain.name, res.seqid.num, atom.name))
                    px.append(atom.pos.tolist())
                    pn.append(res.name)
                elif res.name in MONOSACCHARIDES:
                    sk.append((chain.name, res.seqid.num, res.name, atom.name))
                    sx.append(atom.pos.tolist())
                    se.append(atom.element.name.upper())
                    by_serial[atom.serial] = sk[-1]
    if not sk:
        raise UserError(f"{path}: no sugar residue with a known CCD code "
                        f"({', '.join(MONOSACCHARIDES)})")
    links, sugar_atoms = [], set(sk)
    for connection in structure.connections:
        if connection.type != gemmi.ConnectionType.Covale:
            continue
        ends = [(end.chain_name, end.res_id.seqid.num, end.res_id.name, end.atom_name)
                for end in (connection.partner1, connection.partner2)]
        if all(end in sugar_atoms for end in ends):
            links.append(tuple(ends))
    conect = {tuple(sorted((serial, partner)))  # PDB CONECT records, listed once or twice
              for serial, partners in structure.conect_map.items() for partner in partners}
    links += [(by_serial[a], by_serial[b]) for a, b in sorted(conect)
              if a in by_serial and b in by_serial]
    return StructureAtoms(pk, np.array(px).reshape(-1, 3), pn, sk, np.array(sx).reshape(-1, 3),
                          links, se)


# ------------------------------------------------------------------- the benchmark by name

def load_protglycandock(hub_id: str, split: str | None, limit: int) -> list[dict]:
    """Rows of the ProtGlycanDock table (any schema) from the Hugging Face hub or its local
    cache; ``split`` filters a ``split`` column when there is one."""
    from data.hub import load_hub_dataset

    table = load_hub_dataset(hub_id)
    rows = [dict(r) for part in table.values() for r in part]
    if split and rows and "split" in rows[0]:
        rows = [r for r in rows if r["split"] == split]
    return rows[:limit]
