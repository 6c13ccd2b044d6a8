"""ReID retrieval metrics: mAP and CMC rank-1 from a query-gallery distance matrix.

Gallery entries with the query's identity *and* camera are removed (the Market/SYSU rule;
cross-modality queries never share a camera with the gallery); ``sysu_rule`` also removes
gallery camera 2 for queries from camera 3 (SYSU-MM01's evaluation code). AP = mean of the
precision at each correct match; queries without a correct match are skipped.
"""

from __future__ import annotations

import numpy as np


def evaluate_retrieval(dist: np.ndarray, q_ids: np.ndarray, g_ids: np.ndarray,
                       q_cams: np.ndarray | None = None, g_cams: np.ndarray | None = None,
                       sysu_rule: bool = False) -> dict[str, float]:
    q_cams = np.full(len(q_ids), -1) if q_cams is None else q_cams
    g_cams = np.full(len(g_ids), -2) if g_cams is None else g_cams
    aps, top1 = [], []
    for i in range(len(q_ids)):
        keep = ~((g_ids == q_ids[i]) & (g_cams == q_cams[i]))
        if sysu_rule and q_cams[i] == 3:
            keep &= g_cams != 2
        order = np.argsort(dist[i, keep], kind="stable")
        matches = (g_ids[keep][order] == q_ids[i])
        if not matches.any():
            continue
        hits = np.flatnonzero(matches)
        aps.append(float(np.mean((np.arange(hits.size) + 1) / (hits + 1))))
        top1.append(bool(matches[0]))
    return {"mAP": float(np.mean(aps)) if aps else float("nan"),
            "rank1": float(np.mean(top1)) if top1 else float("nan")}
