"""A synthesized program on held-out test tasks: proven directness, hill climbing without
search and GBFS (one sandboxed worker over all tasks), the check that h* itself is direct
where the state space is small enough to enumerate, and the reference plan length of GBFS
with h_FF."""

from __future__ import annotations

import random

from methods.directsynth.features import TaskView, task_spec
from methods.directsynth.proposers import format_counterexample
from methods.directsynth.search import (
    check_direct,
    gbfs,
    hill_climb,
    perfect_heuristic,
    table_heuristic,
)
from methods.directsynth.synthesis import Limits, outcome_text, run_over_tasks


def evaluate_on_test(program: str, tasks, limits: Limits, max_steps: int,
                     search: bool = True) -> list[dict]:
    """Directness verdict, hill climbing and (``search``) GBFS of one program on each test
    task."""
    rows = []

    def step(task, h) -> bool:
        direct = check_direct(task, h, limits.max_states)
        h.confirm(direct.evidence)  # the verdict's values, again in a fresh process
        climb = hill_climb(task, h, max_steps)
        solved = search and gbfs(task, h, limits.max_expansions).solved
        cex = direct.counterexample
        rows.append({"task": task.name, "verdict": direct.verdict,
                     "counterexample": format_counterexample(cex).replace("\n", " | ")
                     if cex else "",
                     "hill_climb_solved": climb.solved,
                     "hill_climb_plan": len(climb.plan) if climb.solved else None,
                     "gbfs_solved": solved})
        return False

    run = run_over_tasks(program, tasks, limits, step)
    if run.error:
        done = set() if run.void else {r["task"] for r in rows}
        rows = [r for r in rows if r["task"] in done]
        rows += [{"task": t.name, "verdict": outcome_text(run.error, run.kind),
                  "counterexample": "",
                  "hill_climb_solved": False,
                  "hill_climb_plan": None, "gbfs_solved": False}
                 for t in tasks if t.name not in done]
    return rows


def perfect_is_direct(tasks, max_states: int, max_steps: int, rng: random.Random) -> list[dict]:
    """h* on the test tasks whose reachable space has at most ``max_states`` states: direct,
    and randomized improving hill climbing follows an optimal plan."""
    rows = []
    for task in tasks:
        values = perfect_heuristic(task, max_states)
        if values is None or values[task.init] == float("inf"):
            continue
        h = table_heuristic(values)
        climb = hill_climb(task, h, max_steps, rng)
        rows.append({"task": task.name, "direct": check_direct(task, h, max_states).direct,
                     "optimal_climb": climb.solved and len(climb.plan) == values[task.init]})
    return rows


def reference_plan_length(task, max_expansions: int) -> int | None:
    """The plan length of greedy best-first search with h_FF (trusted, in this process), or
    None when it does not finish within ``max_expansions``."""
    view = TaskView(task_spec(task))
    result = gbfs(task, lambda states: [view.h_ff(task.facts(s)) for s in states],
                  max_expansions)
    return len(result.plan) if result.solved else None


def direct_or_climbs(rows: list[dict]) -> float:
    """The fraction of test tasks proven direct or solved by hill climbing alone (rows of
    :func:`evaluate_on_test`)."""
    return sum(r["verdict"] == "direct" or r["hill_climb_solved"] for r in rows) / len(rows)
