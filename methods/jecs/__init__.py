"""Joint Envelope Conformal Selection (abstract 6): select one benchmark of items declared
clean for every audited model while controlling the global contamination rate (GCR)."""

from methods.jecs.selection import (
    Envelope,
    benjamini_hochberg,
    conformal_pvalues,
    fit_envelope,
    jecs_select,
    max_p,
    storey_bh,
    storey_pi0,
)

__all__ = [
    "Envelope", "benjamini_hochberg", "conformal_pvalues", "fit_envelope",
    "jecs_select", "max_p", "storey_bh", "storey_pi0",
]
