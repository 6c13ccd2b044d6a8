"""Monosaccharides and glycan trees: the D-hexopyranose templates' stereochemistry, which CHI
function each torsion takes, and glycan trees parsed from IUPAC-condensed text.

phi takes the child's anomer; psi takes ``psi_2ax_3eq_4ax`` for an axial substituent at an
even ring position or an equatorial one at an odd position, the opposite ``psi_2eq_3ax_4eq``,
and exocyclic (1->6) links ``alpha6_psi`` / ``beta6_psi`` by the child's anomer. L-fucose uses
the 6-deoxy-galacto template (its axial/equatorial pattern, which is all the CHI rules read, is
that of D-galactose); sialic acids and furanoses are not covered."""

from __future__ import annotations

import re
from dataclasses import dataclass

from common.errors import UserError

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
