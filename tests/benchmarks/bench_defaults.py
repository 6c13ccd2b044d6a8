"""The slowest defaults: where their time goes. Each runs at its default size, seed 0, from an
empty cache, alone on the machine (one process per core it uses: the one-process papers at
one thread, viptc with its two worker processes); the stage seconds come from the run's
results.json (``ctx.stage``). When the reproduction's seed-0 run of a paper is there
(``outputs/reproduce/<paper>/seed0``, run beside other jobs), the metrics of the run alone
are compared with it: a schedule may change the time, never a number (the wall-clock
metrics, ``time_*`` and ``seconds_*``, aside).
``python tests/benchmarks/bench_defaults.py [paper ...]``."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAPERS = ("viptc", "proteinopd", "cfbeam", "glycandock")
REPRODUCTION = ROOT / "outputs" / "reproduce"


def run_default(key: str, folder: Path) -> tuple[float, dict]:
    """Wall seconds of ``python run.py +paper=<key>`` and its results.json."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "run.py", f"+paper={key}", "threads=1",
                    f"hydra.run.dir={folder / 'run'}", f"paths.cache_dir={folder / 'cache'}"],
                   cwd=ROOT, check=True, capture_output=True)
    wall = time.perf_counter() - start
    return wall, json.loads((folder / "run" / "results.json").read_text())


WALL_CLOCK = ("time_", "seconds_")  # metrics measured in wall time: they move with the machine


def numbers(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if not k.startswith(WALL_CLOCK)}


def same_as_reproduction(key: str, metrics: dict) -> str:
    """How the run's metrics compare with the reproduction's seed 0 of the paper."""
    path = REPRODUCTION / key / "seed0" / "metrics.json"
    if not path.is_file():
        return "no reproduction run of seed 0 to compare with"
    reproduced = numbers(json.loads(path.read_text()))
    ours = numbers(metrics)
    differ = sorted(k for k in reproduced.keys() | ours.keys()
                    if reproduced.get(k) != ours.get(k))
    if differ:
        raise SystemExit(f"{key}: metrics differ from {path}: {', '.join(differ)}")
    return (f"{len(ours)} metrics identical to the reproduction's seed 0 (wall-clock "
            "metrics aside)")


def main(papers: list[str]) -> None:
    for key in papers:
        with tempfile.TemporaryDirectory() as folder:
            wall, result = run_default(key, Path(folder))
            metrics = json.loads((Path(folder) / "run" / "metrics.json").read_text())
        stages = result.get("stage_seconds") or {}
        print(f"{key}: {wall:.0f} s wall, {result['wall_time_s']:.0f} s in the protocol "
              "(seed 0, default size, empty cache, alone)")
        for name, seconds in stages.items():
            print(f"  {name:<45} {seconds:7.1f} s")
        rest = result["wall_time_s"] - sum(stages.values())
        print(f"  {'everything else (data, evaluation, figures)':<45} {rest:7.1f} s")
        print(f"  {same_as_reproduction(key, metrics)}")


if __name__ == "__main__":
    main(sys.argv[1:] or list(PAPERS))
