"""Glycan chemistry for docking, in five parts: CHI torsion energies (``chi``), monosaccharides and
glycan trees with the IUPAC-condensed parser (``trees``), Protenix input files (``protenix``),
the differentiable builder from internal coordinates (``geometry``) and steric clash tests
(``clashes``). The public names are importable from ``data.glycans``."""

from data.glycans.chi import (
    CHI_KINDS,
    CHI_PARAMS,
    chi_derivative,
    chi_energy,
    wrap_to_domain,
)
from data.glycans.clashes import (
    contact_clashes,
    internal_clashes,
    separated_pairs,
)
from data.glycans.geometry import (
    RING,
    RING_BOND,
    RING_PUCKER,
    GlycanBuilder,
    bond_angle,
    dihedral,
    place_atom,
    residue_template,
)
from data.glycans.protenix import (
    from_protenix,
    to_protenix,
)
from data.glycans.trees import (
    CODE_OF,
    LINK_POSITIONS,
    MONOSACCHARIDES,
    SUGARS,
    Glycan,
    Monosaccharide,
    canonical_glycan,
    has_oxygen,
    monosaccharide,
    parse_iupac,
    phi_kind,
    psi_kind,
)

__all__ = [
    "CHI_KINDS", "CHI_PARAMS", "CODE_OF", "Glycan", "GlycanBuilder", "LINK_POSITIONS",
    "MONOSACCHARIDES", "Monosaccharide", "RING", "RING_BOND", "RING_PUCKER", "SUGARS",
    "bond_angle", "canonical_glycan", "chi_derivative", "chi_energy", "contact_clashes",
    "dihedral", "from_protenix", "has_oxygen", "internal_clashes", "monosaccharide",
    "parse_iupac", "phi_kind", "place_atom", "psi_kind", "residue_template", "separated_pairs",
    "to_protenix", "wrap_to_domain",
]
