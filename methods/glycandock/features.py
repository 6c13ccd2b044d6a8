"""Model inputs: glycan residue features (the base tokens and the glycan topological
features, technique 1) and pocket residue features.

Base features are what a general structure predictor's glycan tokens carry: the CCD code and
the ring position its C1 links to (from the covalent-bond record). Topological features
(RECON: the paper's exact list is not public; each group can be switched off) add
- ``anomer``: alpha / beta,
- ``sugar``: the monosaccharide family shared by both anomers (Glc, Man, Gal, GlcNAc, Fuc),
- ``stereo``: whether the parent's substituent at the link is axial, and the parity of the
  position (the two facts the CHI psi rules read),
- ``tree``: depth from the reducing end, number of children, subtree size, leaf flag,
- ``distance``: tree distances between residues, used by the model as an attention bias.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from data.glycan_complexes import AMINO_ACIDS, ANCHORS, AROMATIC, Complex
from data.glycans import MONOSACCHARIDES, RING, SUGARS, Glycan, GlycanBuilder, monosaccharide

TOPOLOGY_GROUPS = ("anomer", "sugar", "stereo", "tree", "distance")
CODES = list(MONOSACCHARIDES)
POSITIONS = [0, 2, 3, 4, 6]


def tree_distances(glycan: Glycan) -> np.ndarray:
    n = len(glycan)
    d = np.full((n, n), np.inf)
    np.fill_diagonal(d, 0)
    for j in glycan.links:
        d[j, glycan.parents[j]] = d[glycan.parents[j], j] = 1
    for k in range(n):  # Floyd-Warshall on a tree of a few residues
        d = np.minimum(d, d[:, k:k + 1] + d[k:k + 1, :])
    return d


def glycan_features(glycan: Glycan, groups: tuple[str, ...] = ()) -> np.ndarray:
    """(residues, features): base one-hots, then the topological ``groups`` asked for."""
    unknown = set(groups) - set(TOPOLOGY_GROUPS)
    if unknown:
        raise ValueError(f"unknown topological feature groups {sorted(unknown)}; known: "
                         f"{', '.join(TOPOLOGY_GROUPS)}")
    depth = tree_distances(glycan)[0]
    rows = []
    for i, code in enumerate(glycan.codes):
        m = monosaccharide(code)
        row = list(np.eye(len(CODES))[CODES.index(code)])
        row += list(np.eye(len(POSITIONS))[POSITIONS.index(glycan.positions[i])])
        if "anomer" in groups:
            row += [m.anomer == "a", m.anomer == "b"]
        if "sugar" in groups:
            row += list(np.eye(len(SUGARS))[SUGARS.index(m.sugar)])
        if "stereo" in groups:
            parent = glycan.parents[i]
            axial = parent >= 0 and glycan.positions[i] in monosaccharide(
                glycan.codes[parent]).axial
            row += [float(axial), float(glycan.positions[i] % 2 == 0 and i > 0),
                    float(glycan.positions[i] == 6)]
        if "tree" in groups:
            kids = glycan.children(i)
            subtree = sum(1 for j in range(len(glycan)) if _descends(glycan, j, i))
            row += [depth[i] / 5, len(kids) / 3, subtree / 6, float(not kids)]
        rows.append(row)
    return np.asarray(rows, dtype=np.float32)


def _descends(glycan: Glycan, j: int, i: int) -> bool:
    while j >= 0:
        if j == i:
            return True
        j = glycan.parents[j]
    return False


@dataclass
class PocketInputs:
    features: np.ndarray  # (M, 22): amino-acid one-hot, depth, burial
    centres: np.ndarray  # (M, 3) side-chain centroids (CA for glycine)
    normals: np.ndarray  # (M, 3) aromatic ring normals (zero otherwise)
    is_aromatic: np.ndarray  # (M,)
    is_anchor: np.ndarray  # (M,)
    aa: list[str]


def pocket_inputs(cx: Complex) -> PocketInputs:
    residue = np.array([r for r, _ in cx.protein_atoms])
    names = [n for _, n in cx.protein_atoms]
    side = np.array([n not in ("N", "CA", "C", "O") for n in names])
    ca = np.array([n == "CA" for n in names])
    ca_xyz = cx.protein_xyz[ca]
    centre_all = ca_xyz.mean(0)
    centres, normals = [], []
    for r, aa in enumerate(cx.residue_names):
        atoms = cx.protein_xyz[(residue == r) & side] if aa != "GLY" else ca_xyz[[r]]
        centres.append(atoms.mean(0))
        if aa in AROMATIC:
            ring = cx.protein_xyz[(residue == r) & np.isin(names, ["CG", "CE1", "CE2"])]
            n = np.cross(ring[1] - ring[0], ring[2] - ring[0])
            normals.append(n / np.linalg.norm(n))
        else:
            normals.append(np.zeros(3))
    centres = np.array(centres)
    depth = np.linalg.norm(centres - centre_all, axis=1) / 10
    burial = (np.linalg.norm(ca_xyz[:, None] - ca_xyz[None], axis=-1) < 10).sum(1) / 30
    onehot = np.eye(len(AMINO_ACIDS))[[AMINO_ACIDS.index(a) for a in cx.residue_names]]
    feats = np.concatenate([onehot, depth[:, None], burial[:, None]], 1).astype(np.float32)
    return PocketInputs(feats, centres, np.array(normals),
                        np.isin(cx.residue_names, AROMATIC), np.isin(cx.residue_names, ANCHORS),
                        list(cx.residue_names))


def binding_labels(cx: Complex, pocket: PocketInputs) -> tuple[int, int]:
    """(stacking residue, anchor residue) read off the reference pose, for training: the
    aromatic whose ring centre is nearest the reducing-end ring centroid, and the anchor-type
    residue nearest its C5."""
    builder = GlycanBuilder(cx.glycan)
    ring = [builder.index[0, n] for n in RING]
    root = cx.ligand_xyz[ring].mean(0)
    c5 = cx.ligand_xyz[builder.index[0, "C5"]]
    d_stack = np.where(pocket.is_aromatic, np.linalg.norm(pocket.centres - root, axis=1), np.inf)
    d_anchor = np.where(pocket.is_anchor, np.linalg.norm(pocket.centres - c5, axis=1), np.inf)
    return int(np.argmin(d_stack)), int(np.argmin(d_anchor))
