"""PDDL planning benchmarks: per domain, its domain file and ordered training and test tasks.

Larger test tasks and generated training tasks come from :mod:`data.planning.generators`.

Shipped: the IPC 2023 Learning Track benchmarks (github.com/ipc2023-learning/benchmarks,
commit ae70e8e; ten domains, the training tasks and the easy test tasks, with reference plans)
under ``data/ipc2023-learning/``. ``root`` may name a full clone of that repository (or any
folder with the same layout: ``<domain>/domain.pddl``, ``<domain>/training/<level>/*.pddl``,
``<domain>/testing/<level>/*.pddl``) to use the medium and hard test tasks.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from common.errors import UserError
from data.planning.generators import GENERATORS, LARGER_SIZES, SHIPPED_LARGER, generate

SHIPPED = Path(__file__).parent.parent / "ipc2023-learning"
IPC2023_DOMAINS = ("blocksworld", "childsnack", "ferry", "floortile", "miconic", "rovers",
                   "satellite", "sokoban", "spanner", "transport")


@dataclass
class PlanningDomain:
    name: str
    domain_file: Path
    training: list[Path]
    testing: list[Path]


def planning_domains(root: str | None, domains, training_level: str, training_tasks: int,
                     test_level: str, test_tasks: int) -> list[PlanningDomain]:
    """The first ``training_tasks`` training and ``test_tasks`` test tasks of each domain, in
    file-name order (the IPC files grow in size with their number)."""
    base = Path(root).expanduser() if root else SHIPPED
    if not base.is_dir():
        raise UserError(f"planning benchmark folder {base} does not exist")
    out = []
    for name in domains:
        folder = base / name
        if not (folder / "domain.pddl").exists():
            known = sorted(p.name for p in base.iterdir() if (p / "domain.pddl").exists())
            raise UserError(f"no domain '{name}' under {base}; known: {', '.join(known)}")
        training = sorted((folder / "training" / training_level).glob("*.pddl"))
        testing = sorted((folder / "testing" / test_level).glob("*.pddl"))
        if not training or not testing:
            raise UserError(f"{folder}: no tasks under training/{training_level} or "
                            f"testing/{test_level} (the shipped copy has easy only)")
        out.append(PlanningDomain(name, folder / "domain.pddl", training[:training_tasks],
                                  testing[:test_tasks]))
    return out


def larger_tasks(domain: PlanningDomain, seed: int, folder: Path) -> list[Path]:
    """Test tasks larger than every shipped training and easy test task the run uses: the
    domain's generator at :data:`LARGER_SIZES` (written to ``folder``), else the largest
    shipped easy test tasks."""
    if domain.name in GENERATORS:
        return generate(domain.name, LARGER_SIZES[domain.name], seed, folder / domain.name)
    shipped = domain.domain_file.parent / "testing" / "easy"
    return [shipped / name for name in SHIPPED_LARGER if (shipped / name).exists()]


def generated_training(domain: PlanningDomain, size: int, count: int, seed: int,
                       folder: Path) -> list[Path]:
    """``count`` generated training tasks of size ``size``."""
    if domain.name not in GENERATORS:
        raise UserError(f"dataset.training_set=generated: no generator for {domain.name}; "
                        f"domains with one: {', '.join(sorted(GENERATORS))}")
    return generate(domain.name, [size] * count, seed, folder / domain.name)
