"""Joint Envelope Conformal Selection (abstract 6): select one benchmark of items declared
clean for every audited model while controlling the global contamination rate (GCR)."""

from methods.jecs.membership import min_k_percent
from methods.jecs.selection import (
    JECS,
    Envelope,
    benjamini_hochberg,
    conformal_pvalues,
    fit_envelope,
    max_p,
    storey_bh,
    storey_pi0,
)

__all__ = [
    "JECS", "Envelope", "benjamini_hochberg", "conformal_pvalues", "fit_envelope",
    "max_p", "min_k_percent", "storey_bh", "storey_pi0",
]
