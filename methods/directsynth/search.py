"""Search over a grounded task with a heuristic given as a batch function: the state space,
the perfect heuristic h*, greedy best-first search, hill climbing and the directness check.

A heuristic is ``h(states: list[int]) -> list[float]`` (``inf`` for dead ends). Search
functions evaluate every state at most once and report how many states they evaluated.
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from methods.directsynth.strips import Task

INF = float("inf")
Heuristic = Callable[[Sequence[int]], list[float]]


class CachedHeuristic:
    """Memoises a batch heuristic per state and counts the states it really evaluated."""

    def __init__(self, h: Heuristic):
        self.h, self.values, self.evaluations = h, {}, 0

    def __call__(self, states: Sequence[int]) -> list[float]:
        new = [s for s in dict.fromkeys(states) if s not in self.values]
        if new:
            self.values.update(zip(new, self.h(new), strict=True))
            self.evaluations += len(new)
        return [self.values[s] for s in states]


# ---------------------------------------------------------------------------- state space
def state_space(task: Task, max_states: int) -> dict[int, list[tuple[str, int]]] | None:
    """Every reachable state with its transitions, or None beyond ``max_states``."""
    graph, queue = {task.init: None}, deque([task.init])
    while queue:
        s = queue.popleft()
        graph[s] = [(op.name, t) for op, t in task.successors(s)]
        for _, t in graph[s]:
            if t not in graph:
                if len(graph) >= max_states:
                    return None
                graph[t] = None
                queue.append(t)
    return graph


def perfect_heuristic(task: Task, max_states: int) -> dict[int, float] | None:
    """h* (unit costs) of every reachable state by backward BFS from the goal states, or None
    when the reachable space exceeds ``max_states``."""
    graph = state_space(task, max_states)
    if graph is None:
        return None
    parents: dict[int, list[int]] = {s: [] for s in graph}
    for s, edges in graph.items():
        for _, t in edges:
            parents[t].append(s)
    dist = {s: 0.0 for s in graph if task.is_goal(s)}
    queue = deque(dist)
    while queue:
        t = queue.popleft()
        for s in parents[t]:
            if s not in dist:
                dist[s] = dist[t] + 1
                queue.append(s)
    return {s: dist.get(s, INF) for s in graph}


def table_heuristic(values: dict[int, float]) -> Heuristic:
    return lambda states: [values[s] for s in states]


# ---------------------------------------------------------------------------- searches
@dataclass
class SearchResult:
    solved: bool
    plan: list[str] = field(default_factory=list)
    expansions: int = 0
    evaluations: int = 0
    reason: str = ""  # why an unsolved search stopped


def _plan(parent: dict, state: int) -> list[str]:
    plan = []
    while parent[state] is not None:
        state, name = parent[state]
        plan.append(name)
    return plan[::-1]


def gbfs(task: Task, h: Heuristic, max_expansions: int) -> SearchResult:
    """Greedy best-first search (ties by insertion order), states skipped when h is inf."""
    cached = CachedHeuristic(h)
    parent = {task.init: None}
    h0 = cached([task.init])[0]
    queue, tick, expansions = [(h0, 0, task.init)], 1, 0
    if h0 == INF:
        queue = []
    while queue:
        _, _, s = heapq.heappop(queue)
        if task.is_goal(s):
            return SearchResult(True, _plan(parent, s), expansions, cached.evaluations)
        if expansions >= max_expansions:
            return SearchResult(False, [], expansions, cached.evaluations, "expansion limit")
        expansions += 1
        successors = [(op, t) for op, t in task.successors(s) if t not in parent]
        for (op, t), value in zip(successors, cached([t for _, t in successors]), strict=True):
            if t in parent:  # the same state twice among the successors
                continue
            parent[t] = (s, op.name)
            if value < INF:
                heapq.heappush(queue, (value, tick, t))
                tick += 1
    return SearchResult(False, [], expansions, cached.evaluations, "exhausted")


def hill_climb(task: Task, h: Heuristic, max_steps: int,
               rng: random.Random | None = None) -> SearchResult:
    """Hill climbing without search: from the current state move to a successor with strictly
    lower h (the best one, or a uniformly random improving one when ``rng`` is given); fail
    when no successor improves."""
    cached = CachedHeuristic(h)
    s, value, plan = task.init, cached([task.init])[0], []
    for _ in range(max_steps):
        if task.is_goal(s):
            return SearchResult(True, plan, len(plan), cached.evaluations)
        successors = task.successors(s)
        values = cached([t for _, t in successors])
        better = [(v, op, t) for (op, t), v in zip(successors, values, strict=True) if v < value]
        if not better:
            return SearchResult(False, plan, len(plan), cached.evaluations, "no improving move")
        v, op, t = rng.choice(better) if rng else min(better, key=lambda x: x[0])
        s, value = t, v
        plan.append(op.name)
    if task.is_goal(s):
        return SearchResult(True, plan, len(plan), cached.evaluations)
    return SearchResult(False, plan, len(plan), cached.evaluations, "step limit")


# ---------------------------------------------------------------------------- directness
@dataclass
class Counterexample:
    """A reachable non-goal state of the improving closure without an improving successor."""

    task: str
    state: int
    h: float
    successors: list[tuple[str, float]]  # (action, h of its successor)
    path: list[str]  # improving actions from the initial state
    facts: list[tuple[str, ...]] = field(default_factory=list)


@dataclass
class Directness:
    verdict: str  # "direct" (whole closure explored), "not direct", "unknown" (limit hit)
    counterexample: Counterexample | None
    states: int  # states of the improving closure expanded
    evaluations: int
    # the values the verdict rests on (state -> h): each expanded state's, its best
    # successor's, and a counterexample's successors'
    evidence: dict[int, float] = field(default_factory=dict)

    @property
    def direct(self) -> bool:
        return self.verdict == "direct"


def check_direct(task: Task, h: Heuristic, max_states: int) -> Directness:
    """Decide directness of ``h`` on ``task``: explore the closure R of the initial state under
    strictly improving transitions breadth-first and stop at the first non-goal state of R
    without an improving successor. ``h(s0) = inf`` counts as a violation at s0."""
    cached = CachedHeuristic(h)
    parent = {task.init: None}
    queue, expanded, evidence = deque([task.init]), 0, {}
    while queue:
        s = queue.popleft()
        if task.is_goal(s):
            continue
        value = cached([s])[0]
        successors = task.successors(s)
        values = cached([t for _, t in successors])
        evidence[s] = value
        if value == INF or not any(v < value for v in values):
            evidence.update((t, v) for (_, t), v in zip(successors, values, strict=True))
            cex = Counterexample(task.name, s, value,
                                 [(op.name, v) for (op, _), v in
                                  zip(successors, values, strict=True)],
                                 _plan(parent, s), sorted(task.facts(s)))
            return Directness("not direct", cex, expanded, cached.evaluations, evidence)
        best = min(range(len(values)), key=values.__getitem__)
        evidence[successors[best][1]] = values[best]
        expanded += 1
        if expanded > max_states:
            return Directness("unknown", None, expanded, cached.evaluations, evidence)
        for (op, t), v in zip(successors, values, strict=True):
            if v < value and t not in parent:
                parent[t] = (s, op.name)
                queue.append(t)
    return Directness("direct", None, expanded, cached.evaluations, evidence)
