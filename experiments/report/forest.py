"""The forest plot of a study's effects: every claim judged by an interval, grouped by
paper, coloured by verdict (the page, report.md and the README show it)."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Any

from experiments.claims import CONTRADICTED, HOLDS, INCONCLUSIVE
from experiments.report.render import colour as colour_of

CAPTION_WIDTH = 110  # characters a line of the axis caption holds inside the 9-inch figure


def symlog_ticks(linear: float, reach: float) -> list[float]:
    """Ticks for a symmetric-log axis that never overlap: 0, the linear threshold (rounded
    to one significant digit) and the decades beyond it, on both sides."""
    first = float(f"{linear:.0e}")
    ticks = [first]
    while ticks[-1] * 10 <= reach:
        ticks.append(ticks[-1] * 10)
    return [-t for t in reversed(ticks)] + [0.0] + ticks


def plot_effects(rows: list[dict[str, Any]], path: Path) -> None:
    """The forest plot: one row per claim judged by an interval (exact and exists claims
    are counts of seeds: the caller leaves them out), grouped by paper, coloured by verdict, the
    claimed side (right of 0) shaded; relative effects (% of the reference side) and
    absolute ones (own units) in separate panels, each on its own axis."""
    import matplotlib.pyplot as plt

    panels = [(unit, [r for r in rows if r["unit"] == unit]) for unit in ("%", "abs.")]
    panels = [(unit, chosen) for unit, chosen in panels if chosen]
    heights = [max(1.5, 0.22 * len(chosen) + 0.8) for _, chosen in panels]
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, sum(heights) + 0.6),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    for ax, (unit, chosen) in zip(axes[:, 0], panels, strict=True):
        _forest_panel(ax, chosen)
        ax.set_xlabel(textwrap.fill(
            "effect, > 0 on the claimed side, "
            + ("% of the reference side" if unit == "%" else
               "in the claim's own units (its reference is 0 or a threshold)")
            + "; bars: the interval the verdict used (90% for an equivalence, 95% "
            "otherwise), grey: an equivalence's margin", CAPTION_WIDTH), fontsize=8)
    for verdict in (HOLDS, INCONCLUSIVE, CONTRADICTED):
        axes[0, 0].plot([], [], "o", color=colour_of(verdict), label=verdict)
    axes[0, 0].plot([], [], "o", color="grey", mfc="white", label="sanity check")
    axes[0, 0].legend(loc="lower right", fontsize=7)
    axes[0, 0].set_title("every claim's effect (claimed side shaded)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _forest_panel(ax, rows: list[dict[str, Any]]) -> None:
    ax.axvspan(0, 1e9, color="#1a7f37", alpha=0.06, lw=0)
    ax.axvline(0, color="black", lw=0.8)
    labels = []
    for i, r in enumerate(rows):
        y = len(rows) - 1 - i
        colour = colour_of(r["verdict"])
        if r.get("margin") is not None:  # an equivalence: the band its interval must stay in
            ax.fill_betweenx([y - 0.35, y + 0.35], -r["margin"], r["margin"],
                             color="grey", alpha=0.25, lw=0)
        if r["low"] is not None:
            ax.plot([r["low"], r["high"]], [y, y], color=colour, lw=2, alpha=0.8)
        ax.plot([r["effect"]], [y], "o", color=colour, ms=4,
                mfc="white" if r["sanity"] else colour)
        labels.append(f"{r['paper']}: {r['claim']}")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(labels[::-1], fontsize=7)
    values = [v for r in rows for v in (r["low"], r["high"], r["effect"]) if v is not None
              and math.isfinite(v)]
    if values:
        reach = max(abs(v) for v in values)
        linear = sorted(abs(v) for v in values)[len(values) // 2] or 1.0
        ax.set_xscale("symlog", linthresh=linear)
        ax.set_xlim(-reach * 1.5 - linear, reach * 1.5 + linear)
        ticks = symlog_ticks(linear, reach * 1.5 + linear)
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks], fontsize=7)
