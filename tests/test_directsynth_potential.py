"""directsynth's potential-heuristic proposer and larger test tasks: description-logic concepts
against a first-order evaluator written here, the grammar's bottom-up counts against the
sandbox-side evaluator, the fitted weights against the sample constraints they were fitted
to, a fitted miconic heuristic on generated tasks it never saw (validated hill-climbing
plans), soft constraints against brute force, the generators
(solvable, seeded, larger than the shipped tasks the run uses) and the baseline's sample
size at equal quality."""

from __future__ import annotations

import random

import numpy as np
import pytest

from data.planning import SHIPPED, planning_domains
from data.planning.generators import GENERATORS, LARGER_SIZES, generate
from methods.directsynth import (
    PotentialProposer,
    baseline_at_equal_quality,
    gbfs,
    ground,
    hill_climb,
    perfect_heuristic,
    state_space,
    validate_plan,
)
from methods.directsynth.features import TaskView, parse_expression, task_spec
from methods.directsynth.potential import ConceptGrammar, render, sample_states
from methods.directsynth.proposers import solve_weights
from methods.directsynth.synthesis import CoverageCheck

from .planning_helpers import in_process, shipped_task

INF = float("inf")


def _random_states(task, n: int, seed: int) -> list[int]:
    rng, states, s = random.Random(seed), [], task.init
    for _ in range(n):
        states.append(s)
        successors = task.successors(s)
        s = rng.choice(successors)[1] if successors else task.init
    return states


# ---------------------------------------------------------------------------- concepts
def _first_order(expr, view: TaskView, facts) -> set:
    """The denotation by the textbook definitions, quantifying over all objects."""
    universe = sorted(view.universe)
    truth = set(facts) | set(view.static)
    op, args = expr[0], expr[1:]
    if op == "top":
        return set(universe)
    if op == "type":
        return set(view.objects.get(args[0], ()))
    if op in ("pred", "goal"):
        source = truth if op == "pred" else set(view.goals)
        at = [1 + int(i) for i in args[1:]]
        if len(at) == 1:
            return {x for x in universe
                    if any(f[0] == args[0] and f[at[0]] == x for f in source)}
        return {(x, y) for x in universe for y in universe
                if any(f[0] == args[0] and f[at[0]] == x and f[at[1]] == y for f in source)}
    parts = [_first_order(a, view, facts) for a in args]
    if op == "not":
        return set(universe) - parts[0]
    if op == "and":
        return parts[0] & parts[1]
    if op == "inverse":
        return {(y, x) for x, y in parts[0]}
    if op == "plus":  # Warshall
        reach = set(parts[0])
        for k in universe:
            reach |= {(x, y) for x in universe for y in universe
                      if (x, k) in reach and (k, y) in reach}
        return reach
    if op == "some":
        return {x for x in universe if any((x, y) in parts[0] and y in parts[1]
                                           for y in universe)}
    if op == "all":
        return {x for x in universe if all((x, y) not in parts[0] or y in parts[1]
                                           for y in universe)}
    if op == "equal":
        return {x for x in universe
                if all(((x, y) in parts[0]) == ((x, y) in parts[1]) for y in universe)}
    raise AssertionError(op)


EXPRESSIONS = {
    "blocksworld": ["(top)", "(pred on 0)", "(goal on 1)", "(not (pred clear 0))",
                    "(and (pred on-table 0) (goal on 0))",
                    "(some (pred on 0 1) (goal on-table 0))",
                    "(all (inverse (pred on 0 1)) (pred holding 0))",
                    "(equal (pred on 0 1) (goal on 0 1))",
                    "(equal (plus (pred on 0 1)) (plus (goal on 0 1)))",
                    "(some (plus (goal on 0 1)) (not (pred on-table 0)))"],
    "miconic": ["(type floor)", "(pred above 1)", "(all (pred origin 0 1) (pred lift-at 0))",
                "(and (pred boarded 0) (some (pred destin 0 1) (pred lift-at 0)))",
                "(some (inverse (pred above 0 1)) (pred lift-at 0))"],
    "satellite": ["(some (pred on_board 0 1) (pred power_avail 0))",
                  "(equal (pred pointing 0 1) (goal pointing 0 1))",
                  "(all (pred supports 0 1) (goal have_image 1))"],
}


@pytest.mark.parametrize("domain", sorted(EXPRESSIONS))
def test_concepts_equal_their_first_order_definitions(domain):
    task = shipped_task(domain, 6)
    view = TaskView(task_spec(task))
    for state in _random_states(task, 12, seed=1):
        facts = task.facts(state)
        for text in EXPRESSIONS[domain]:
            expected = _first_order(parse_expression(text), view, facts)
            assert view.concept(facts, text) == len(expected), text


def test_malformed_concepts_are_refused():
    view = TaskView(task_spec(shipped_task("miconic", 1)))
    for text in ("(and (top)", "(top) (top)", "(frobnicate (top))"):
        with pytest.raises(ValueError):
            view.concept(frozenset(), text)


@pytest.mark.parametrize("domain", ["blocksworld", "childsnack", "ferry"])
def test_grammar_counts_equal_the_sandbox_evaluator_and_are_distinct(domain):
    """The bottom-up counts the MILP fits are the counts the emitted program computes; no
    two features count alike on the sample and none is constant."""
    tasks = [shipped_task(domain, k) for k in range(1, 5)]
    views = {t.name: TaskView(task_spec(t)) for t in tasks}
    samples = sample_states(tasks, 150)
    features, counts = ConceptGrammar(samples, views).features(5)
    assert counts.shape == (len(samples), len(features)) and len(features) > 20
    assert len({tuple(c) for c in counts.T}) == len(features)
    assert all(len(set(c)) > 1 for c in counts.T)
    for k in range(0, len(samples), 7):
        s = samples[k]
        fresh = TaskView(task_spec(s.task))
        assert [f.value(fresh, s.facts) for f in features] == list(counts[k])
    assert all(render(parse_expression(f.predicate)) == f.predicate for f in features)


# ---------------------------------------------------------------------------- fitting
@pytest.fixture(scope="module")
def miconic_fit():
    tasks = [shipped_task("miconic", k) for k in range(1, 5)]
    proposer = PotentialProposer(tasks, max_complexity=5, sample_size=200, seed=0,
                                 relaxed=False)
    return tasks, proposer, proposer.propose([], {t.name: t for t in tasks})


def test_fitted_weights_make_every_sample_state_descend(miconic_fit):
    """Recomputed from the program text: every alive non-goal sample state has an alive
    successor at least 1 lower (the miconic sample admits such weights)."""
    tasks, proposer, program = miconic_fit
    for task in {s.task.name: s.task for s in proposer.samples}.values():
        values = perfect_heuristic(task, 10**5)
        h = in_process(program, task)
        for s, successors in state_space(task, 10**5).items():
            if 0 < values[s] < INF:
                here = h([s])[0]
                assert any(h([t])[0] <= here - 1 for _, t in successors if values[t] < INF)


def test_fitted_miconic_heuristic_solves_larger_generated_tasks(miconic_fit, tmp_path):
    """Tasks with up to six passengers (the sample has at most two): hill climbing alone,
    by the best or by random improving moves, reaches the goal with a valid plan."""
    _, _, program = miconic_fit
    for path in generate("miconic", (3, 6), 0, tmp_path):
        task = ground(SHIPPED / "miconic" / "domain.pddl", path)
        h = in_process(program, task)
        climb = hill_climb(task, h, 500)
        assert climb.solved and validate_plan(task, climb.plan)
        for _ in range(3):  # random improving moves also reach the goal
            assert hill_climb(task, h, 500, random.Random(_)).solved


def test_soft_blocks_trade_violations_for_their_penalty():
    """One feature; a = [1] wants w <= -1, a = [-1] wants w >= 1: the cheaper block gives
    way, as brute force over w in [-3, 3] says."""
    blocks = [[(np.array([1.0]), "<=-1")], [(np.array([-1.0]), "<=-1")]]
    for penalty in ([5.0, 1.0], [1.0, 5.0]):
        w = solve_weights([], np.ones(1), [-3], 3, soft=blocks, penalty=np.array(penalty))
        best = min(range(-3, 4), key=lambda v: abs(v) + penalty[0] * (v > -1)
                   + penalty[1] * (v < 1))
        assert w == {0: best}
    assert solve_weights(blocks, np.ones(1), [-3], 3) is None  # both hard: infeasible


# ---------------------------------------------------------------------------- larger tasks
def _objects(task) -> int:
    return sum(len(v) for v in task.objects.values())


@pytest.mark.parametrize("domain", sorted(GENERATORS))
def test_generated_tasks_are_solvable_seeded_and_larger(domain, tmp_path):
    """A small generated task is solved by GBFS with h_FF and the plan validates; the same
    seed writes the same text, another seed another; the larger tasks have more objects
    than every shipped training (p01-p10) and easy test task (p01-p05) the run uses."""
    (small,) = generate(domain, [2], 0, tmp_path / "a")
    task = ground(SHIPPED / domain / "domain.pddl", small)
    view = TaskView(task_spec(task))
    result = gbfs(task, lambda states: [view.h_ff(task.facts(s)) for s in states], 20000)
    assert not task.unsolvable and result.solved and validate_plan(task, result.plan)
    again = generate(domain, [2], 0, tmp_path / "b")[0].read_text()
    other = generate(domain, [2], 1, tmp_path / "c")[0].read_text()
    assert again == small.read_text() and other != again
    (used,) = planning_domains(None, [domain], "easy", 10, "easy", 5)
    shipped = max(_objects(ground(used.domain_file, p)) for p in used.training + used.testing)
    first = generate(domain, LARGER_SIZES[domain][:1], 0, tmp_path / "d")[0]
    assert _objects(ground(used.domain_file, first)) > shipped


# ---------------------------------------------------------------------------- baseline
def test_baseline_sample_size_at_equal_quality():
    """The selection over a prefix (most solved, then fewest expansions, errors skipped)
    and the first prefix whose selected program reaches the target."""
    checks = [CoverageCheck("a", solved=2, expansions=50),
              CoverageCheck("bad", solved=9, error="boom"),
              CoverageCheck("b", solved=2, expansions=80),
              CoverageCheck("c", solved=3, expansions=90),
              CoverageCheck("d", solved=3, expansions=10)]
    quality = {"a": 0.2, "b": 1.0, "c": 0.6, "d": 0.9}
    asked = []

    def score(program):
        asked.append(program)
        return quality[program]

    assert baseline_at_equal_quality(checks, 0.5, score) == 4  # c, selected at m = 4
    assert baseline_at_equal_quality(checks, 0.9, quality.get) == 5
    assert baseline_at_equal_quality(checks, 0.95, quality.get) is None  # b never selected
    assert asked == ["a", "c"]  # each selected program scored once


@pytest.mark.parametrize("domain", ["blocksworld", "miconic", "spanner", "transport"])
def test_reference_planner_agrees_with_pyperplan(domain):
    """GBFS with h_FF (the larger tasks' reference) against pyperplan's GBFS with h_FF on
    domains pyperplan parses (no negative preconditions): both solve, the plans differ only
    by tie-breaking (within a factor 2)."""
    import logging

    from pyperplan import planner

    from methods.directsynth import reference_plan_length

    logging.getLogger().setLevel(logging.WARNING)
    for number in (3, 8):
        problem = SHIPPED / domain / "testing" / "easy" / f"p{number:02d}.pddl"
        theirs = planner.search_plan(str(SHIPPED / domain / "domain.pddl"), str(problem),
                                     planner.SEARCHES["gbf"], planner.HEURISTICS["hff"])
        ours = reference_plan_length(ground(SHIPPED / domain / "domain.pddl", problem), 5000)
        assert theirs is not None and ours is not None
        assert max(ours, len(theirs)) <= 2 * min(ours, len(theirs))
