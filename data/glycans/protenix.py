"""Glycans in Protenix's input JSON (multi-CCD ligands, 1-based bonds) and back."""

from __future__ import annotations

from common.errors import UserError
from data.glycans.trees import Glycan, canonical_glycan

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
