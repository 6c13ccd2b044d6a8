"""Ranking profiles: prefsampling cultures, PrefLib files, and pairwise-preference data.

A profile is an int array (n, m), each row a strict ranking (best first) of candidates
0..m-1.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from common.errors import UserError

CULTURES = ("impartial", "mallows", "urn", "single_peaked_walsh", "single_peaked_conitzer",
            "single_crossing")


def sample_profile(culture: str, n: int, m: int, seed: int, mallows_phi: float = 0.5,
                   urn_alpha: float = 0.1) -> np.ndarray:
    """One profile from a prefsampling culture."""
    import prefsampling.ordinal as po

    samplers = {
        "impartial": lambda: po.impartial(n, m, seed=seed),
        "mallows": lambda: po.mallows(n, m, phi=mallows_phi, seed=seed),
        "urn": lambda: po.urn(n, m, alpha=urn_alpha, seed=seed),
        "single_peaked_walsh": lambda: po.single_peaked_walsh(n, m, seed=seed),
        "single_peaked_conitzer": lambda: po.single_peaked_conitzer(n, m, seed=seed),
        "single_crossing": lambda: po.single_crossing(n, m, seed=seed),
    }
    if culture not in samplers:
        raise UserError(f"unknown culture '{culture}'; known: {', '.join(CULTURES)}")
    return np.asarray(samplers[culture](), dtype=int)


def load_preflib(path: str) -> np.ndarray:
    """A PrefLib .soc (strict complete orders) file; .soi (incomplete) orders are completed
    by appending the unranked candidates in id order."""
    from preflibtools.instances import OrdinalInstance

    file = Path(path)
    if not file.is_file():
        raise UserError(f"dataset.path={path} does not exist (PrefLib .soc/.soi expected)")
    inst = OrdinalInstance()
    inst.parse_file(str(file))
    cands = sorted(inst.alternatives_name)
    index = {c: i for i, c in enumerate(cands)}
    rows = []
    for order, mult in inst.flatten_strict():
        ranked = [index[c] for c in order]
        ranked += [i for i in range(len(cands)) if i not in ranked]
        rows += [ranked] * mult
    return np.array(rows, dtype=int)

