"""``make plan``: print the plan of one paper's preset, or write every paper's plan table.

    python -m experiments.plan +paper=mpopd scale=paper --gpu h100-80gb [overrides]
    python -m experiments.plan --all --gpu h100-80gb [--markdown docs/paper_scale.md]

Exit code 1 with one line when the plan does not fit the GPU (and what would make it fit).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from common.errors import UserError
from experiments.claims.papers import papers
from experiments.plan.estimate import GPUS, describe, make_plan, remedy


def compose(argv: list[str], stand_in_data: bool = False):
    """The typed config ``run.py`` would run with these arguments (nothing is written);
    ``stand_in_data``: a placeholder for each data folder the preset requires (a plan
    reads no data), else one line naming them."""
    from omegaconf import OmegaConf

    from experiments.runner.cli import check_arguments, check_composition, scale_override
    from experiments.schemas import register_schemas

    register_schemas()
    keys = check_arguments(argv)
    # one line for a bad key or value, or for missing data unless it is stood in for
    cfg = check_composition(scale_override(argv, keys), keys, require_data=not stand_in_data)
    for key in OmegaConf.missing_keys(cfg):
        OmegaConf.update(cfg, key, "/path/to/data")
    return OmegaConf.to_object(cfg)


def table(gpu: str) -> str:
    """Every paper's ``scale=paper`` plan on ``gpu`` as a markdown table."""
    rows = ["| paper | GPUs | models (role, parameters) | GiB per GPU | GPU-hours | fits |",
            "|---|---|---|---|---|---|"]
    for key in list(papers()):
        cfg = compose([f"+paper={key}", "scale=paper"], stand_in_data=True)
        plan = cfg.paper.plan
        if not plan.workloads:
            rows.append(f"| {key} | - | no neural model: {plan.note} | - | - | - |")
            continue
        p = make_plan(cfg, gpu)
        models = "<br>".join(f"{e.model} ({e.role}, {e.parameters / 1e9:.2f}B)"
                             for e in p.estimates)
        rows.append(f"| {key} | {p.setup.gpus} x {gpu} | {models} | {p.peak_gib:.0f} | "
                    f"{p.hours * p.setup.gpus:.1f} | {'yes' if p.fits else remedy(cfg, p)} |")
    return "\n".join(rows)


TABLE_START, TABLE_END = "<!-- plan table -->", "<!-- end of plan table -->"


def write_doc(path: Path, gpu: str) -> str:
    """Replace the plan table of ``path`` (between its markers) with the presets' plans."""
    text = path.read_text()
    head, _, rest = text.partition(TABLE_START)
    _, _, tail = rest.partition(TABLE_END)
    if not rest:
        raise UserError(f"{path} has no {TABLE_START} ... {TABLE_END} markers")
    text = (f"{head}{TABLE_START}\nGPU: {gpu}\n\n{table(gpu)}\n{TABLE_END}{tail}")
    path.write_text(text)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.plan")
    parser.add_argument("--gpu", default="h100-80gb", help=", ".join(GPUS))
    parser.add_argument("--all", action="store_true", help="every paper's scale=paper plan")
    parser.add_argument("--markdown", help="with --all: write the table to this file")
    parser.add_argument("overrides", nargs="*", help="+paper=<key> scale=paper ...")
    args = parser.parse_args(argv)
    try:
        if args.all:
            print(write_doc(Path(args.markdown), args.gpu) if args.markdown
                  else table(args.gpu))
            return 0
        cfg = compose(args.overrides)
        if cfg.paper.plan is not None and not cfg.paper.plan.workloads:
            print(f"{cfg.paper.key}: no neural model at this scale; {cfg.paper.plan.note}")
            return 0
        plan = make_plan(cfg, args.gpu)
        print(describe(plan))
        if not plan.fits:
            print(f"error: {cfg.paper.key} does not fit {plan.setup.gpus} x {args.gpu}: "
                  f"{plan.peak_gib:.0f} GiB per GPU; try {remedy(cfg, plan)}",
                  file=sys.stderr)
            return 1
        return 0
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
