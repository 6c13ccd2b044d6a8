"""ditherq: per-vector rotation time, dense d x d product vs one RHT, side by side."""

from __future__ import annotations

import numpy as np

from methods.ditherq.timing import rotation_seconds_per_vector


def main() -> None:
    rng = np.random.default_rng(0)
    print(f"{'d':>6} {'dense us':>10} {'RHT us':>10} {'speed-up':>9}")
    for d in (256, 1024, 4096, 16384):
        t_dense, t_rht = rotation_seconds_per_vector(d, repeats=10 if d < 16384 else 3, rng=rng)
        print(f"{d:>6} {1e6 * t_dense:>10.1f} {1e6 * t_rht:>10.1f} {t_dense / t_rht:>8.1f}x")


if __name__ == "__main__":
    main()
