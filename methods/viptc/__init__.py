"""Exemplar-free visible-infrared lifelong person re-identification with prototype topology
consistency (abstract 9): S-PTC and CM-PTC (RECON forms), the finetune, joint, feature-KD
and CKA-KD baselines, and ReID retrieval metrics. The Lightning training loop over a task
stream is ``methods.viptc.lifelong`` (imported on its own: Lightning is slow to import)."""

from methods.viptc.losses import (
    batch_hard_triplet,
    cka_kd_loss,
    class_means,
    cmptc_loss,
    feature_kd_loss,
    linear_cka,
    sptc_loss,
    topology,
)
from methods.viptc.retrieval import evaluate_retrieval

__all__ = [
    "batch_hard_triplet", "cka_kd_loss", "class_means", "cmptc_loss", "evaluate_retrieval",
    "feature_kd_loss", "linear_cka", "sptc_loss", "topology",
]
