"""A model-agnostic pose evaluator for protein-glycan complexes.

Input: reference and predicted coordinates of the same protein atoms and the same glycan
atoms (any docking or structure-prediction model's output, matched by atom keys).

- Ligand RMSD: the prediction is superposed on the reference by the backbone (N, CA, C, O)
  of the reference pocket (residues with any heavy atom within 10 A of the reference glycan),
  then the glycan heavy-atom RMSD is minimised over the automorphisms of its element-labelled
  covalent graph (symmetry correction, as spyrmsd and PoseBusters do). Success = RMSD < 2 A
  (and < 5 A, the looser glycan threshold).
- DockQ, protein style (DockQ v2 formula; monosaccharides play residues, ring atoms play the
  backbone): fnat over residue pairs with any heavy-atom pair within 5 A, iRMS on the backbone
  of interface residues (10 A) after their own best fit, LRMS on the glycan rings after
  superposing the receptor backbone; DockQ = (fnat + 1/(1+(iRMS/1.5)^2) + 1/(1+(LRMS/8.5)^2))/3.
- DockQ, small-molecule style (DockQ v2 ``--small_molecule``): dockq_formula(0, 0, LRMSD) with
  the symmetry-corrected ligand RMSD; at most 2/3 by definition.
- DockQC (BCAPIN; RECON where its reference code is not explicit): fnat = 0.5 fnat_res +
  0.5 fnat_full, with fnat_res the recovered native (monosaccharide, protein residue) contacts
  (5 A) and fnat_full the recovered native interface protein residues; RIRMS the RMS of the
  ring centroids of the monosaccharides touching the protein in the reference (all rings when
  none does) after the pocket superposition; DockQC = (fnat + 1/(1+(RIRMS/2)^2) +
  1/(1+(LRMS/4)^2))/3.
- Clashes (``data.glycans.clashes``): atom pairs of the predicted pose closer than 0.75 times
  their van der Waals radii, within the glycan (pairs at least four bonds apart) and between
  the glycan and the protein; ``clash_free`` marks a pose with none.

Bonds come from the glycan's graph: the builder's in memory, and for files each residue's
monosaccharide template (by atom name) plus the file's link records (or, without them, each
child residue's C1 to the nearest oxygen of another residue), never from distances between
all atoms, which would join overlapping atoms of a clashing structure.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from data.glycans.clashes import contact_clashes, internal_clashes

BACKBONE = ("N", "CA", "C", "O")
CONTACT, INTERFACE = 5.0, 10.0


def kabsch(mobile: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(R, t) minimising sum |R mobile_i + t - target_i|^2 (proper rotation)."""
    mc, tc = mobile.mean(0), target.mean(0)
    h = (mobile - mc).T @ (target - tc)
    u, _, vt = np.linalg.svd(h)
    d = np.sign(np.linalg.det(vt.T @ u.T))
    r = vt.T @ np.diag([1.0, 1.0, d]) @ u.T
    return r, tc - r @ mc


def rmsd(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.sqrt(((a - b) ** 2).sum(-1).mean()))


def fitted_rmsd(a: np.ndarray, b: np.ndarray) -> float:
    r, t = kabsch(a, b)
    return rmsd(a @ r.T + t, b)


def automorphisms(elements: list[str], bonds: list[tuple[int, int]]) -> np.ndarray:
    """(k, n) atom permutations that map the element-labelled bond graph onto itself."""
    import networkx as nx

    graph = nx.Graph()
    graph.add_nodes_from((i, {"element": e}) for i, e in enumerate(elements))
    graph.add_edges_from(bonds)
    maps = nx.vf2pp_all_isomorphisms(graph, graph, node_label="element")
    return np.array([[m[i] for i in range(len(elements))] for m in maps])


def symmetric_rmsd(pred: np.ndarray, ref: np.ndarray, perms: np.ndarray) -> float:
    """min over automorphisms p of RMSD(pred[p], ref)."""
    d = ((pred[perms] - ref[None]) ** 2).sum(-1).mean(-1)
    return float(np.sqrt(d.min()))


def dockq_formula(fnat: float, irms: float, lrms: float) -> float:
    return (fnat + 1 / (1 + (irms / 1.5) ** 2) + 1 / (1 + (lrms / 8.5) ** 2)) / 3


def dockqc_formula(fnat_res: float, fnat_full: float, lrms: float, rirms: float) -> float:
    fnat = 0.5 * fnat_res + 0.5 * fnat_full
    return (fnat + 1 / (1 + (rirms / 2.0) ** 2) + 1 / (1 + (lrms / 4.0) ** 2)) / 3


@dataclass
class PoseTopology:
    """What the evaluator needs to know about the atoms (shared by reference and model)."""

    protein_residue: np.ndarray  # (M,) residue index of each protein atom
    protein_backbone: np.ndarray  # (M,) bool
    ligand_residue: np.ndarray  # (N,) monosaccharide index of each glycan atom
    ligand_ring: np.ndarray  # (N,) bool: ring atom (C1..C5, O5)
    automorphisms: np.ndarray  # (k, N)
    ligand_elements: list[str]  # (N,)
    ligand_pairs: np.ndarray  # (p, 2) glycan atom pairs tested for clashes
    protein_elements: list[str]  # (M,)

    @classmethod
    def of(cls, protein_residue, protein_names, ligand_residue, ligand_names, bonds,
           automorphism_cache: dict | None = None, cache_key=None) -> PoseTopology:
        """From residue indices and atom names (elements are the names' first letters) and
        the glycan's covalent bonds; ``automorphism_cache[cache_key]`` reuses automorphisms
        of a glycan seen before."""
        from data.glycans import RING, separated_pairs

        elements = [name[0] for name in ligand_names]
        cache = {} if automorphism_cache is None or cache_key is None else automorphism_cache
        if cache_key not in cache:
            cache[cache_key] = automorphisms(elements, bonds)
        return cls(protein_residue=np.asarray(protein_residue),
                   protein_backbone=np.array([n in BACKBONE for n in protein_names]),
                   ligand_residue=np.asarray(ligand_residue),
                   ligand_ring=np.array([n in RING for n in ligand_names]),
                   automorphisms=cache[cache_key], ligand_elements=elements,
                   ligand_pairs=separated_pairs(len(elements), bonds),
                   protein_elements=[n[0] for n in protein_names])


def _contacts(protein, p_res, ligand, l_res, cutoff) -> set[tuple[int, int]]:
    close = np.linalg.norm(protein[:, None] - ligand[None], axis=-1) < cutoff
    i, j = np.nonzero(close)
    return set(zip(p_res[i].tolist(), l_res[j].tolist(), strict=True))


def evaluate_pose(topo: PoseTopology, ref_protein: np.ndarray, ref_ligand: np.ndarray,
                  pred_protein: np.ndarray, pred_ligand: np.ndarray) -> dict[str, float]:
    """Every metric of one (reference, prediction) pair."""
    p_res, l_res = topo.protein_residue, topo.ligand_residue
    near = np.linalg.norm(ref_protein[:, None] - ref_ligand[None], axis=-1).min(1) < INTERFACE
    pocket = np.isin(p_res, np.unique(p_res[near]))
    fit = pocket & topo.protein_backbone
    if fit.sum() < 3:
        fit = topo.protein_backbone
    r, t = kabsch(pred_protein[fit], ref_protein[fit])
    model_protein, model_ligand = pred_protein @ r.T + t, pred_ligand @ r.T + t
    lrmsd = symmetric_rmsd(model_ligand, ref_ligand, topo.automorphisms)
    # receptor-backbone superposition for DockQ's LRMS
    r2, t2 = kabsch(pred_protein[topo.protein_backbone], ref_protein[topo.protein_backbone])
    ring = topo.ligand_ring
    lrms = rmsd((pred_ligand @ r2.T + t2)[ring], ref_ligand[ring])
    native = _contacts(ref_protein, p_res, ref_ligand, l_res, CONTACT)
    model = _contacts(model_protein, p_res, model_ligand, l_res, CONTACT)
    fnat = len(native & model) / len(native) if native else 0.0
    interface_p = np.isin(p_res, np.unique(p_res[near])) & topo.protein_backbone
    near_l = np.linalg.norm(ref_ligand[:, None] - ref_protein[None], axis=-1).min(1) < INTERFACE
    interface_l = np.isin(l_res, np.unique(l_res[near_l])) & ring
    a = np.concatenate([pred_protein[interface_p], pred_ligand[interface_l]])
    b = np.concatenate([ref_protein[interface_p], ref_ligand[interface_l]])
    irms = fitted_rmsd(a, b)
    native_res = {p for p, _ in native}
    fnat_full = len(native_res & {p for p, _ in model}) / len(native_res) if native_res else 0.0
    touching = sorted({s for _, s in native}) or sorted(set(l_res.tolist()))
    centroids = [(model_ligand[(l_res == s) & ring].mean(0), ref_ligand[(l_res == s) & ring]
                  .mean(0)) for s in touching]
    rirms = rmsd(np.array([c[0] for c in centroids]), np.array([c[1] for c in centroids]))
    clashes = (internal_clashes(pred_ligand, topo.ligand_elements, topo.ligand_pairs)
               + contact_clashes(pred_ligand, topo.ligand_elements, pred_protein,
                                 topo.protein_elements))
    return {"clashes": float(clashes), "clash_free": float(clashes == 0), "lrmsd": lrmsd,
            "success2A": float(lrmsd < 2.0), "success5A": float(lrmsd < 5.0),
            "fnat": fnat, "irms": irms, "lrms": lrms,
            "dockq": dockq_formula(fnat, irms, lrms),
            "dockq_small_molecule": dockq_formula(0.0, 0.0, lrmsd),
            "dockqc": dockqc_formula(fnat, fnat_full, lrmsd, rirms), "rirms": rirms}


# ------------------------------------------------------------------ complexes and files

COVALENT_RADIUS = {"C": 0.76, "N": 0.71, "O": 0.66, "S": 1.05, "P": 1.07}  # Cordero 2008
BOND_TOLERANCE = 1.15  # a bond: distance below 1.15 x the sum of the covalent radii


def sugar_bonds(keys: list[tuple], links: list[tuple[tuple, tuple]],
                xyz: np.ndarray | None = None, elements: list[str] | None = None
                ) -> list[tuple[int, int]]:
    """Covalent bonds between sugar atoms keyed (chain, residue number, CCD code, atom name):
    every bond the file records (``links``: struct_conn, LINK, CONECT); within a residue the
    monosaccharide template's bonds between the atoms it names; for atoms the template does
    not name (a non-glycan ligand, another program's naming) and that no file bond touches,
    bonds inferred from distances (``xyz``, ``elements``). Raises UserError when such an atom
    is left without any bond: its symmetry cannot be told."""
    from common.errors import UserError
    from data.glycans import residue_template

    index = {k: i for i, k in enumerate(keys)}
    bonds = {tuple(sorted((index[a], index[b]))) for a, b in links
             if a in index and b in index}
    in_file = {i for pair in bonds for i in pair}
    for residue in dict.fromkeys(k[:3] for k in keys):
        names, _, template_bonds = residue_template(residue[2])
        for a, b in template_bonds:
            ia, ib = index.get((*residue, names[a])), index.get((*residue, names[b]))
            if ia is not None and ib is not None:
                bonds.add(tuple(sorted((ia, ib))))
        members = [i for i, k in enumerate(keys) if k[:3] == residue]
        unnamed = [i for i in members if keys[i][3] not in names and i not in in_file]
        if unnamed and (xyz is None or elements is None):
            raise UserError(f"residue {residue}: atoms {', '.join(keys[i][3] for i in unnamed)} "
                            f"are not in the {residue[2]} template and the file records no bond "
                            "for them")
        for i in unnamed:
            for j in members:
                if j != i and _covalent(xyz[i], xyz[j], elements[i], elements[j]):
                    bonds.add(tuple(sorted((i, j))))
        bonded = {i for pair in bonds for i in pair}
        lonely = [keys[i][3] for i in unnamed if i not in bonded]
        if lonely:
            raise UserError(f"residue {residue}: atoms {', '.join(lonely)} are not in the "
                            f"{residue[2]} template, have no bond in the file (CONECT, "
                            "struct_conn) and none within covalent distance: the ligand's "
                            "symmetry cannot be told")
    return sorted(bonds)


def _covalent(a: np.ndarray, b: np.ndarray, element_a: str, element_b: str) -> bool:
    radii = COVALENT_RADIUS.get(element_a.upper()), COVALENT_RADIUS.get(element_b.upper())
    if None in radii:
        return False
    return float(np.linalg.norm(a - b)) < BOND_TOLERANCE * sum(radii)


def glycosidic_links(keys: list[tuple], xyz: np.ndarray, links: list) -> list[tuple]:
    """``links`` plus, for each residue without O1 and without a link record, the bond from
    its C1 to the nearest oxygen of another residue (the glycosidic oxygen)."""
    linked = {k[:2] for pair in links for k in pair}
    residues = dict.fromkeys(k[:3] for k in keys)
    out = list(links)
    for residue in residues:
        names = {k[3] for k in keys if k[:3] == residue}
        if "O1" in names or residue[:2] in linked or "C1" not in names:
            continue
        c1 = keys.index((*residue, "C1"))
        others = [i for i, k in enumerate(keys) if k[:3] != residue and k[3].startswith("O")]
        if others:
            nearest = others[int(np.argmin(np.linalg.norm(xyz[others] - xyz[c1], axis=-1)))]
            out.append((keys[c1], keys[nearest]))
    return out


def complex_topology(cx, automorphism_cache: dict | None = None) -> PoseTopology:
    """The evaluator's atom facts of a synthetic complex (``data.glycan_complexes.Complex``)."""
    from data.glycans import GlycanBuilder

    builder = GlycanBuilder(cx.glycan)
    return PoseTopology.of([r for r, _ in cx.protein_atoms], [n for _, n in cx.protein_atoms],
                           [r for r, _ in builder.atoms], [n for _, n in builder.atoms],
                           builder.bonds, automorphism_cache, cx.topology)


def evaluate_files(reference, prediction) -> dict[str, float]:
    """Every metric of a predicted structure file against its reference file (PDB/mmCIF)."""
    from common.errors import UserError
    from data.glycan_complexes import read_structure

    ref, pred = read_structure(reference), read_structure(prediction)
    p_index = {k: i for i, k in enumerate(pred.protein_keys)}
    s_index = {k: i for i, k in enumerate(pred.sugar_keys)}
    p_common = [i for i, k in enumerate(ref.protein_keys) if k in p_index]
    s_common = [i for i, k in enumerate(ref.sugar_keys) if k in s_index]
    if len(s_common) < len(ref.sugar_keys):
        raise UserError(f"{prediction}: {len(ref.sugar_keys) - len(s_common)} reference sugar "
                        "atoms are missing from the prediction (matched by chain, residue "
                        "number, CCD code and atom name)")
    residues = {k[:2] for k in ref.protein_keys}
    residue_id = {k: n for n, k in enumerate(sorted(residues))}
    sugar_id = {k: n for n, k in enumerate(sorted({k[:2] for k in ref.sugar_keys}))}
    keys = [ref.sugar_keys[i] for i in s_common]
    ref_ligand = ref.sugar_xyz[s_common]
    elements = [ref.sugar_elements[i] for i in s_common]
    bonds = sugar_bonds(keys, glycosidic_links(keys, ref_ligand, ref.sugar_links), ref_ligand,
                        elements)
    topo = PoseTopology.of([residue_id[ref.protein_keys[i][:2]] for i in p_common],
                           [ref.protein_keys[i][2] for i in p_common],
                           [sugar_id[k[:2]] for k in keys], [k[3] for k in keys], bonds)
    return evaluate_pose(topo, ref.protein_xyz[p_common], ref_ligand,
                         pred.protein_xyz[[p_index[ref.protein_keys[i]] for i in p_common]],
                         pred.sugar_xyz[[s_index[k] for k in keys]])
