"""Generalized potential heuristics over description-logic features as a proposer of the
directness loop (Francès, Corrêa, Geissmann & Pommerening, *Generalized Potential Heuristics
for Classical Planning*, IJCAI 2019).

- **Features**: the number of objects in a concept (:mod:`methods.directsynth.features`
  documents the language), built from the domain's predicates and their goal versions up to
  a complexity bound, plus the open goals of each goal predicate, the nullary predicates and
  (``relaxed``) the delete-relaxation estimates h_add, h_max, h_FF and landmarks. Relaxed
  dead ends are infinite in every program (its first line), so they never count as
  improving.
  Concepts whose denotations are equal on every sample state, and features whose counts are
  equal (or constant) on every sample state, are pruned; the simplest one is kept.
- **Sample**: the complete state spaces of the smallest training tasks, with h*, up to
  ``sample_states`` states. Each alive non-goal state should have an alive successor whose
  potential is at least 1 lower (descending and dead-end avoiding); a state that no weights
  can satisfy costs a penalty instead of making the program infeasible.
- **Counterexamples**: each one adds the constraint of the loop: some step of its improving
  path does not improve, or its state gets an improving successor.
- **Weights**: integers in ``[-max_weight, max_weight]`` minimising the complexity-weighted L1
  norm (HiGHS through scipy), so that simple features are preferred. A solve stops after
  ``node_limit`` branch-and-bound nodes (the best weights found so far): a work limit, so
  the same run gives the same programs on any machine; ``time_limit`` is a safety net only.

Without feedback (the sample-and-select baseline) the first draw is the loop's first program
(the weights that fit the sample); the next draws are seeded random sparse programs of the
same features (one to ``max_terms`` features, simpler features likelier, weights from
``weights``), since a solve per draw would give the same program again. The program is
emitted as ``heuristic(state, task)`` text and runs in the sandbox like any other.
"""

from __future__ import annotations

import copy
import itertools

import numpy as np

from methods.directsynth.features import TaskView, construct, primitive, task_spec
from methods.directsynth.proposers import (
    REACHABILITY,
    Feature,
    counterexample_options,
    replay,
    solve_weights,
    weighted_sum,
)
from methods.directsynth.search import Counterexample, perfect_heuristic, state_space
from methods.directsynth.strips import Task

INF = float("inf")
RELAXED_COMPLEXITY = 2  # h_add, h_max, h_FF, landmarks cost like a two-part concept
SAMPLE_PENALTY = 1.0  # a violated sample state costs as much as weight 1 on every feature
DEAD_END_GUARD = '    if task.h_max(state) == float("inf"):\n        return float("inf")\n'


def render(expr: tuple) -> str:
    return "(" + " ".join(render(a) if isinstance(a, tuple) else a for a in expr) + ")"


def primitives(tasks: list[Task]) -> tuple[list[tuple], list[tuple]]:
    """Primitive concepts and roles of the domain: the top concept, the types, and each
    argument (pair of arguments) of each predicate and of each goal predicate."""
    arity: dict[str, int] = {}
    goal_arity: dict[str, int] = {}
    types: set[str] = set()
    for task in tasks:
        for atom in [*task.atoms, *task.static]:
            arity[atom[0]] = len(atom) - 1
        for i, atom in enumerate(task.atoms):
            if task.goal >> i & 1:
                goal_arity[atom[0]] = len(atom) - 1
        types.update(t for t, names in task.objects.items() if names)
    concepts = [("top",)] + [("type", t) for t in sorted(types)]
    roles = []
    for source, table in (("pred", arity), ("goal", goal_arity)):
        for p, n in sorted(table.items()):
            concepts += [(source, p, str(i)) for i in range(n)]
            roles += [(source, p, str(i), str(j)) for i, j in itertools.combinations(range(n), 2)]
    return concepts, roles


class SampleState:
    """A state of a training task with its facts, h* and alive successors."""

    def __init__(self, task: Task, state: int, value: float, successors: list[int]):
        self.task, self.state, self.value, self.successors = task, state, value, successors
        self.facts = task.facts(state)


def sample_states(tasks: list[Task], max_states: int) -> list[SampleState]:
    """The complete state spaces (with h*) of the largest training tasks that fit in
    ``max_states`` states together (more objects show more of the domain's structure);
    when even the smallest is larger, the first ``max_states`` states of its breadth-first
    order without h* (usable for pruning, not as constraints)."""
    out: list[SampleState] = []
    for task in sorted(tasks, key=lambda t: (len(t.atoms), len(t.operators)), reverse=True):
        room = max_states - len(out)
        if room <= 0:
            break
        values = perfect_heuristic(task, room)
        if values is None:
            continue
        graph = state_space(task, room)
        out += [SampleState(task, s, values[s], [t for _, t in graph[s]]) for s in graph]
    if not out:
        task = min(tasks, key=lambda t: len(t.atoms))
        seen, frontier = [task.init], [task.init]
        while frontier and len(seen) < max_states:
            frontier = [t for s in frontier for _, t in task.successors(s)]
            for t in frontier:
                if t not in seen and len(seen) < max_states:
                    seen.append(t)
        out = [SampleState(task, s, float("nan"), []) for s in seen]
    return out


class ConceptGrammar:
    """Concepts and roles built bottom-up by size, each from its parts' denotations on every
    sample state; an expression with the same denotations as a smaller one is dropped."""

    def __init__(self, samples: list[SampleState], views: dict[str, TaskView]):
        self.concepts, self.roles = primitives(
            list({s.task.name: s.task for s in samples}.values()))
        self.contexts = []  # per sample state: universe, facts and goals by predicate, types
        for s in samples:
            view = views[s.task.name]
            facts: dict[str, list] = {}
            for fact in s.facts | view.static:
                facts.setdefault(fact[0], []).append(fact)
            goals: dict[str, list] = {}
            for goal in view.goals:
                goals.setdefault(goal[0], []).append(goal)
            self.contexts.append((view.universe, facts, goals, view.objects))
        self.denoted: dict[tuple, tuple] = {}
        self.by_size: dict[int, list[tuple]] = {}
        self.role_size: dict[int, list[tuple]] = {}
        self.seen: set = set()

    def leaf(self, expr: tuple) -> tuple:
        op, args = expr[0], expr[1:]
        if op == "top":
            return tuple(c[0] for c in self.contexts)
        if op == "type":
            return tuple(frozenset(c[3].get(args[0], ())) for c in self.contexts)
        return tuple(primitive((c[1] if op == "pred" else c[2]).get(args[0], ()), args[1:])
                     for c in self.contexts)

    def build(self, op: str, *parts) -> tuple:
        return tuple(construct(op, c[0], [self.denoted[p][i] for p in parts])
                     for i, c in enumerate(self.contexts))

    def keep(self, expr: tuple, value: tuple, table: dict, size: int):
        key = (table is self.role_size, value)  # a role and a concept may both be empty
        if key not in self.seen:
            self.seen.add(key)
            self.denoted[expr] = value
            table.setdefault(size, []).append(expr)

    def ensure(self, expr: tuple):
        """Denotations of a goal twin, also when it was dropped as a duplicate."""
        if expr not in self.denoted:
            if expr[0] in ("pred", "goal"):
                self.denoted[expr] = self.leaf(expr)
            else:
                self.ensure(expr[1])
                self.denoted[expr] = self.build(expr[0], expr[1])

    def candidates(self, size: int) -> list[tuple]:
        """Concepts of ``size`` from the kept smaller ones: (not C), (and C D), (some R C),
        (all R C), and (equal R R_goal)."""
        concepts, roles = self.by_size, self.role_size
        out = [("not", c) for c in concepts.get(size - 1, [])]
        for i in range(1, size - 1):
            j = size - 1 - i
            if i == j:
                out += [("and", c, d) for c, d in itertools.combinations(concepts.get(i, []), 2)]
            elif i < j:
                out += [("and", c, d) for c in concepts.get(i, []) for d in concepts.get(j, [])]
            out += [(op, r, c) for r in roles.get(i, []) for c in concepts.get(j, [])
                    for op in ("some", "all")]
        if size % 2:
            for r in roles.get((size - 1) // 2, []):
                twin = _goal_twin(r)
                if twin is not None:
                    self.ensure(twin)
                    out.append(("equal", r, twin))
        return out

    def features(self, max_complexity: int) -> tuple[list[Feature], np.ndarray]:
        """Counting features of the concepts up to ``max_complexity``, one per distinct
        vector of counts on the sample (the simplest concept of each), constant ones left
        out, and their counts (sample x feature)."""
        for expr in self.concepts:
            self.keep(expr, self.leaf(expr), self.by_size, 1)
        for expr in self.roles:
            self.keep(expr, self.leaf(expr), self.role_size, 1)
        for r in self.role_size.get(1, []):
            for op in ("inverse", "plus"):
                self.keep((op, r), self.build(op, r), self.role_size, 2)
        for size in range(2, max_complexity + 1):
            for expr in self.candidates(size):
                self.keep(expr, self.build(*expr), self.by_size, size)
        features, columns = [], {}
        for size in sorted(self.by_size):
            for expr in self.by_size[size]:
                counts = tuple(len(d) for d in self.denoted[expr])
                if len(set(counts)) > 1 and counts not in columns:
                    columns[counts] = len(features)
                    features.append(Feature("concept", render(expr), size))
        matrix = np.array(list(columns), dtype=float).T.reshape(len(self.contexts), -1)
        return features, matrix


def _goal_twin(role: tuple) -> tuple | None:
    """The goal version of a role built from a fluent predicate, for ``(equal R R_goal)``."""
    if role[0] == "pred":
        return ("goal", *role[1:])
    if role[0] in ("inverse", "plus") and role[1][0] == "pred":
        return (role[0], ("goal", *role[1][1:]))
    return None


class PotentialProposer:
    """Integer-weighted sums of counting features (module docstring); ``propose`` has the
    proposer interface of :mod:`methods.directsynth.proposers`."""

    def __init__(self, tasks: list[Task], max_complexity: int = 5, sample_size: int = 200,
                 max_features: int = 150, max_weight: int = 10, seed: int = 0,
                 time_limit: float = 30.0, max_terms: int = 3, weights=(1, 2, 3, -1, -2),
                 relaxed: bool = True, node_limit: int = 1):
        if max_complexity < 1:
            raise ValueError(f"max_complexity must be at least 1, not {max_complexity}")
        self.max_weight, self.time_limit, self.node_limit = max_weight, time_limit, node_limit
        self.max_terms, self.weights = max_terms, tuple(weights)
        self.views = {t.name: TaskView(task_spec(t)) for t in tasks}
        self.samples = sample_states(tasks, sample_size)
        self.hstar = {(s.task.name, s.state): s.value for s in self.samples}
        goal_predicates = sorted({t.atoms[i][0] for t in tasks for i in range(len(t.atoms))
                                  if t.goal >> i & 1})
        nullary = sorted({a[0] for t in tasks for a in t.atoms if len(a) == 1})
        simple = ([Feature(name, complexity=RELAXED_COMPLEXITY)
                   for name in (REACHABILITY if relaxed else ())]
                  + [Feature("goals_left", p) for p in goal_predicates]
                  + [Feature("count", p) for p in nullary])
        concepts, counts = ConceptGrammar(self.samples, self.views).features(max_complexity)
        self.features = (simple + concepts)[:max_features]
        kept = len(self.features) - len(simple)
        self.rows: dict[tuple[str, int], np.ndarray] = {}
        for s, row in zip(self.samples, counts[:, :kept], strict=True):
            view = self.views[s.task.name]
            if view.h_max(s.facts) == INF:
                row = np.full(len(self.features), INF)
            else:
                row = np.concatenate([[f.value(view, s.facts) for f in simple], row])
            self.rows[(s.task.name, s.state)] = row
        self.seed, self.rng = seed, np.random.default_rng(seed)
        self.feature_evaluations = len(self.samples)  # feature vectors the proposer computed itself
        self.sample_blocks, self.sample_counts = self._sample_blocks()
        self.blocks: list[list] = []  # one per counterexample
        self.feedback_seen, self.draws = 0, 0

    def fresh(self) -> PotentialProposer:
        """A proposer with the same features, sample and seed and no feedback yet (the
        baseline's, without building the grammar again)."""
        other = copy.copy(self)
        other.rows, other.blocks = dict(self.rows), []
        other.rng = np.random.default_rng(self.seed)
        other.feedback_seen, other.draws = 0, 0
        return other

    # ------------------------------------------------------------------ feature rows
    def row(self, task: Task, state: int) -> np.ndarray:
        key = (task.name, state)
        if key not in self.rows:
            view = self.views.get(task.name)
            if view is None:
                view = self.views[task.name] = TaskView(task_spec(task))
            facts = task.facts(state)
            if view.h_max(facts) == INF:
                values = np.full(len(self.features), INF)
            else:
                values = np.array([f.value(view, facts) for f in self.features], dtype=float)
            self.rows[key] = values
            self.feature_evaluations += 1
        return self.rows[key]

    def _sample_blocks(self) -> tuple[list[list], np.ndarray]:
        """Each alive non-goal sample state has an alive successor at least 1 lower: one
        block per distinct set of feature changes, weighted by how many states share it
        (symmetric states give the same block)."""
        blocks: dict[frozenset, list] = {}
        for s in self.samples:
            if not 0 < s.value < INF:
                continue
            here = self.row(s.task, s.state)
            changes = {tuple(self.row(s.task, t) - here) for t in s.successors
                       if np.isfinite(self.row(s.task, t)).all() and self._alive(s.task, t)}
            changes.discard(tuple(np.zeros(len(here))))  # never at least 1 lower
            if changes:
                key = frozenset(changes)
                blocks.setdefault(key, [[(np.array(a), "<=-1") for a in sorted(key)], 0])
                blocks[key][1] += 1
        return ([options for options, _ in blocks.values()],
                np.array([count for _, count in blocks.values()], dtype=float))

    def _alive(self, task: Task, state: int) -> bool:
        """Sample states know h*; others are assumed alive."""
        return self.hstar.get((task.name, state), 0.0) < INF

    def add_counterexample(self, cex: Counterexample, task: Task):
        path, successors = replay(cex, task)
        options = counterexample_options(np.array([self.row(task, s) for s in path]),
                                         np.array([self.row(task, s) for s in successors])
                                         .reshape(len(successors), len(self.features)))
        if options is not None:
            self.blocks.append(options)

    # ------------------------------------------------------------------ programs
    def program(self, weights: dict[int, int]) -> str:
        return (f"def heuristic(state, task):\n{DEAD_END_GUARD}"
                f"    return {weighted_sum(self.features, weights)}\n")

    def _random_weights(self) -> dict[int, int]:
        chance = np.array([0.5 ** f.complexity for f in self.features])
        size = int(self.rng.integers(1, self.max_terms + 1))
        picked = self.rng.choice(len(self.features), size=min(size, len(self.features)),
                                 replace=False, p=chance / chance.sum())
        return {int(i): int(self.rng.choice(self.weights)) for i in sorted(picked)}

    def propose(self, feedback: list, tasks: dict[str, Task]) -> str | None:
        for item in feedback[self.feedback_seen:]:
            if isinstance(item, Counterexample):
                self.add_counterexample(item, tasks[item.task])
        self.feedback_seen = len(feedback)
        if not feedback:  # a draw of sample and select
            self.draws += 1
            if self.draws > 1:
                return self.program(self._random_weights())
        cost = np.array([f.complexity for f in self.features], dtype=float)
        weights = solve_weights(self.blocks, cost, [-self.max_weight] * len(cost),
                                self.max_weight, soft=self.sample_blocks,
                                penalty=SAMPLE_PENALTY * cost.sum() * self.sample_counts,
                                time_limit=self.time_limit, node_limit=self.node_limit)
        if weights is None:
            return None
        return self.program(weights)
