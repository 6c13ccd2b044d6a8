"""Statistics over a lifelong stream: forgetting from the stage-by-task mAP matrix, each
arm's paired drop below finetune on the same streams, and the check that a saved state holds
no image-shaped tensors (exemplar-free)."""

from __future__ import annotations

import numpy as np
import torch


def forgetting(matrix: list[list[float]]) -> float:
    """Mean over all but the last task of (best mAP before the last stage - final mAP)."""
    final = matrix[-1]
    drops = [max(matrix[s][t] for s in range(t, len(matrix) - 1)) - final[t]
             for t in range(len(matrix) - 1)]
    return float(np.mean(drops)) if drops else 0.0


def image_shaped_tensors(state, height: int, width: int) -> int:
    """Tensors in a saved state whose last two dimensions are an image's (H, W)."""
    found = 0
    for value in state.values():
        tensors = value.values() if isinstance(value, dict) else [value]
        for t in tensors:
            if isinstance(t, torch.Tensor) and t.dim() >= 2 and tuple(t.shape[-2:]) == (
                    height, width):
                found += 1
    return found


def paired_drops(rows: list[dict], key: str) -> dict[str, float]:
    """Each arm's drop in ``key`` below finetune's on the same stream (seed), averaged over
    the streams, with its standard error (the streams differ far more than the arms)."""
    finetune = {r["seed"]: r[key] for r in rows if r["arm"] == "finetune"}
    out = {}
    for arm in dict.fromkeys(r["arm"] for r in rows if r["arm"] != "finetune"):
        drops = np.array([finetune[r["seed"]] - r[key] for r in rows
                          if r["arm"] == arm and r["seed"] in finetune])
        if len(drops):
            out[f"{key}_drop_vs_finetune_{arm}"] = float(drops.mean())
            if len(drops) > 1:
                out[f"{key}_drop_vs_finetune_se_{arm}"] = float(
                    drops.std(ddof=1) / np.sqrt(len(drops)))
    return out
