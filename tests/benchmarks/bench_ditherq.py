"""ditherq: per-vector rotation time, dense d x d rotation vs one RHT, side by side in one
process on one thread, at batch 1 (matrix-vector) and batch 256 (GEMM vs the Kronecker-GEMM
Hadamard transform), in numpy and in torch."""

from __future__ import annotations

import numpy as np
import torch

from methods.ditherq.hadamard import fwht_torch
from methods.ditherq.timing import median_seconds, rotation_seconds_per_vector


def torch_seconds_per_vector(dim: int, batch: int, repeats: int) -> tuple[float, float]:
    x = torch.randn(batch, dim, dtype=torch.float64)
    dense = torch.randn(dim, dim, dtype=torch.float64)
    signs = torch.sign(torch.randn(dim, dtype=torch.float64))
    t_dense = median_seconds(lambda: x @ dense, repeats)
    t_rht = median_seconds(lambda: fwht_torch(x * signs) / dim**0.5, repeats)
    return t_dense / batch, t_rht / batch


def main() -> None:
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    print(f"{'d':>6} {'batch':>6} {'numpy dense us':>15} {'numpy RHT us':>13} {'speed-up':>9}"
          f" {'torch dense us':>15} {'torch RHT us':>13} {'speed-up':>9}")
    for d in (256, 1024, 4096, 16384):
        for batch in (1, 256):
            if d == 16384 and batch == 256:
                continue  # a 16384^2 float64 GEMM of 256 rows: minutes on one thread
            repeats = 10 if d < 16384 else 3
            n_dense, n_rht = rotation_seconds_per_vector(d, repeats, rng, batch)
            t_dense, t_rht = torch_seconds_per_vector(d, batch, repeats)
            print(f"{d:>6} {batch:>6} {1e6 * n_dense:>15.2f} {1e6 * n_rht:>13.2f} "
                  f"{n_dense / n_rht:>8.1f}x {1e6 * t_dense:>15.2f} {1e6 * t_rht:>13.2f} "
                  f"{t_dense / t_rht:>8.1f}x")


if __name__ == "__main__":
    main()
