"""Figure creation for protocols (``ctx.save_figure`` writes and closes them). The runner
sets ``MPLBACKEND=Agg`` before a protocol runs, so no protocol selects a backend."""

from __future__ import annotations


def subplots(ncols: int = 1, nrows: int = 1, panel: tuple[float, float] = (5.0, 4.2), **kwargs):
    """``(fig, axes)`` with ``panel`` inches per subplot; ``axes`` as in ``plt.subplots``."""
    import matplotlib.pyplot as plt

    return plt.subplots(nrows, ncols, figsize=(panel[0] * ncols, panel[1] * nrows), **kwargs)
