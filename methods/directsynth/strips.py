"""Typed STRIPS tasks with negative preconditions: parsing (the ``pddl`` package), grounding by
relaxed reachability, states as bitmasks and successor generation.

A state is a Python int whose bit ``i`` says whether fluent atom ``i`` holds; static atoms
(predicates no action changes) are compiled away at grounding. An operator applies in ``s``
when ``s & pre == pre`` and ``s & neg == 0``; its successor is ``(s & ~delete) | add`` (adds
win over deletes, as in PDDL).
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, field
from pathlib import Path

from common.errors import UserError

Atom = tuple[str, ...]  # ("on", "b1", "b2")


@dataclass(frozen=True)
class Operator:
    name: str  # "(stack b1 b2)"
    pre: int
    neg: int
    add: int
    delete: int

    def applicable(self, state: int) -> bool:
        return state & self.pre == self.pre and not state & self.neg

    def apply(self, state: int) -> int:
        return (state & ~self.delete) | self.add


@dataclass
class Task:
    name: str
    domain: str
    atoms: list[Atom]  # fluent atoms; bit i of a state is atoms[i]
    static: frozenset[Atom]  # atoms true in every state
    objects: dict[str, list[str]]  # type -> objects of that type (and of its subtypes)
    init: int
    goal: int  # bitmask of goal atoms (fluent)
    operators: list[Operator]
    unsolvable: bool = False  # a goal atom is relaxed-unreachable
    index: dict[Atom, int] = field(default_factory=dict)
    _by_pre: list[list[int]] | None = field(default=None, repr=False)
    _by_name: dict[str, Operator] = field(default_factory=dict, repr=False)

    def __post_init__(self):
        self.index = {atom: i for i, atom in enumerate(self.atoms)}
        self._by_name = {op.name: op for op in self.operators}

    def is_goal(self, state: int) -> bool:
        return state & self.goal == self.goal

    def facts(self, state: int) -> frozenset[Atom]:
        return frozenset(self.atoms[i] for i in bits(state))

    def successors(self, state: int) -> list[tuple[Operator, int]]:
        """Applicable operators and their successor states (operators without positive
        preconditions are looked up once; the others through one of their preconditions)."""
        if self._by_pre is None:
            self._index_operators()
        out, seen = [], set()
        for i in (*bits(state), len(self.atoms)):
            for k in self._by_pre[i]:
                op = self.operators[k]
                if k not in seen and op.applicable(state):
                    seen.add(k)
                    out.append((op, op.apply(state)))
        return out

    def _index_operators(self):
        self._by_pre = [[] for _ in range(len(self.atoms) + 1)]
        for k, op in enumerate(self.operators):
            # keyed by the lowest precondition bit; no positive precondition: the last list
            key = (op.pre & -op.pre).bit_length() - 1 if op.pre else len(self.atoms)
            self._by_pre[key].append(k)

    def operator_named(self, name: str) -> Operator:
        if name not in self._by_name:
            raise UserError(f"{self.name}: no ground action {name}")
        return self._by_name[name]


def bits(mask: int):
    """Indices of the set bits of ``mask`` in increasing order."""
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


def _name(pddl_name) -> str:
    """A plain lower-case ``str``: PDDL names are case-insensitive, and ``pddl``'s own name
    type hashes in Python code, which made it the slowest part of every set of facts."""
    return str(pddl_name).lower()


def _atom(predicate) -> Atom:
    return (_name(predicate.name), *(_name(t.name) for t in predicate.terms))


def _literals(formula) -> tuple[list, list]:
    """Positive and negative atoms of a conjunction of literals (precondition or effect)."""
    from pddl.logic.base import And, Not
    from pddl.logic.predicates import Predicate

    parts = formula.operands if isinstance(formula, And) else [formula]
    pos, neg = [], []
    for part in parts:
        if isinstance(part, Predicate):
            pos.append(part)
        elif isinstance(part, Not) and isinstance(part.argument, Predicate):
            neg.append(part.argument)
        else:
            raise UserError(f"unsupported PDDL construct {part} (STRIPS with negative "
                            "preconditions and typing only)")
    return pos, neg


def _typed_objects(domain, problem) -> dict[str, list[str]]:
    parents = {_name(t): p and _name(p) for t, p in domain.types.items()}
    out: dict[str, list[str]] = {"object": []}
    for obj in sorted([*domain.constants, *problem.objects], key=lambda o: _name(o.name)):
        name = _name(obj.name)
        for tag in sorted(map(_name, obj.type_tags)) or ["object"]:
            while tag is not None:
                out.setdefault(tag, [])
                if name not in out[tag]:
                    out[tag].append(name)
                tag = parents.get(tag) if tag != "object" else None
        if name not in out["object"]:
            out["object"].append(name)
    return out


@dataclass
class _Schema:
    name: str
    params: list[tuple[str, str]]  # (variable, type)
    pre: list[tuple]  # ("pred", "?x", "c") with variables as "?x"
    neg: list[tuple]
    add: list[tuple]
    delete: list[tuple]


def _schema(action) -> _Schema:
    def term(t):
        return f"?{_name(t.name)}" if type(t).__name__ == "Variable" else _name(t.name)

    def atoms(preds):
        return [(_name(p.name), *(term(t) for t in p.terms)) for p in preds]

    params = [(f"?{_name(v.name)}",
               _name(next(iter(v.type_tags))) if v.type_tags else "object")
              for v in action.parameters]
    pre, neg = _literals(action.precondition) if action.precondition is not None else ([], [])
    add, delete = _literals(action.effect)
    return _Schema(_name(action.name), params, atoms(pre), atoms(neg), atoms(add), atoms(delete))


def _bind(atom: tuple, sub: dict) -> Atom:
    return tuple(sub.get(x, x) if x.startswith("?") else x for x in atom)


def _assignments(schema: _Schema, reachable: dict[str, set], objects: dict) -> list[dict]:
    """Parameter bindings whose positive preconditions are all in ``reachable`` (by predicate)
    and whose objects have the declared types: a hash join over the preconditions (the one
    with the most bound arguments next), then the remaining parameters by type."""
    allowed = {v: set(objects.get(t, [])) for v, t in schema.params}
    indexes: dict[tuple, dict] = {}

    def matches(pre, bound_positions, key):
        index = indexes.get((pre[0], bound_positions))
        if index is None:
            index = {}
            for args in reachable.get(pre[0], ()):
                if len(args) == len(pre) - 1:
                    index.setdefault(tuple(args[i] for i in bound_positions), []).append(args)
            indexes[(pre[0], bound_positions)] = index
        return index.get(key, ())

    subs, todo = [{}], list(schema.pre)
    while todo and subs:
        bound = subs[0].keys()
        pre = max(todo, key=lambda a: (sum(not x.startswith("?") or x in bound for x in a[1:]),
                                       -len(reachable.get(a[0], ()))))
        todo.remove(pre)
        positions = tuple(i for i, x in enumerate(pre[1:]) if not x.startswith("?") or x in bound)
        grown = []
        for sub in subs:
            key = tuple(sub.get(pre[1 + i], pre[1 + i]) for i in positions)
            for args in matches(pre, positions, key):
                new, ok = dict(sub), True
                for x, value in zip(pre[1:], args, strict=True):
                    if x.startswith("?") and new.setdefault(x, value) != value \
                            or x.startswith("?") and value not in allowed[x]:
                        ok = False
                        break
                if ok:
                    grown.append(new)
        subs = grown
    free = [v for v, _ in schema.params if all(v not in a for a in schema.pre)]
    if free:
        subs = [{**sub, **dict(zip(free, values, strict=True))} for sub in subs
                for values in itertools.product(*(sorted(allowed[v]) for v in free))]
    return subs


def _relaxed_reachability(schemas, init: set, static: frozenset, objects: dict):
    """Atoms and ground actions reachable when deletes are ignored (negative preconditions
    are checked against static atoms only): a fixpoint over the action schemas."""
    reachable_atoms = set(init)
    grounded: dict[str, tuple] = {}
    changed = True
    while changed:  # relaxed reachability fixpoint
        by_predicate: dict[str, set] = {}
        for atom in reachable_atoms:
            by_predicate.setdefault(atom[0], set()).add(atom[1:])
        changed = False
        for schema in schemas:
            for sub in _assignments(schema, by_predicate, objects):
                neg = [_bind(a, sub) for a in schema.neg]
                if any(a in static for a in neg):
                    continue
                name = "(" + " ".join([schema.name, *(sub[v] for v, _ in schema.params)]) + ")"
                if name in grounded:
                    continue
                add = [_bind(a, sub) for a in schema.add]
                grounded[name] = ([_bind(a, sub) for a in schema.pre], neg, add,
                                  [_bind(a, sub) for a in schema.delete])
                for atom in add:
                    if atom not in reachable_atoms:
                        reachable_atoms.add(atom)
                        changed = True
    return reachable_atoms, grounded


@functools.cache
def _lalr(start_symbol: str):
    """The ``pddl`` package's grammar, analysed once per process (its ``parse_domain`` builds
    a new parser per file, 7x the cost of parsing a task)."""
    from lark import Lark
    from pddl.parser import GRAMMAR_FILE, PARSERS_DIRECTORY

    return Lark(GRAMMAR_FILE.read_text(), parser="lalr", import_paths=[PARSERS_DIRECTORY],
                start=start_symbol)


def _parse(parser_class, path: str | Path):
    """``pddl``'s domain or problem object for one file: the shared grammar's tree, turned
    into objects by a fresh transformer (transformers keep names between calls)."""
    tree = _lalr(parser_class.start_symbol).parse(Path(path).read_text())
    return parser_class.transformer_cls().transform(tree)


def ground(domain_file: str | Path, problem_file: str | Path) -> Task:
    """Parse and ground one task: relaxed reachability from the initial state, static atoms
    compiled away, negative preconditions on static atoms checked at grounding."""
    from pddl.parser.domain import DomainParser
    from pddl.parser.problem import ProblemParser

    try:
        domain = _parse(DomainParser, domain_file)
        problem = _parse(ProblemParser, problem_file)
    except Exception as err:  # the parser's own error types vary by construct
        raise UserError(f"cannot parse {problem_file}: {err}") from err
    schemas = [_schema(a) for a in sorted(domain.actions, key=lambda a: a.name)]
    fluent_predicates = {a[0] for s in schemas for a in (*s.add, *s.delete)}
    objects = _typed_objects(domain, problem)
    init = {_atom(p) for p in problem.init}
    static = frozenset(a for a in init if a[0] not in fluent_predicates)

    reachable_atoms, grounded = _relaxed_reachability(schemas, init, static, objects)

    goal_pos, goal_neg = _literals(problem.goal)
    if goal_neg:
        raise UserError(f"{problem_file}: negative goals are not supported")
    goals = [_atom(p) for p in goal_pos]
    fluents = sorted({a for a in reachable_atoms if a not in static} |
                     {g for g in goals if g not in static})
    index = {a: i for i, a in enumerate(fluents)}

    def mask(atoms):
        return sum(1 << index[a] for a in set(atoms) if a in index)

    operators = []
    for name, (pre, neg, add, delete) in sorted(grounded.items()):
        operators.append(Operator(name, mask(pre), mask(n for n in neg if n in index),
                                  mask(add), mask(d for d in delete if d not in add)))
    # a goal atom that relaxed reachability never adds (and is not static) is never true
    unsolvable = any(g not in static and g not in reachable_atoms for g in goals)
    return Task(name=Path(problem_file).stem, domain=_name(domain.name), atoms=fluents,
                static=static, objects=objects, init=mask(init), goal=mask(goals),
                operators=operators, unsolvable=unsolvable)


def validate_plan(task: Task, plan: list[str]) -> bool:
    """True when the named ground actions apply in order from the initial state and end in
    a goal state."""
    state = task.init
    for name in plan:
        op = task.operator_named(name)
        if not op.applicable(state):
            return False
        state = op.apply(state)
    return task.is_goal(state)


def read_plan(path: str | Path) -> list[str]:
    """A plan file in IPC format: one ``(action args)`` a line, ``;`` comments."""
    lines = Path(path).read_text().splitlines()
    return [line.strip().lower() for line in lines if line.strip().startswith("(")]
