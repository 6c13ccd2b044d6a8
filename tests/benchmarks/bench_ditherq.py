"""ditherq: per-vector rotation time, a dense d x d rotation (matrix-vector product at batch
1, GEMM above) against one randomized Hadamard transform, forward and inverse, side by side
in one process on one thread. The numpy rows time exactly the code the quantizer and the
default run's ``time_rht_speedup_*`` metrics use; the torch rows time ``fwht_torch``."""

from __future__ import annotations

import os
import platform

import numpy as np
import torch

from methods.ditherq.hadamard import fwht_torch
from methods.ditherq.timing import interleaved_medians, rotation_seconds_per_vector

DIMS = (256, 1024, 4096, 16384)
BATCHES = (1, 16, 256, 1024)


def torch_seconds_per_vector(dim: int, batch: int, repeats: int) -> tuple[float, float]:
    x = torch.randn(batch, dim, dtype=torch.float64)
    dense = torch.randn(dim, dim, dtype=torch.float64)
    signs = torch.sign(torch.randn(dim, dtype=torch.float64))
    medians = interleaved_medians({"dense": lambda: x @ dense,
                                   "rht": lambda: fwht_torch(x * signs) / dim**0.5}, repeats)
    return medians["dense"] / batch, medians["rht"] / batch


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            names = [line.split(":", 1)[1].strip() for line in info
                     if line.startswith("model name")]
    except OSError:
        names = []
    return f"{names[0] if names else platform.processor() or platform.machine()}, " \
           f"{os.cpu_count()} cores"


def blas_name() -> str:
    config = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
    return f"{config.get('name')} {config.get('version')}"


def main() -> None:
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    print(f"# {cpu_name()}, numpy {np.__version__} with "
          f"{blas_name()}, torch {torch.__version__}; threads: torch {torch.get_num_threads()}, "
          "BLAS from OMP_NUM_THREADS/OPENBLAS_NUM_THREADS (make bench sets 1); float64; "
          "microseconds per vector, medians of interleaved repeats")
    print(f"{'d':>6} {'batch':>5} | {'dense':>9} {'RHT fwd':>8} {'RHT inv':>8} {'fwd x':>6}"
          f" {'inv x':>6} | {'torch dense':>11} {'torch RHT':>9} {'x':>6}")
    for d in DIMS:
        for batch in BATCHES:
            if d * d * batch > 4096 * 4096 * 1024:
                continue  # a dense rotation of this size takes minutes on one thread
            repeats = 10 if d < 16384 else 3
            times = rotation_seconds_per_vector(d, repeats, rng, batch)
            t_dense, t_rht = torch_seconds_per_vector(d, batch, repeats)
            print(f"{d:>6} {batch:>5} | {1e6 * times.dense:>9.2f} {1e6 * times.forward:>8.2f} "
                  f"{1e6 * times.inverse:>8.2f} {times.dense / times.forward:>5.1f}x "
                  f"{times.dense / times.inverse:>5.1f}x | {1e6 * t_dense:>11.2f} "
                  f"{1e6 * t_rht:>9.2f} {t_dense / t_rht:>5.1f}x")


if __name__ == "__main__":
    main()
