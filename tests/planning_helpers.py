"""Planning test helpers shared by the directsynth test modules."""

from __future__ import annotations

from data.planning import SHIPPED
from methods.directsynth import ground
from methods.directsynth.features import TaskView, task_spec


def shipped_task(domain: str, number: int, split: str = "training"):
    return ground(SHIPPED / domain / "domain.pddl", SHIPPED / domain / split / "easy"
                  / f"p{number:02d}.pddl")


def in_process(program: str, task):
    """A trusted program's batch heuristic without the sandbox (test helper)."""
    namespace: dict = {}
    exec(program, namespace)
    view = TaskView(task_spec(task))
    return lambda states: [float(namespace["heuristic"](task.facts(s), view)) for s in states]
