"""Where a paper's default spends its time: ``py-spy`` samples ``run.py +paper=<key>`` (seed 0,
default size, empty cache; its child processes too, except where they run in a sandbox) and
the collapsed stacks are summarised as the functions with the most samples, inclusive (the
function or anything it calls) and exclusive (its own lines).

    python tests/benchmarks/profile_defaults.py summarize <profile.raw> [--top 25]
    python tests/benchmarks/profile_defaults.py record <paper> <folder>

``record`` needs py-spy (the dev extra installs it); its summaries are committed under
docs/bench/profiles/."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# a frame of py-spy's raw format: "function (file:line)"
_FRAME = re.compile(r"^(?P<function>.*) \((?P<file>[^:()]+)(?::\d+)?\)$")
NO_SUBPROCESSES = ("directsynth",)  # its programs run in a sandbox py-spy cannot attach to


def frame_name(frame: str) -> str:
    """``function (file)`` without the line number: samples of one function add up."""
    match = _FRAME.match(frame.strip())
    if match is None:
        return frame.strip()
    path = match["file"]
    for marker in ("site-packages/", "/lib/python3"):
        if marker in path:
            path = path.split(marker, 1)[1]
    return f"{match['function']} ({path.removeprefix(str(ROOT) + '/')})"


def summarize(raw: Path, top: int = 25) -> str:
    """The ``top`` functions by inclusive and by exclusive samples, as text."""
    inclusive, exclusive, total = Counter(), Counter(), 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = [frame_name(f) for f in stack.split(";")[1:]]  # [0]: the process
        total += int(count)
        for name in set(frames):
            inclusive[name] += int(count)
        if frames:
            exclusive[frames[-1]] += int(count)
    lines = [f"{total} samples"]
    for title, counter in (("inclusive", inclusive), ("exclusive", exclusive)):
        lines.append(f"\ntop {top} functions, {title} share of the samples:")
        lines += [f"  {100 * n / max(total, 1):5.1f}%  {name}"
                  for name, n in counter.most_common(top)]
    return "\n".join(lines) + "\n"


def record(key: str, folder: Path, rate: int = 40) -> float:
    """Run the paper's default under py-spy into ``folder``; returns its wall seconds."""
    folder.mkdir(parents=True, exist_ok=True)
    command = ["py-spy", "record", "--nonblocking", "-r", str(rate), "-f", "raw",
               "-o", str(folder / "profile.raw")]
    if key not in NO_SUBPROCESSES:
        command.append("--subprocesses")
    start = time.perf_counter()
    with open(folder / "run.log", "w") as log:
        subprocess.run([*command, "--", sys.executable, "run.py", f"+paper={key}",
                        f"hydra.run.dir={folder / 'run'}", f"paths.cache_dir={folder / 'cache'}"],
                       cwd=ROOT, check=True, stdout=log, stderr=subprocess.STDOUT)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("summarize")
    s.add_argument("raw", type=Path)
    s.add_argument("--top", type=int, default=25)
    r = sub.add_parser("record")
    r.add_argument("paper")
    r.add_argument("folder", type=Path)
    args = parser.parse_args()
    if args.command == "summarize":
        print(summarize(args.raw, args.top), end="")
    else:
        wall = record(args.paper, args.folder)
        print(f"{args.paper}: {wall:.0f} s wall under py-spy")
        print(summarize(args.folder / "profile.raw"), end="")


if __name__ == "__main__":
    main()
