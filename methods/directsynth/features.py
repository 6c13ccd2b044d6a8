"""The task view a heuristic program sees, with the domain-independent features it may call.

A heuristic program defines ``heuristic(state, task)``: ``state`` is a frozenset of facts as
tuples (``("on", "b1", "b2")``) and ``task`` is a :class:`TaskView`. This module is plain
Python (no numpy, no imports beyond the standard library) because it also runs inside the
sandboxed worker. The relaxed features ignore delete effects and negative preconditions:

- ``goal_count``: goal facts not true;
- ``h_add`` / ``h_max``: additive and max costs of reaching the goals in the delete relaxation;
- ``h_ff``: length of a relaxed plan extracted from h_add's best supporters (Hoffmann & Nebel);
- ``landmarks``: facts not true that every relaxed plan from the state must achieve, found by
  backchaining from the goals through the shared preconditions of all achievers;
- ``count(state, p)`` / ``goals_left(state, p)``: true facts and unachieved goals of predicate p;
- ``concept(state, text)``: the number of objects in a description-logic concept (below).

Dead ends of the relaxation give ``inf``.

Concepts and roles are s-expressions over the domain's predicates, as in the generalized
potential heuristics of Francès, Corrêa, Geissmann & Pommerening (IJCAI 2019). Concepts
denote sets of objects, roles sets of object pairs, both in the current state:

- ``(top)``, ``(type t)``; ``(pred p i)`` / ``(goal p i)``: the objects at argument ``i`` of
  the true (static or fluent) / goal facts of ``p``;
- ``(not C)``, ``(and C D)``, ``(some R C)`` (objects with an R-successor in C), ``(all R C)``
  (objects whose R-successors are all in C), ``(equal R S)`` (objects whose R- and
  S-successors are the same set);
- roles ``(pred p i j)`` / ``(goal p i j)``: the pairs at arguments ``i, j`` of true / goal
  facts of ``p``; ``(inverse R)``; ``(plus R)``, R's transitive closure.
"""

from __future__ import annotations

import heapq

INF = float("inf")


class TaskView:
    def __init__(self, spec: dict):
        self.name = spec["name"]
        self.atoms = [tuple(a) for a in spec["atoms"]]
        self.index = {a: i for i, a in enumerate(self.atoms)}
        self.goal_ids = frozenset(spec["goal"])
        self.goals = frozenset(self.atoms[i] for i in self.goal_ids)
        self.static = frozenset(tuple(a) for a in spec["static"])
        self.objects = {t: list(v) for t, v in spec["objects"].items()}
        self.operators = [(name, tuple(pre), tuple(add)) for name, pre, add in spec["operators"]]
        self._achievers = [[] for _ in self.atoms]
        self._consumers = [[] for _ in self.atoms]
        self._no_pre = []
        for k, (_, pre, add) in enumerate(self.operators):
            for i in add:
                self._achievers[i].append(k)
            for i in pre:
                self._consumers[i].append(k)
            if not pre:
                self._no_pre.append(k)
        self._pres = [pre for _, pre, _ in self.operators]
        self._adds = [add for _, _, add in self.operators]
        self._pre_counts = [len(pre) for pre in self._pres]
        self._last: dict = {}  # combine -> (state ids, (cost, supporter))
        self.universe = frozenset(o for names in self.objects.values() for o in names)
        self._parsed: dict = {}  # concept text -> expression
        self._denoted: tuple = (None, {})  # (state, expression -> denotation)

    # ------------------------------------------------------------------ helpers
    def ids(self, state) -> frozenset[int]:
        return frozenset(self.index[f] for f in state if f in self.index)

    def _relaxed(self, state, combine):
        """Costs of facts and best supporters under ``combine`` (sum: h_add, max: h_max);
        the last state's result per ``combine`` is kept, since a program usually asks for
        several features of one state (h_add and h_FF, h_max and landmarks)."""
        ids = self.ids(state)
        last = self._last.get(combine)
        if last is not None and last[0] == ids:
            return last[1]
        result = self._relaxed_costs(ids, combine)
        self._last[combine] = (ids, result)
        return result

    def _relaxed_costs(self, ids: frozenset[int], combine):
        """Generalised Dijkstra over the relaxed task (the inner loop of every relaxed
        feature, so written with local names; ties go to the first operator to fire)."""
        cost = [INF] * len(self.atoms)
        supporter = [None] * len(self.atoms)
        missing = self._pre_counts.copy()
        pres, adds, consumers = self._pres, self._adds, self._consumers
        queue = [(0, i) for i in ids]
        for i in ids:
            cost[i] = 0
        for k in self._no_pre:  # applicable everywhere: cost 1 (one action)
            for j in adds[k]:
                if 1 < cost[j]:
                    cost[j], supporter[j] = 1, k
                    queue.append((1, j))
        heapq.heapify(queue)
        pop, push, at = heapq.heappop, heapq.heappush, cost.__getitem__
        while queue:
            c, i = pop(queue)
            if c > cost[i]:
                continue
            for k in consumers[i]:
                missing[k] -= 1
                if missing[k] == 0:
                    op_cost = 1 + combine(map(at, pres[k]))
                    for j in adds[k]:
                        if op_cost < cost[j]:
                            cost[j], supporter[j] = op_cost, k
                            push(queue, (op_cost, j))
        return cost, supporter

    # ------------------------------------------------------------------ features
    def goal_count(self, state) -> int:
        return len(self.goals - frozenset(state))

    def h_add(self, state) -> float:
        cost, _ = self._relaxed(state, _sum)
        return sum(cost[i] for i in self.goal_ids)

    def h_max(self, state) -> float:
        cost, _ = self._relaxed(state, _max)
        return max((cost[i] for i in self.goal_ids), default=0)

    def h_ff(self, state) -> float:
        cost, supporter = self._relaxed(state, _sum)
        if any(cost[i] == INF for i in self.goal_ids):
            return INF
        plan, stack, done = set(), [i for i in self.goal_ids if cost[i] > 0], set()
        while stack:
            i = stack.pop()
            if i in done:
                continue
            done.add(i)
            k = supporter[i]
            plan.add(k)
            stack.extend(j for j in self.operators[k][1] if cost[j] > 0)
        return len(plan)

    def landmarks(self, state) -> float:
        ids = self.ids(state)
        cost, _ = self._relaxed(state, _max)
        if any(cost[i] == INF for i in self.goal_ids):
            return INF
        found = set(i for i in self.goal_ids if i not in ids)
        stack = list(found)
        while stack:
            i = stack.pop()
            achievers = [k for k in self._achievers[i]
                         if all(cost[j] < INF for j in self.operators[k][1])]
            if not achievers:
                continue
            shared = set(self.operators[achievers[0]][1])
            for k in achievers[1:]:
                shared &= set(self.operators[k][1])
            for j in shared - ids - found:
                found.add(j)
                stack.append(j)
        return len(found)

    def count(self, state, predicate: str) -> int:
        return sum(1 for f in state if f[0] == predicate)

    def goals_left(self, state, predicate: str) -> int:
        return sum(1 for g in self.goals if g[0] == predicate and g not in state)


    def concept(self, state, text: str) -> int:
        """The number of objects in the concept ``text`` (see the module docstring)."""
        expr = self._parsed.get(text)
        if expr is None:
            expr = self._parsed[text] = parse_expression(text)
        return len(self.denotation(state, expr))

    def denotation(self, state, expr: tuple) -> frozenset:
        """The objects (concepts) or object pairs (roles) of ``expr`` in ``state``; the
        denotations of the last state are kept, since a program asks for several concepts
        that share parts."""
        state = frozenset(state)
        if self._denoted[0] != state:
            facts: dict = {}
            for fact in state | self.static:
                facts.setdefault(fact[0], []).append(fact)
            self._denoted = (state, {"facts": facts})
        memo = self._denoted[1]
        if expr not in memo:
            memo[expr] = self._denote(expr, memo["facts"])
        return memo[expr]

    def _denote(self, expr: tuple, facts: dict) -> frozenset:
        op, args = expr[0], expr[1:]
        if op in ("pred", "goal"):
            source = facts.get(args[0], ()) if op == "pred" else \
                [g for g in self.goals if g[0] == args[0]]
            return primitive(source, args[1:])
        if op == "type":
            return frozenset(self.objects.get(args[0], ()))
        state = self._denoted[0]
        return construct(op, self.universe, [self.denotation(state, a) for a in args])


def primitive(facts, positions) -> frozenset:
    """Objects at argument ``positions[0]`` (one position: a concept) or pairs at the two
    ``positions`` (a role) of ``facts`` of one predicate."""
    at = [1 + int(i) for i in positions]
    if len(at) == 1:
        return frozenset(f[at[0]] for f in facts if len(f) > at[0])
    i, j = at
    return frozenset((f[i], f[j]) for f in facts if len(f) > max(i, j))


def construct(op: str, universe: frozenset, sub: list) -> frozenset:
    """The denotation of constructor ``op`` applied to its parts' denotations."""
    if op == "top":
        return universe
    if op == "not":
        return universe - sub[0]
    if op == "and":
        return sub[0] & sub[1]
    if op == "inverse":
        return frozenset((b, a) for a, b in sub[0])
    if op == "plus":
        return _closure(sub[0])
    if op == "some":
        return frozenset(a for a, b in sub[0] if b in sub[1])
    if op == "all":
        return universe - frozenset(a for a, b in sub[0] if b not in sub[1])
    if op == "equal":
        left, right = _successors(sub[0]), _successors(sub[1])
        empty = frozenset()
        return frozenset(a for a in universe if left.get(a, empty) == right.get(a, empty))
    raise ValueError(f"unknown concept constructor '{op}'")


def parse_expression(text: str) -> tuple:
    """``"(some (pred on 0 1) (top))"`` -> ``("some", ("pred", "on", "0", "1"), ("top",))``."""
    tokens = text.replace("(", " ( ").replace(")", " ) ").split()
    stack: list = [[]]
    for token in tokens:
        if token == "(":
            stack.append([])
        elif token == ")":
            if len(stack) < 2:
                raise ValueError(f"unbalanced parentheses in {text!r}")
            done = tuple(stack.pop())
            stack[-1].append(done)
        else:
            stack[-1].append(token)
    if len(stack) != 1 or len(stack[0]) != 1 or not isinstance(stack[0][0], tuple):
        raise ValueError(f"not one expression: {text!r}")
    return stack[0][0]


def _successors(pairs) -> dict:
    out: dict = {}
    for a, b in pairs:
        out.setdefault(a, set()).add(b)
    return {a: frozenset(bs) for a, bs in out.items()}


def _closure(pairs) -> frozenset:
    succ = _successors(pairs)
    out = set()
    for a in succ:
        seen, stack = set(), list(succ[a])
        while stack:
            b = stack.pop()
            if b not in seen:
                seen.add(b)
                stack.extend(succ.get(b, ()))
        out.update((a, b) for b in seen)
    return frozenset(out)


_sum = sum


def _max(values) -> float:
    return max(values, default=0)


def task_spec(task) -> dict:
    """A :class:`methods.directsynth.strips.Task` as plain JSON data for a TaskView."""
    from methods.directsynth.strips import bits

    return {"name": task.name, "atoms": [list(a) for a in task.atoms],
            "goal": list(bits(task.goal)), "static": [list(a) for a in sorted(task.static)],
            "objects": task.objects,
            "operators": [[op.name, list(bits(op.pre)), list(bits(op.add))]
                          for op in task.operators]}
