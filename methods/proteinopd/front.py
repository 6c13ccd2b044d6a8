"""Gain against designability: two methods' fronts compared at equal gain.

A front point is a dict with ``gain`` (higher is better) and the designability measures of
``DESIGNABILITY`` (lower is better for each): NLL per token under the base model relative to
the base's own samples, the longest homopolymer run, and mean pairwise identity.
"""

from __future__ import annotations

import numpy as np

DESIGNABILITY = ("nll", "homopolymer", "identity")  # lower is better for each


def at_equal_gain(gain: float, front: list[dict], measures=DESIGNABILITY) -> dict | None:
    """The designability of ``front`` at ``gain``: each measure interpolated linearly in gain
    between the front's neighbouring points; None outside the front's gain range (equal gain
    is not defined there)."""
    points = sorted(front, key=lambda r: r["gain"])
    gains = [r["gain"] for r in points]
    if not gains[0] <= gain <= gains[-1]:
        return None
    return {m: float(np.interp(gain, gains, [r[m] for r in points])) for m in measures}


def no_worse_at_equal_gain(points: list[dict], front: list[dict], measures=DESIGNABILITY
                           ) -> tuple[float, int]:
    """The share of ``points`` whose designability is at most ``front``'s at the same gain
    (``at_equal_gain``) on every one of ``measures``, over the points inside the front's gain
    range (NaN when there is none), and how many those are."""
    pairs = [(p, there) for p in points
             if (there := at_equal_gain(p["gain"], front, measures)) is not None]
    if not pairs:
        return float("nan"), 0
    return float(np.mean([all(p[m] <= there[m] for m in measures) for p, there in pairs])), \
        len(pairs)


MATCHED_ON = ("homopolymer", "identity")  # positive, scale-free as ratios


def matched_rl(rows: list[dict]) -> dict:
    """The RL point (``method`` "rl") to compare costs with ``rows[0]`` (OPD's student at the
    method's weights): among the RL points that reach its gain (all of them when none does),
    the one whose designability is closest, i.e. whose largest fold difference over
    homopolymer run and pairwise identity is smallest. NLL under the base is left out of the
    match: the base also assigns repeats a high likelihood, so a collapsed policy can look
    designable by it."""
    reference = rows[0]
    rl = [r for r in rows if r["method"] == "rl"]
    reaching = [r for r in rl if r["gain"] >= reference["gain"]] or rl
    return min(reaching, key=lambda r: max(abs(np.log(r[m] / reference[m]))
                                           for m in MATCHED_ON))
