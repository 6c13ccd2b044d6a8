"""Steric clashes between heavy atoms, the van der Waals overlap test docking benchmarks use.

Two atoms clash when they are closer than ``CLASH_FRACTION`` (0.75, PoseBusters' threshold)
times the sum of their Bondi van der Waals radii (C-O: 2.42 A, O-O: 2.28 A, C-C: 2.55 A).
Within one molecule only pairs at least ``MIN_BOND_SEPARATION`` (4) bonds apart are tested:
1-2 and 1-3 distances are fixed by bond lengths and angles, and 1-4 distances by the
torsions, which the CHI energies already score (a cis 1-4 pair sits at about 2.5 A).
"""

from __future__ import annotations

import numpy as np

VDW_RADIUS = {"C": 1.70, "N": 1.55, "O": 1.52, "S": 1.80}  # Bondi (1964), A
CLASH_FRACTION = 0.75
MIN_BOND_SEPARATION = 4


def radii(elements) -> np.ndarray:
    return np.array([VDW_RADIUS.get(e, 1.70) for e in elements])


def separated_pairs(n_atoms: int, bonds, min_bonds: int = MIN_BOND_SEPARATION) -> np.ndarray:
    """(k, 2) atom index pairs i < j at least ``min_bonds`` bonds apart in the bond graph (or
    in different connected components)."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import shortest_path

    bonds = np.asarray(list(bonds), dtype=int).reshape(-1, 2)
    graph = coo_matrix((np.ones(len(bonds)), (bonds[:, 0], bonds[:, 1])),
                       shape=(n_atoms, n_atoms))
    hops = shortest_path(graph, directed=False, unweighted=True)
    i, j = np.nonzero(np.triu(hops >= min_bonds, 1))
    return np.stack([i, j], 1)


def internal_clashes(xyz: np.ndarray, elements, pairs: np.ndarray) -> int:
    """How many of ``pairs`` (from :func:`separated_pairs`) overlap in one molecule."""
    if not len(pairs):
        return 0
    r = radii(elements)
    d = np.linalg.norm(xyz[pairs[:, 0]] - xyz[pairs[:, 1]], axis=-1)
    return int((d < CLASH_FRACTION * (r[pairs[:, 0]] + r[pairs[:, 1]])).sum())


def contact_clashes(xyz_a: np.ndarray, elements_a, xyz_b: np.ndarray, elements_b) -> int:
    """How many atom pairs between two molecules (a glycan and its protein) overlap."""
    limit = CLASH_FRACTION * (radii(elements_a)[:, None] + radii(elements_b)[None])
    return int((np.linalg.norm(xyz_a[:, None] - xyz_b[None], axis=-1) < limit).sum())
