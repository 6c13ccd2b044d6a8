"""One CPU kernel path on every x86-64 machine, set before numpy or torch load.

torch picks its vectorized kernels (ATen), MKL its GEMM code and oneDNN its ISA by the CPU
it finds: on a machine with AVX-512 a tiny model trains to other weights than on one with
AVX2 only (same seed, same code; measured on cfbeam's tiny-lm: parameter checksum
4869.7373 with AVX-512, 4869.6765 with AVX2), and a few held-out prompts flip. numpy's
OpenBLAS does the same (its kernel for the CPU): sparseshap's sparse decoder chooses a
support along the LASSO path, and a last-bit difference can choose another, so its budget
exponent at seed 0 was 1.1405 with one machine's kernel and 1.1817 with another's. Pinning
all four to AVX2 (OpenBLAS's Haswell kernels), which every x86-64 machine of the last decade
has, makes the same command print the same numbers on any of them. Values already in the
environment win (set ``ATEN_CPU_CAPABILITY=avx512`` etc. for the machine's fastest path);
other architectures ignore these variables.
"""

from __future__ import annotations

import os
import platform

PINNED = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2",
          "OPENBLAS_CORETYPE": "Haswell"}


def pin_cpu_kernels() -> None:
    if platform.machine().lower() in ("x86_64", "amd64"):
        for name, value in PINNED.items():
            os.environ.setdefault(name, value)
