"""Input vectors for quantization experiments: synthetic families and .npy files."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from common.errors import UserError


def unit_vector_families(dim: int, n_random: int, n_sparse: int, sparsity: int,
                         n_basis: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Unit vectors by family: ``random`` (Haar directions) and the adversarial ``basis``
    (e_0, then random e_j), ``sparse`` (+-1 on ``sparsity`` coordinates) and ``constant``
    (1/sqrt(d)). Basis and constant vectors are where a single unrandomized-enough
    rotation is weakest: every coordinate of H D e_j has the same magnitude."""
    gauss = rng.standard_normal((n_random, dim))
    basis = np.zeros((n_basis, dim))
    basis[np.arange(n_basis), np.r_[0, rng.choice(np.arange(1, dim), n_basis - 1,
                                                  replace=False)]] = 1.0
    sparse = np.zeros((n_sparse, dim))
    for row in sparse:
        row[rng.choice(dim, sparsity, replace=False)] = rng.choice([-1.0, 1.0], sparsity)
    families = {"random": gauss, "basis": basis, "sparse": sparse,
                "constant": np.ones((1, dim))}
    return {k: v / np.linalg.norm(v, axis=1, keepdims=True) for k, v in families.items()}


def npy_vectors(path: str, max_rows: int) -> dict[str, np.ndarray]:
    """Rows of a (n, d) .npy file as one family ``npy`` (zero rows dropped)."""
    file = Path(path)
    if not file.is_file():
        raise UserError(f"dataset.path={path} does not exist; give a .npy file of shape (n, d)")
    with file.open("rb") as f:
        header = f.read(6)
    if header != b"\x93NUMPY":
        raise UserError(f"dataset.path={path} is not a .npy file (no NumPy header); save the "
                        "vectors with numpy.save")
    try:
        x = np.load(file, allow_pickle=False)
    except ValueError as err:  # an object array, or a truncated file
        raise UserError(f"dataset.path={path} cannot be read as a numeric array: {err}") from None
    if x.ndim != 2:
        raise UserError(f"{path} has shape {x.shape}; expected (n, d)")
    x = x[np.linalg.norm(x, axis=1) > 0][:max_rows].astype(np.float64)
    return {"npy": x}
