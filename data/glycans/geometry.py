"""A differentiable glycan builder from internal coordinates: an ideal 4C1 ring (one bond
length, alternating pucker), substituents on the axial or equatorial tetrahedral direction of
their ring atom, and glycosidic torsions phi = O5'-C1'-O(x)-C(x), psi = C1'-O(x)-C(x)-C(x-1)
(IUPAC heavy-atom definitions). Heavy atoms only."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache

import numpy as np
import torch

from data.glycans.trees import Glycan, monosaccharide

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
        xyz["C7"] = place_atom(t["C1"], t["C2"], t["N2"], 1.33, 123.0, 100.0).numpy()
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
