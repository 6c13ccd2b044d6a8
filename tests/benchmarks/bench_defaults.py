"""The slowest defaults: where their time goes. Each runs at its default size, seed 0, from an
empty cache, alone on the machine (one process per core it uses: the one-process papers at
one thread, viptc with its two worker processes); the stage seconds come from the run's
results.json (``ctx.stage``). ``python tests/benchmarks/bench_defaults.py [paper ...]``."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAPERS = ("viptc", "proteinopd", "cfbeam", "glycandock")


def run_default(key: str, folder: Path) -> tuple[float, dict]:
    """Wall seconds of ``python run.py +paper=<key>`` and its results.json."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "run.py", f"+paper={key}", "threads=1",
                    f"hydra.run.dir={folder / 'run'}", f"paths.cache_dir={folder / 'cache'}"],
                   cwd=ROOT, check=True, capture_output=True)
    wall = time.perf_counter() - start
    return wall, json.loads((folder / "run" / "results.json").read_text())


def main(papers: list[str]) -> None:
    for key in papers:
        with tempfile.TemporaryDirectory() as folder:
            wall, result = run_default(key, Path(folder))
        stages = result.get("stage_seconds") or {}
        print(f"{key}: {wall:.0f} s wall, {result['wall_time_s']:.0f} s in the protocol "
              "(seed 0, default size, empty cache, alone)")
        for name, seconds in stages.items():
            print(f"  {name:<45} {seconds:7.1f} s")
        rest = result["wall_time_s"] - sum(stages.values())
        print(f"  {'everything else (data, evaluation, figures)':<45} {rest:7.1f} s")


if __name__ == "__main__":
    main(sys.argv[1:] or list(PAPERS))
