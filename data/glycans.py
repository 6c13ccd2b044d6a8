"""Glycan chemistry for docking: CHI torsion energies, monosaccharide templates, glycan trees
(IUPAC-condensed and Protenix multi-CCD forms) and a differentiable builder from internal
coordinates.

CHI energy functions (Nivedha et al. 2014, 2016; Rosetta ``CHIEnergyFunction``): each
glycosidic torsion has E(x) = d + sum_i a_i exp(-(x - b_i)^2 / c_i) with x in degrees; phi
functions by the child's anomer on [-180, 180), psi functions by the parent's attachment on
[0, 360): an axial substituent at an even ring position or an equatorial one at an odd position
takes ``psi_2ax_3eq_4ax``, the opposite ``psi_2eq_3ax_4eq``, and exocyclic (1->6) links take
``alpha6_psi`` / ``beta6_psi`` by the child's anomer. Torsions follow IUPAC heavy-atom
definitions: phi = O5'-C1'-O(x)-C(x), psi = C1'-O(x)-C(x)-C(x-1).

Monosaccharides are D-hexopyranoses in the 4C1 chair built from an ideal ring (one ring bond
length, alternating pucker); substituents sit on the axial or equatorial tetrahedral direction
of their ring atom by the sugar's stereochemistry. L-fucose is built on the 6-deoxy-galacto
template without mirroring (its axial/equatorial pattern, which is all the CHI rules read, is
that of D-galactose); sialic acids and furanoses are not covered. Heavy atoms only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache

import numpy as np
import torch

from common.errors import UserError

# kind -> (a, b, c, d); Rosetta's CHI_energy_function_for_*.params
CHI_PARAMS = {
    "alpha_phi": ([2.977, 102.25, 10.745, 3.6735, 2.061, 6.1939, -2.1115, -98.001],
                  [-199.49, 170.6, -105.31, 6.2012, 91.655, -22.979, 83.602, 170.01],
                  [677.81, 1696.8, 4724.6, 1347.7, 1500, 2122.3, 1254.1, 1598.7], 0.0),
    "beta_phi": ([450.54, 23.712, 5.9353, 22.467, 10.036, -18.141, 5.8823],
                 [-330.77, 304.63, -152.08, -23.516, 120.96, -24.268, 19.632],
                 [4449.8, 8375.2, 6049.8, 606.90, 4038, 543.05, 897.93], -2.1283),
    "psi_2ax_3eq_4ax": ([4.6237, 4.6139, 4.9419, 0.4029, 0.79888, 0.22299],
                        [5.0456, 362.49, 121.2, 241.43, 68.425, 192.93],
                        [5005.8, 2090.6, 2093.8, 456.83, 678.81, 347.25], -0.12565),
    "psi_2eq_3ax_4eq": ([4.4681, 4.382, 284.95, 4.7613, -169.2, -118.44],
                        [1e-30, 357.77, 146.64, 220.68, 147.37, 146.06],
                        [1279.6, 6050.1, 1551.8, 5892.9, 1742.5, 1359.8], 1.0220),
    "alpha6_psi": ([67.943, 6.134, 3.276, 0.728, 2.574, 5.760, 3.475, -0.741],
                   [-59.539, 10.479, 54.296, 131.068, 245.103, 360.0, 321.678, 199.107],
                   [993.324, 945.771, 851.528, 1037.412, 2012.995, 1153.397, 2080.971,
                    522.180], 0.0),
    "beta6_psi": ([7.249, 1.900, 0.741, 0.200, 0.287, 1.226, 7.411, -0.615, -0.350],
                  [3.606, 96.593, 141.664, 162000.0, 228.171, 292.206, 369.868, 271.319,
                   183.0],
                  [2459.239, 2683.887, 1150.048, 400.0, 272.201, 1134.525, 3499.160, 532.437,
                   100.0], 0.0),
}
CHI_KINDS = list(CHI_PARAMS)


def wrap_to_domain(x_deg, kind: str):
    """Map angles (degrees) into the function's domain: [-180, 180) for phi, [0, 360) for
    psi."""
    if kind.endswith("phi"):
        return torch.remainder(x_deg + 180.0, 360.0) - 180.0
    return torch.remainder(x_deg, 360.0)


def chi_energy(x_deg, kind: str, wrap: bool = True) -> torch.Tensor:
    """E(x) of the CHI function ``kind`` at torsions ``x_deg`` (degrees; any shape,
    differentiable); ``wrap=False`` evaluates the raw sum outside the domain (as Rosetta's
    unit tests do at -180 for psi)."""
    x = torch.as_tensor(x_deg)
    x = x if x.is_floating_point() else x.double()
    a, b, c, d = (torch.as_tensor(v, dtype=x.dtype, device=x.device) for v in CHI_PARAMS[kind])
    x = (wrap_to_domain(x, kind) if wrap else x)[..., None]
    return float(d) + (a * torch.exp(-((x - b) ** 2) / c)).sum(-1)


def chi_derivative(x_deg, kind: str, wrap: bool = True) -> torch.Tensor:
    """The analytic dE/dx (per degree) of ``chi_energy``."""
    a, b, c, _ = (torch.as_tensor(v, dtype=torch.float64) for v in CHI_PARAMS[kind])
    x = torch.as_tensor(x_deg, dtype=torch.float64)
    x = (wrap_to_domain(x, kind) if wrap else x)[..., None]
    return (-2.0 * (x - b) / c * a * torch.exp(-((x - b) ** 2) / c)).sum(-1)


# ---------------------------------------------------------------------------- monosaccharides

@dataclass(frozen=True)
class Monosaccharide:
    code: str  # PDB chemical component (CCD) code
    sugar: str  # Glc | Man | Gal | GlcNAc | Fuc
    anomer: str  # a | b
    axial: frozenset  # ring positions 2..4 whose O/N substituent is axial (4C1)
    has_o6: bool = True  # False for 6-deoxy sugars
    n_acetyl: bool = False


def _mono(code, sugar, anomer, axial=(), has_o6=True, n_acetyl=False):
    return Monosaccharide(code, sugar, anomer, frozenset(axial), has_o6, n_acetyl)


MONOSACCHARIDES = {m.code: m for m in [
    _mono("GLC", "Glc", "a"), _mono("BGC", "Glc", "b"),
    _mono("MAN", "Man", "a", [2]), _mono("BMA", "Man", "b", [2]),
    _mono("GLA", "Gal", "a", [4]), _mono("GAL", "Gal", "b", [4]),
    _mono("NDG", "GlcNAc", "a", n_acetyl=True), _mono("NAG", "GlcNAc", "b", n_acetyl=True),
    _mono("FUC", "Fuc", "a", [4], has_o6=False), _mono("FUL", "Fuc", "b", [4], has_o6=False),
]}
SUGARS = ["Glc", "Man", "Gal", "GlcNAc", "Fuc"]
CODE_OF = {(m.sugar, m.anomer): code for code, m in MONOSACCHARIDES.items()}
LINK_POSITIONS = (2, 3, 4, 6)


def monosaccharide(code: str) -> Monosaccharide:
    if code not in MONOSACCHARIDES:
        raise UserError(f"unsupported monosaccharide '{code}'; known CCD codes: "
                        f"{', '.join(MONOSACCHARIDES)}")
    return MONOSACCHARIDES[code]


def has_oxygen(code: str, position: int) -> bool:
    """Whether ring position ``position`` of ``code`` carries a hydroxyl a sugar can link to
    (not the N-acetyl N2, not a 6-deoxy C6)."""
    m = monosaccharide(code)
    return not ((position == 2 and m.n_acetyl) or (position == 6 and not m.has_o6))


def phi_kind(child: str) -> str:
    return "alpha_phi" if monosaccharide(child).anomer == "a" else "beta_phi"


def psi_kind(child: str, parent: str, position: int) -> str:
    """The CHI psi function of a child linked to ``parent``'s position ``position``."""
    if position == 6:
        return "alpha6_psi" if monosaccharide(child).anomer == "a" else "beta6_psi"
    axial = position in monosaccharide(parent).axial
    return "psi_2ax_3eq_4ax" if axial == (position % 2 == 0) else "psi_2eq_3ax_4eq"


# ------------------------------------------------------------------------------ glycan trees

@dataclass
class Glycan:
    """A glycan tree: residue 0 is the reducing end; every parent precedes its children."""

    codes: list[str]
    parents: list[int]  # -1 for the root
    positions: list[int]  # the parent's ring position the child's C1 links to (0 for the root)

    def __post_init__(self):
        for code in self.codes:
            monosaccharide(code)
        for i, (p, x) in enumerate(zip(self.parents, self.positions, strict=True)):
            if (i == 0) != (p < 0) or (i and not 0 <= p < i):
                raise UserError(f"glycan residue {i}: parent {p} must precede it (root first)")
            if i and x not in LINK_POSITIONS:
                raise UserError(f"glycan residue {i}: link position {x} not in {LINK_POSITIONS}")
            if i and not has_oxygen(self.codes[p], x):
                raise UserError(f"glycan residue {i}: {self.codes[p]} has no O{x}")
        taken = [(p, x) for p, x in zip(self.parents[1:], self.positions[1:], strict=True)]
        if len(set(taken)) != len(taken):
            raise UserError("two residues link to the same parent position")

    def __len__(self) -> int:
        return len(self.codes)

    def children(self, i: int) -> list[int]:
        return [j for j, p in enumerate(self.parents) if p == i]

    @property
    def links(self) -> list[int]:
        """The child residue of each glycosidic linkage, in order."""
        return list(range(1, len(self)))

    def chi_kinds(self) -> list[tuple[str, str]]:
        """(phi kind, psi kind) of each linkage."""
        return [(phi_kind(self.codes[j]), psi_kind(self.codes[j], self.codes[self.parents[j]],
                                                    self.positions[j])) for j in self.links]

    def to_iupac(self) -> str:
        """IUPAC-condensed text (a canonical form: branches sorted by link position, the
        highest-position child continues the main chain)."""
        def name(i):
            m = monosaccharide(self.codes[i])
            return m.sugar

        def subtree(i):
            kids = sorted(self.children(i), key=lambda j: self.positions[j])
            text = ""
            if kids:
                text = linked(kids[-1]) + "".join(f"[{linked(j)}]" for j in kids[:-1])
            return text + name(i)

        def linked(j):
            return f"{subtree(j)}({monosaccharide(self.codes[j]).anomer}1-{self.positions[j]})"

        return subtree(0) + f"({monosaccharide(self.codes[0]).anomer}1-"


_TOKEN = re.compile(r"\(([ab])1-(\d)\)|\[|\]|([A-Za-z]+)|\(([ab])1-$")


def parse_iupac(text: str, root_anomer: str = "b") -> Glycan:
    """A glycan from IUPAC-condensed text, e.g. ``Man(a1-3)[Man(a1-6)]Man(b1-4)GlcNAc``; the
    reducing end's anomer comes from a trailing ``(a1-`` / ``(b1-`` or ``root_anomer``."""
    tokens, pos = [], 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise UserError(f"cannot parse glycan '{text}' at character {pos}")
        if m.group(4):
            root_anomer = m.group(4)
        else:
            tokens.append(m.group(0) if m.group(1) is None else (m.group(1), int(m.group(2))))
        pos = m.end()
    tokens.reverse()
    sugars, parents, positions, anomers = [], [], [], []

    def residue(parent, anomer, position):
        token = tokens.pop(0) if tokens else None
        if token not in SUGARS:
            raise UserError(f"cannot parse glycan '{text}': expected a sugar name "
                            f"({', '.join(SUGARS)}), got {token!r}")
        me = len(sugars)
        sugars.append(token), parents.append(parent), positions.append(position)
        anomers.append(anomer)
        while tokens and tokens[0] == "]":
            tokens.pop(0)
            link(me)
            if not tokens or tokens.pop(0) != "[":
                raise UserError(f"cannot parse glycan '{text}': unbalanced brackets")
        if tokens and isinstance(tokens[0], tuple):
            link(me)

    def link(parent):
        if not tokens or not isinstance(tokens[0], tuple):
            raise UserError(f"cannot parse glycan '{text}': expected a linkage like (b1-4)")
        anomer, position = tokens.pop(0)
        residue(parent, anomer, position)

    residue(-1, root_anomer, 0)
    if tokens:
        raise UserError(f"cannot parse glycan '{text}': unexpected {tokens[0]!r}")
    codes = [CODE_OF[(s, a)] for s, a in zip(sugars, anomers, strict=True)]
    return canonical_glycan(codes, parents, positions)


def canonical_glycan(codes, parents, positions) -> Glycan:
    """The glycan renumbered breadth-first (parents before children, siblings by link
    position), so equal trees compare equal."""
    order, queue = [], [0]
    while queue:
        i = queue.pop(0)
        order.append(i)
        queue += sorted((j for j, p in enumerate(parents) if p == i), key=lambda j: positions[j])
    new = {old: k for k, old in enumerate(order)}
    return Glycan([codes[i] for i in order], [new[parents[i]] if parents[i] >= 0 else -1
                                              for i in order], [positions[i] for i in order])


# ------------------------------------------------------------------ Protenix JSON (1-based)

def to_protenix(name: str, protein_sequences: list[str], glycan: Glycan) -> dict:
    """One Protenix inference job: protein chains, the glycan as a multi-CCD ligand, and a
    covalent bond per glycosidic link (parent O<x> - child C1)."""
    sequences = [{"proteinChain": {"sequence": s, "count": 1}} for s in protein_sequences]
    sequences.append({"ligand": {"ligand": "CCD_" + "_".join(glycan.codes), "count": 1}})
    entity = len(sequences)
    bonds = [{"left_entity": entity, "left_copy": 1, "left_position": glycan.parents[j] + 1,
              "left_atom": f"O{glycan.positions[j]}", "right_entity": entity, "right_copy": 1,
              "right_position": j + 1, "right_atom": "C1"} for j in glycan.links]
    return {"name": name, "sequences": sequences, "covalent_bonds": bonds}


def from_protenix(job: dict) -> tuple[list[str], Glycan]:
    """(protein sequences, glycan) of a Protenix job written by ``to_protenix`` (or any job
    with one multi-CCD sugar ligand linked by O<x>-C1 bonds)."""
    proteins, ligand, entity = [], None, None
    for k, seq in enumerate(job["sequences"], start=1):
        if "proteinChain" in seq:
            proteins.append(seq["proteinChain"]["sequence"])
        elif "ligand" in seq and seq["ligand"]["ligand"].startswith("CCD_"):
            ligand, entity = seq["ligand"]["ligand"][4:].split("_"), k
    if ligand is None:
        raise UserError(f"Protenix job '{job.get('name')}' has no CCD glycan ligand")
    parents, positions = [-1] * len(ligand), [0] * len(ligand)
    for bond in job.get("covalent_bonds", []):
        if bond["left_entity"] != entity or bond["right_entity"] != entity:
            continue
        sides = [(bond["left_position"] - 1, bond["left_atom"]),
                 (bond["right_position"] - 1, bond["right_atom"])]
        (child, _), (parent, o_atom) = sorted(sides, key=lambda s: s[1] != "C1")
        parents[child], positions[child] = parent, int(o_atom[1:])
    roots = [i for i, p in enumerate(parents) if p < 0]
    if len(roots) != 1:
        raise UserError(f"Protenix job '{job.get('name')}': the glycan bonds do not form a tree")
    order = [roots[0]] + [i for i in range(len(ligand)) if i != roots[0]]
    new = {old: k for k, old in enumerate(order)}
    codes = [ligand[i] for i in order]
    pars = [new[parents[i]] if parents[i] >= 0 else -1 for i in order]
    return proteins, canonical_glycan(codes, pars, [positions[i] for i in order])


# --------------------------------------------------------------------------------- geometry

RING = ["C1", "C2", "C3", "C4", "C5", "O5"]
RING_BOND = 1.48
RING_PUCKER = 0.25  # +-z of alternating ring atoms
C_O, C_N, C_C6, O_C_GLYCOSIDIC_ANGLE = 1.43, 1.46, 1.52, 117.0


def place_atom(a, b, c, bond, angle_deg, torsion_deg):
    """NeRF: the point d with |cd| = bond, angle(b, c, d) = angle and dihedral(a, b, c, d) =
    torsion (degrees; tensors broadcast, differentiable)."""
    angle = torch.deg2rad(torch.as_tensor(angle_deg, dtype=c.dtype))
    torsion = torch.deg2rad(torch.as_tensor(torsion_deg, dtype=c.dtype))
    bc = c - b
    bc = bc / bc.norm(dim=-1, keepdim=True)
    n = torch.linalg.cross(b - a, bc)
    n = n / n.norm(dim=-1, keepdim=True)
    m = torch.linalg.cross(n, bc)
    bond = torch.as_tensor(bond, dtype=c.dtype)
    return c + bond * (-torch.cos(angle)[..., None] * bc
                       + (torch.sin(angle) * torch.cos(torsion))[..., None] * m
                       + (torch.sin(angle) * torch.sin(torsion))[..., None] * n)


def dihedral(a, b, c, d) -> torch.Tensor:
    """The IUPAC dihedral angle a-b-c-d in degrees, in (-180, 180]."""
    b0, b1, b2 = a - b, c - b, d - c
    b1 = b1 / b1.norm(dim=-1, keepdim=True)
    v = b0 - (b0 * b1).sum(-1, keepdim=True) * b1
    w = b2 - (b2 * b1).sum(-1, keepdim=True) * b1
    x = (v * w).sum(-1)
    y = (torch.linalg.cross(b1, v) * w).sum(-1)
    return torch.rad2deg(torch.atan2(y, x))


def bond_angle(a, b, c) -> torch.Tensor:
    u, v = a - b, c - b
    cos = (u * v).sum(-1) / (u.norm(dim=-1) * v.norm(dim=-1))
    return torch.rad2deg(torch.arccos(cos.clamp(-1, 1)))


@cache
def residue_template(code: str) -> tuple[tuple[str, ...], np.ndarray, tuple]:
    """(atom names, coordinates (n, 3) with the ring centroid at the origin and the ring's
    mean plane at z = 0, bonds as index pairs) of one free monosaccharide (with O1)."""
    m = monosaccharide(code)
    radius = np.sqrt(RING_BOND**2 - 4 * RING_PUCKER**2)
    ring = np.array([[radius * np.cos(k * np.pi / 3), radius * np.sin(k * np.pi / 3),
                      RING_PUCKER * (-1) ** k] for k in range(6)])
    xyz = {name: ring[k] for k, name in enumerate(RING)}
    bonds = [(RING[k], RING[(k + 1) % 6]) for k in range(6)]

    def substituent(k, axial):
        p, prev, nxt = ring[k], ring[k - 1], ring[(k + 1) % 6]
        out = p - (prev + nxt) / 2
        out /= np.linalg.norm(out)
        normal = np.cross(prev - p, nxt - p)
        normal /= np.linalg.norm(normal)
        half = np.deg2rad(109.47 / 2)
        options = [np.cos(half) * out + s * np.sin(half) * normal for s in (1, -1)]
        options.sort(key=lambda d: abs(d[2]))  # equatorial first, axial (near +-z) second
        return options[1] if axial else options[0]

    def attach(name, k, axial, length):
        xyz[name] = ring[k] + length * substituent(k, axial)
        bonds.append((RING[k], name))

    attach("O1", 0, m.anomer == "a", C_O)
    attach("N2" if m.n_acetyl else "O2", 1, 2 in m.axial, C_N if m.n_acetyl else C_O)
    attach("O3", 2, 3 in m.axial, C_O)
    attach("O4", 3, 4 in m.axial, C_O)
    attach("C6", 4, False, C_C6)
    t = {k: torch.tensor(v) for k, v in xyz.items()}
    if m.has_o6:  # gt rotamer: O5-C5-C6-O6 = +60
        xyz["O6"] = place_atom(t["O5"], t["C5"], t["C6"], C_O, 111.0, 60.0).numpy()
        bonds.append(("C6", "O6"))
    if m.n_acetyl:
        xyz["C7"] = place_atom(t["C1"], t["C2"], t["N2"], 1.33, 123.0, -100.0).numpy()
        t["C7"] = torch.tensor(xyz["C7"])
        xyz["O7"] = place_atom(t["C2"], t["N2"], t["C7"], 1.23, 122.0, 0.0).numpy()
        xyz["C8"] = place_atom(t["C2"], t["N2"], t["C7"], 1.50, 116.0, 180.0).numpy()
        bonds += [("N2", "C7"), ("C7", "O7"), ("C7", "C8")]
    names = tuple(xyz)
    coords = np.stack([xyz[n] for n in names]) - ring.mean(0)
    index = {n: i for i, n in enumerate(names)}
    return names, coords, tuple((index[a], index[b]) for a, b in bonds)


def _frame(origin, toward, plane):
    """Rotation (..., 3, 3) with columns e1 (origin -> toward), e2 (in the plane of ``plane``),
    e3."""
    e1 = toward - origin
    e1 = e1 / e1.norm(dim=-1, keepdim=True)
    v = plane - origin
    e2 = v - (v * e1).sum(-1, keepdim=True) * e1
    e2 = e2 / e2.norm(dim=-1, keepdim=True)
    return torch.stack([e1, e2, torch.linalg.cross(e1, e2)], dim=-1)


@dataclass
class GlycanBuilder:
    """Heavy-atom coordinates of a glycan from the root's rigid pose and each linkage's
    (phi, psi), batched and differentiable. The root keeps O1 (the reducing-end hydroxyl);
    a child's O1 is its parent's O<x>."""

    glycan: Glycan
    dtype: torch.dtype = torch.float32
    atoms: list[tuple[int, str]] = field(init=False)  # (residue, atom name)
    bonds: list[tuple[int, int]] = field(init=False)

    def __post_init__(self):
        self.atoms, self.bonds, self._start = [], [], []
        index = {}
        for i, code in enumerate(self.glycan.codes):
            names, _, bonds = residue_template(code)
            self._start.append(len(self.atoms))
            for name in names:
                if not (i and name == "O1"):
                    index[i, name] = len(self.atoms)
                    self.atoms.append((i, name))
            for a, b in bonds:
                na, nb = names[a], names[b]
                ia = index.get((i, na)) if not (i and na == "O1") else None
                ib = index.get((i, nb)) if not (i and nb == "O1") else None
                if ia is not None and ib is not None:
                    self.bonds.append((ia, ib))
            if i:
                self.bonds.append((index[self.glycan.parents[i], f"O{self.glycan.positions[i]}"],
                                   index[i, "C1"]))
        self.index = index
        self.elements = [name[0] for _, name in self.atoms]

    def torsion_atoms(self) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
        """Atom indices (phi quadruple, psi quadruple) of each linkage."""
        out = []
        for j in self.glycan.links:
            p, x = self.glycan.parents[j], self.glycan.positions[j]
            ox, cx, cprev = (self.index[p, f"O{x}"], self.index[p, f"C{x}"],
                             self.index[p, f"C{x - 1}"])
            out.append(((self.index[j, "O5"], self.index[j, "C1"], ox, cx),
                        (self.index[j, "C1"], ox, cx, cprev)))
        return out

    def measure_torsions(self, coords: torch.Tensor) -> torch.Tensor:
        """(..., links, 2) phi, psi in degrees measured from coordinates (..., atoms, 3)."""
        quads = self.torsion_atoms()
        if not quads:
            return coords.new_zeros(coords.shape[:-2] + (0, 2))
        idx = torch.tensor([q for pair in quads for q in pair], device=coords.device)
        angles = dihedral(*(coords[..., idx[:, k], :] for k in range(4)))
        return angles.reshape(coords.shape[:-2] + (len(quads), 2))

    def build(self, rotation: torch.Tensor, translation: torch.Tensor,
              torsions: torch.Tensor) -> torch.Tensor:
        """Coordinates (B, atoms, 3): the root's template rotated by ``rotation`` (B, 3, 3)
        about its ring centroid, which goes to ``translation`` (B, 3); ``torsions`` (B, links,
        2) are (phi, psi) in degrees."""
        per_residue = [None] * len(self.glycan)
        root = torch.as_tensor(residue_template(self.glycan.codes[0])[1], dtype=self.dtype,
                               device=translation.device)
        per_residue[0] = root @ rotation.transpose(-1, -2) + translation[:, None]
        for k, j in enumerate(self.glycan.links):
            p, x = self.glycan.parents[j], self.glycan.positions[j]
            names = residue_template(self.glycan.codes[p])[0]
            parent = per_residue[p]
            cprev, cx, ox = (parent[:, names.index(n)] for n in (f"C{x - 1}", f"C{x}", f"O{x}"))
            child_names, child_xyz, _ = residue_template(self.glycan.codes[j])
            tmpl = torch.as_tensor(child_xyz, dtype=self.dtype, device=translation.device)
            o1, c1, o5 = (tmpl[child_names.index(n)] for n in ("O1", "C1", "O5"))
            angle = float(bond_angle(o1, c1, o5))
            c1_new = place_atom(cprev, cx, ox, C_O, O_C_GLYCOSIDIC_ANGLE, torsions[:, k, 1])
            o5_new = place_atom(cx, ox, c1_new, RING_BOND, angle, torsions[:, k, 0])
            target = _frame(c1_new, o5_new, ox)
            source = _frame(c1, o5, o1)
            rot = target @ source.transpose(-1, -2)
            per_residue[j] = (tmpl - c1) @ rot.transpose(-1, -2) + c1_new[:, None]
        out = [per_residue[i][:, [n != "O1" or i == 0 for n in
                                  residue_template(self.glycan.codes[i])[0]]]
               for i in range(len(self.glycan))]
        return torch.cat(out, dim=1)
