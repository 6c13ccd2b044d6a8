"""ProtGlycanDock: a model-agnostic protein-glycan pose evaluator and a small docking model
with the two glycan-aware finetuning techniques (topological features, CHI energy loss)."""

from methods.glycandock.evaluation import (
    PoseTopology,
    automorphisms,
    complex_topology,
    dockq_formula,
    dockqc_formula,
    evaluate_files,
    evaluate_pose,
    kabsch,
    symmetric_rmsd,
)
from methods.glycandock.features import glycan_features, tree_distances

__all__ = ["PoseTopology", "automorphisms", "complex_topology", "dockq_formula",
           "dockqc_formula", "evaluate_files", "evaluate_pose", "glycan_features", "kabsch",
           "symmetric_rmsd", "tree_distances"]
