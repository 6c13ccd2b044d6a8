"""directsynth: the grounder against pyperplan and the reference plans, the relaxed features
against brute-force relaxed search, directness against a brute-force recomputation over the
whole state space, counterexamples re-verified, direct => randomized hill climbing always
succeeds, repairs satisfy every counterexample shown, the sandbox against hostile programs,
the language-model proposers (a local HTTP endpoint, the packaged SmolLM2) and protocol runs."""

from __future__ import annotations

import csv
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import threading
from collections import deque
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import numpy as np
import pytest

from data.planning import IPC2023_DOMAINS, SHIPPED, planning_domains
from methods.directsynth import (
    GOAL_COUNT,
    HOSTILE,
    GrammarProposer,
    LanguageModelProposer,
    Limits,
    ProgramError,
    SandboxedHeuristic,
    check_direct,
    check_program,
    check_sandbox,
    evaluate_on_test,
    gbfs,
    ground,
    hill_climb,
    http_generator,
    perfect_heuristic,
    read_plan,
    state_space,
    synthesize_direct,
    table_heuristic,
    validate_plan,
)
from methods.directsynth.features import TaskView, task_spec
from methods.directsynth.hostile import run_hostile_program
from methods.directsynth.sandbox import valid_value
from methods.directsynth.synthesis import outcome_text, run_over_tasks

from .conftest import run_failing, run_paper
from .planning_helpers import in_process, shipped_task
from .smoke import SMOKE

INF = float("inf")


def _brute_force_direct(task, values: dict[int, float]) -> bool:
    """Directness from the explicit state graph: the closure R of s0 under improving
    transitions by fixpoint iteration, then every non-goal state of R needs an improving
    successor (and a finite value)."""
    graph = state_space(task, 10**6)
    closure, changed = {task.init}, True
    while changed:
        changed = False
        for s in list(closure):
            if task.is_goal(s):
                continue
            for _, t in graph[s]:
                if values[t] < values[s] and t not in closure:
                    closure.add(t)
                    changed = True
    return all(task.is_goal(s) or (values[s] < INF and any(values[t] < values[s]
                                                           for _, t in graph[s]))
               for s in closure)


SMALL = [("blocksworld", 3), ("blocksworld", 5), ("ferry", 2), ("miconic", 3),
         ("childsnack", 2), ("spanner", 2), ("satellite", 1), ("transport", 2)]


# ---------------------------------------------------------------------------- grounding
@pytest.mark.parametrize("domain", ["blocksworld", "miconic", "rovers", "spanner", "floortile",
                                    "transport"])
def test_grounder_matches_pyperplan(domain):
    """pyperplan (no negative preconditions) on the same task: the same number of reachable
    states and the same states as sets of the facts its operators change; the optimal plan
    is no longer than the reference plan, which validates."""
    from pyperplan import grounding
    from pyperplan.pddl.parser import Parser

    folder = SHIPPED / domain
    problem = folder / "training" / "easy" / "p02.pddl"
    parser = Parser(str(folder / "domain.pddl"), str(problem))
    reference = grounding.ground(parser.parse_problem(parser.parse_domain()),
                                 remove_irrelevant_operators=False)
    seen, queue = {reference.initial_state}, deque([reference.initial_state])
    while queue:
        for _, t in reference.get_successor_states(queue.popleft()):
            if t not in seen:
                seen.add(t)
                queue.append(t)
    task = ground(folder / "domain.pddl", problem)
    graph = state_space(task, 10**6)
    changing = frozenset().union(*(op.add_effects | op.del_effects
                                   for op in reference.operators))
    ours = {frozenset("(" + " ".join(a) + ")" for a in task.facts(s)) & changing
            for s in graph}
    assert len(graph) == len(seen) and ours == {s & changing for s in seen}
    values = perfect_heuristic(task, 10**6)
    reference_plan = read_plan(SHIPPED / "solutions" / domain / "training" / "easy" /
                               "p02.plan")
    assert values[task.init] <= len(reference_plan)
    assert validate_plan(task, reference_plan)


@pytest.mark.parametrize("domain", IPC2023_DOMAINS)
def test_reference_plans_validate_and_gbfs_plans_are_valid(domain):
    task = shipped_task(domain, 4)
    assert validate_plan(task, read_plan(SHIPPED / "solutions" / domain / "training" / "easy"
                                         / "p04.plan"))
    result = gbfs(task, in_process(GOAL_COUNT, task), 5000)
    assert result.solved and validate_plan(task, result.plan)
    broken = result.plan[:-1]
    assert not validate_plan(task, broken)


def test_negative_preconditions_are_respected():
    """ferry: sailing to the location the ferry is at is not applicable (not (at-ferry ?to))."""
    task = shipped_task("ferry", 2)
    names = [op.name for op, _ in task.successors(task.init)]
    here = next(a for a in task.facts(task.init) if a[0] == "at-ferry")[1]
    assert names and all(f"(sail {here} {here})" != n for n in names)
    assert all(n.startswith("(sail " + here) or not n.startswith("(sail") for n in names)


def test_planning_domains_errors_name_the_problem(tmp_path):
    with pytest.raises(Exception, match="no domain 'gripper'"):
        planning_domains(None, ["gripper"], "easy", 1, "easy", 1)
    with pytest.raises(Exception, match="medium"):
        planning_domains(None, ["ferry"], "easy", 1, "medium", 1)


# ---------------------------------------------------------------------------- features
def _relaxed_optimum(task) -> float:
    """h+ of the initial state by breadth-first search over relaxed (monotone) states."""
    start, dist = task.init, {task.init: 0}
    queue = deque([start])
    while queue:
        s = queue.popleft()
        if task.is_goal(s):
            return dist[s]
        for op in task.operators:
            if s & op.pre == op.pre:
                t = s | op.add
                if t not in dist:
                    dist[t] = dist[s] + 1
                    queue.append(t)
    return INF


@pytest.mark.parametrize("domain,number", SMALL[:6])
def test_relaxed_features_bracket_the_optimal_relaxed_plan(domain, number):
    """h_max <= h+ <= h_FF <= h_add and h+ <= h*, on the initial state."""
    task = shipped_task(domain, number)
    view, facts = TaskView(task_spec(task)), task.facts(task.init)
    h_plus = _relaxed_optimum(task)
    assert view.h_max(facts) <= h_plus <= view.h_ff(facts) <= view.h_add(facts)
    assert h_plus <= perfect_heuristic(task, 10**6)[task.init]
    assert view.goal_count(facts) == bin(task.goal & ~task.init).count("1")


@pytest.mark.parametrize("domain", ["blocksworld", "miconic", "rovers", "floortile"])
def test_h_add_and_h_max_equal_pyperplans_along_a_random_walk(domain):
    """pyperplan's hAdd and hMax (an independent implementation) on 30 states of a random
    walk through a larger training task."""
    from pyperplan import grounding
    from pyperplan.heuristics.relaxation import hAddHeuristic, hMaxHeuristic
    from pyperplan.pddl.parser import Parser
    from pyperplan.search.searchspace import make_root_node

    folder = SHIPPED / domain
    problem = folder / "training" / "easy" / "p05.pddl"
    parser = Parser(str(folder / "domain.pddl"), str(problem))
    reference = grounding.ground(parser.parse_problem(parser.parse_domain()),
                                 remove_irrelevant_operators=False)
    h_add, h_max = hAddHeuristic(reference), hMaxHeuristic(reference)
    task = ground(folder / "domain.pddl", problem)
    view, rng, state = TaskView(task_spec(task)), random.Random(0), task.init
    for _ in range(30):
        facts = task.facts(state)
        node = make_root_node(frozenset("(" + " ".join(a) + ")" for a in facts)
                              & reference.facts)
        assert (view.h_add(facts), view.h_max(facts)) == (h_add(node), h_max(node))
        state = rng.choice([op.apply(state) for op in task.operators
                            if op.applicable(state)])


def test_the_shared_grammar_parses_as_the_pddl_package_does():
    """strips parses with one grammar per process; ``pddl``'s own functions build a parser
    per file. Same objects for every shipped domain and one task of each."""
    from pddl import parse_domain, parse_problem
    from pddl.parser.domain import DomainParser
    from pddl.parser.problem import ProblemParser

    from methods.directsynth.strips import _parse

    for domain in IPC2023_DOMAINS:
        folder = SHIPPED / domain
        problem = folder / "testing" / "easy" / "p01.pddl"
        assert _parse(DomainParser, folder / "domain.pddl") == parse_domain(folder / "domain.pddl")
        ours, theirs = _parse(ProblemParser, problem), parse_problem(problem)
        assert (ours, ours.objects, ours.init, ours.goal) == (
            theirs, theirs.objects, theirs.init, theirs.goal)


def test_an_action_without_preconditions_costs_one():
    view = TaskView({"name": "t", "atoms": [["g"], ["h"]], "goal": [0, 1], "static": [],
                     "objects": {}, "operators": [["(a)", [], [0]], ["(b)", [0], [1]]]})
    empty = frozenset()
    assert view.h_max(empty) == 2 and view.h_add(empty) == 3 and view.h_ff(empty) == 2


def test_relaxed_dead_ends_are_infinite():
    """spanner: walking past the only spanner leaves the nut relaxed-unreachable."""
    task = shipped_task("spanner", 1)
    view = TaskView(task_spec(task))
    values = perfect_heuristic(task, 10**6)
    dead = [s for s, v in values.items() if v == INF]
    assert dead, "spanner p01 has dead ends"
    for s in dead:
        facts = task.facts(s)
        assert view.h_ff(facts) == view.h_add(facts) == view.landmarks(facts) == INF


# ---------------------------------------------------------------------------- directness
def _random_heuristic(task, seed: int) -> dict[int, float]:
    rng = np.random.default_rng(seed)
    return {s: float(rng.integers(0, 6)) for s in state_space(task, 10**6)}


@pytest.mark.parametrize("domain,number", SMALL)
def test_directness_equals_brute_force(domain, number):
    """The checker's verdict equals the explicit-graph recomputation for h*, goal count,
    h_FF and random heuristics (each a different pattern of plateaus and dead ends)."""
    task = shipped_task(domain, number)
    graph = state_space(task, 10**6)
    view = TaskView(task_spec(task))
    candidates = {"perfect": perfect_heuristic(task, 10**6),
                  "goal_count": {s: view.goal_count(task.facts(s)) for s in graph},
                  "h_ff": {s: view.h_ff(task.facts(s)) for s in graph}}
    candidates.update({f"random{k}": _random_heuristic(task, k) for k in range(6)})
    verdicts = set()
    for name, values in candidates.items():
        result = check_direct(task, table_heuristic(values), 10**6)
        assert result.direct == _brute_force_direct(task, values), name
        verdicts.add(result.direct)
    assert check_direct(task, table_heuristic(candidates["perfect"]), 10**6).direct
    assert verdicts == {True, False}


def test_goal_count_is_not_direct_on_blocksworld():
    task = shipped_task("blocksworld", 5)
    result = check_direct(task, in_process(GOAL_COUNT, task), 10**5)
    assert result.verdict == "not direct"


def _verify_counterexample(task, h, cex):
    """Independently: the path is applicable and strictly improving from s0 and ends in the
    state; the state is no goal; no successor has a lower value."""
    state, value = task.init, h([task.init])[0]
    for name in cex.path:
        op = task.operator_named(name)
        assert op.applicable(state)
        state = op.apply(state)
        new = h([state])[0]
        assert new < value
        value = new
    assert state == cex.state and not task.is_goal(state)
    assert value == cex.h
    successors = [t for _, t in task.successors(state)]
    assert len(successors) == len(cex.successors)
    assert value == INF or all(v >= value for v in h(successors))


@pytest.mark.parametrize("domain,number", SMALL)
def test_every_counterexample_is_reverified(domain, number):
    task = shipped_task(domain, number)
    found = 0
    for seed in range(8):
        h = table_heuristic(_random_heuristic(task, seed))
        result = check_direct(task, h, 10**6)
        if result.counterexample is not None:
            _verify_counterexample(task, h, result.counterexample)
            found += 1
    assert found > 0


@pytest.mark.parametrize("domain,number", SMALL[:5])
def test_direct_implies_randomized_hill_climbing_always_succeeds(domain, number):
    """With a direct h every run of randomized improving hill climbing reaches a goal; with a
    non-direct h some run gets stuck (its counterexample state is reachable by improving
    moves)."""
    task = shipped_task(domain, number)
    rng = random.Random(0)
    perfect = table_heuristic(perfect_heuristic(task, 10**6))
    assert all(hill_climb(task, perfect, 10**4, rng).solved for _ in range(300))
    stuck = 0
    for seed in range(20):
        h = table_heuristic(_random_heuristic(task, seed))
        result = check_direct(task, h, 10**6)
        if result.direct:
            assert all(hill_climb(task, h, 10**4, rng).solved for _ in range(300))
        else:
            runs = [hill_climb(task, h, 10**4, rng) for _ in range(300)]
            assert not all(r.solved for r in runs)
            stuck += 1
    assert stuck > 0


# ---------------------------------------------------------------------------- synthesis
@pytest.mark.parametrize("search", ["enumerate", "milp"])
def test_each_repair_satisfies_every_counterexample_shown(search):
    """Every proposed program, evaluated in the sandbox on the counterexamples found before
    it, has a non-improving path step or an improving successor at each of them."""
    tasks = [shipped_task("blocksworld", k) for k in range(1, 7)]
    proposer = GrammarProposer(tasks[0], seed=0, search=search)
    result = synthesize_direct(proposer.propose, tasks, 12, Limits())
    assert len(result.checks) >= 3
    by_name = {t.name: t for t in tasks}
    for k, check in enumerate(result.checks):
        with SandboxedHeuristic(check.program) as h:
            for earlier in result.checks[:k]:
                cex = earlier.counterexample
                task = by_name[cex.task]
                h.set_task(task)
                path, state = [task.init], task.init
                for name in cex.path:
                    state = task.operator_named(name).apply(state)
                    path.append(state)
                values = h(path)
                successors = h([t for _, t in task.successors(cex.state)])
                still_improving = all(b < a for a, b in zip(values, values[1:], strict=False))
                assert not still_improving or min(successors) < values[-1]


def test_the_loop_finds_a_heuristic_direct_by_brute_force():
    """miconic: the accepted program is direct on every training task by the explicit-graph
    recomputation, and hill climbing alone solves them."""
    tasks = [shipped_task("miconic", k) for k in range(1, 7)]
    proposer = GrammarProposer(tasks[0], seed=0, search="milp")
    result = synthesize_direct(proposer.propose, tasks, 30, Limits())
    assert result.succeeded
    for task in tasks:
        h = in_process(result.final.program, task)
        values = dict(zip(state_space(task, 10**6), h(list(state_space(task, 10**6))),
                          strict=True))
        assert _brute_force_direct(task, values)
        climb = hill_climb(task, h, 1000)
        assert climb.solved and validate_plan(task, climb.plan)


def test_check_program_stops_at_the_first_counterexample():
    tasks = [shipped_task("blocksworld", k) for k in (5, 6, 7)]
    check = check_program(GOAL_COUNT, tasks, Limits())
    assert check.tasks_passed == 0 and check.counterexample.task == tasks[0].name
    full = sum(check_direct(t, in_process(GOAL_COUNT, t), 10**6).evaluations for t in tasks)
    assert check.evaluations < full


# ---------------------------------------------------------------------------- sandbox
def test_a_program_that_fails_to_load_leaves_no_worker_behind():
    """A program that fails to load used to keep its worker (and its descriptors)."""
    descriptors = len(os.listdir("/proc/self/fd"))
    for name in ("import_os", "write_file_open", "kill_worker"):
        outcome = run_hostile_program(name, shipped_task("ferry", 1), timeout=2.0)
        assert outcome.outcome.startswith("contained") and not outcome.escaped
    assert len(os.listdir("/proc/self/fd")) == descriptors


def test_hostile_programs_are_contained(smoke_run):
    """Every hostile program of the suite, as the smoke run ran it (run_hostile_suite, its
    table tables/hostile_programs.csv): none escaped, each for its own reason."""
    _, run_dir = smoke_run("directsynth")
    with open(run_dir / "tables" / "hostile_programs.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [r["name"] for r in rows] == list(HOSTILE)
    assert not [r["name"] for r in rows if r["escaped"] != "False"]
    reasons = {r["name"]: r["outcome"] for r in rows}
    assert "timeout" in reasons["infinite_loop"]
    assert "MemoryError" in reasons["huge_allocation"]
    assert "not allowed" in reasons["introspect_system"]
    # no audit event exists for these: the operating system refuses them
    for name in ("introspect_mknod", "introspect_mkfifo", "introspect_utime"):
        assert "Operation not permitted" in reasons[name], reasons[name]
    for name in ("forge_nan_on_descriptors", "forge_stale_reply"):
        assert "result channel" in reasons[name], reasons[name]
    # the program's process holds no protocol descriptor and may not set a timer or handler
    assert "the real answer is an error" in reasons["forge_reply_live_id"]
    assert "Operation not permitted" in reasons["timer_answers_between_calls"]
    assert "protocol violation" in reasons["forge_result_then_raise"]
    # no writable file system and no extended attributes (kernel memory outside the limit),
    # the supervisor's limits, priority and affinity are out of the program's reach, and
    # the calls it made through raw system calls were refused: shared memory, SIGIO to the
    # supervisor, pipes to splice memory into, inotify
    for name in ("sysv_shared_memory", "create_files_flood", "xattr_flood",
                 "meddle_supervisor", "sigio_supervisor", "vmsplice_huge_pages",
                 "inotify_watches", "page_tables_spread", "page_tables_holes"):
        assert "ran, returned [0.0, 0.0]" == reasons[name], reasons[name]
    # the child maps nothing: the host's page tables hardly move while it lives (about
    # 940 MiB and 294 MiB when it could map, spread out or punched into holes)
    grown = {r["name"]: int(r["page_tables_kib"]) for r in rows}
    for name in ("page_tables_spread", "page_tables_holes"):
        assert grown[name] < 8 * 1024, (name, grown[name])
    assert "nondeterministic" in reasons["answers_differ"]
    # a crash of the program's process is named, and no core is dumped (non-dumpable)
    assert "killed by SIGSEGV" in reasons["c_stack_overflow"], reasons["c_stack_overflow"]
    assert "too slow" in reasons["slow_answers"]
    # a line the supervisor cannot parse, or one too long, voids the program
    for name in ("nested_result_line", "huge_result_line"):
        assert "protocol violation" in reasons[name], reasons[name]


def test_a_timer_set_at_import_answers_no_check():
    """The program that answers requests from a SIGALRM handler, through the whole check on
    three blocksworld tasks: an error, and no value of it counted."""
    program = HOSTILE["timer_answers_between_calls"].format()
    tasks = [shipped_task("blocksworld", k) for k in (5, 6, 7)]
    check = check_program(program, tasks, Limits(timeout=5.0))
    assert "Operation not permitted" in check.error
    assert check.evaluations == 0 and check.tasks_passed == 0


def test_a_forged_result_voids_every_result_of_the_program():
    """A program that answers its first job itself and then raises: the supervisor takes the
    forged line, finds the program's own error line behind it, and the check drops all the
    program's results, not only those of the task where it was caught."""
    forger = HOSTILE["forge_result_then_raise"].format()
    program = ("def heuristic(state, task):\n"
               "    if task.name.endswith('7'):\n"
               "        return forged(state, task)\n"
               "    return len(task.goals - state)\n") + forger.replace("def heuristic(",
                                                                       "def forged(")
    tasks = [shipped_task("blocksworld", k) for k in (5, 6, 7)]
    check = check_program(forger, tasks, Limits(timeout=5.0))
    assert check.error.startswith("protocol violation")
    assert check.tasks_passed == 0 and check.proven == 0 and check.counterexample is None
    # the first two tasks run cleanly, the third breaks the stream: no row survives
    clean = evaluate_on_test(GOAL_COUNT, tasks[:2], Limits(), 100, search=False)
    assert not any(r["verdict"].startswith("error") for r in clean)
    rows = evaluate_on_test(program, tasks, Limits(timeout=5.0), 100, search=False)
    assert [r["verdict"][:19] for r in rows] == ["protocol violation:"] * 3


@pytest.mark.parametrize("name", ["introspect_mknod", "introspect_mkfifo", "introspect_utime"])
def test_the_escape_detector_sees_escapes_past_the_python_guards(name):
    """Without the operating-system boundary these programs get past the Python guards and
    the suite reports the escape, so the containment test above can fail."""
    assert run_hostile_program(name, shipped_task("ferry", 1), sandbox="unsafe_process").escaped


@pytest.mark.parametrize("name", ["sigio_supervisor", "vmsplice_huge_pages", "inotify_watches"])
def test_the_escape_detector_sees_raw_system_calls_without_the_boundary(name):
    """Without the allowlists the SIGIO program kills its supervisor, the vmsplice program
    splices its memory into a pipe and the inotify program takes a watch, and the suite
    says so."""
    outcome = run_hostile_program(name, shipped_task("ferry", 1), sandbox="unsafe_process")
    assert outcome.escaped, outcome.outcome


def test_the_escape_detector_sees_a_program_whose_answers_differ(monkeypatch):
    """Without the repeat in a fresh process, the counter's answers reach the caller."""
    monkeypatch.setattr(SandboxedHeuristic, "confirm", lambda self, answers: None)
    assert run_hostile_program("answers_differ", shipped_task("ferry", 1)).escaped


def test_a_program_whose_answers_differ_is_void():
    """A counter whose every answer is smaller than the ones before makes every explored state
    look improving: without the repeat in a fresh process it would be accepted as direct on
    every training task; with it the check voids the program and says why."""
    program = HOSTILE["answers_differ"].format()
    # tasks where the counter's falling answers pass the whole directness check
    tasks = [shipped_task("ferry", 2), shipped_task("miconic", 1), shipped_task("miconic", 2)]
    check = check_program(program, tasks, Limits(timeout=5.0))
    assert check.error.startswith("nondeterministic: the program answered a state")
    assert check.error_kind == "protocol violation"
    assert check.tasks_passed == 0 and not check.accepted
    rows = evaluate_on_test(program, tasks, Limits(timeout=5.0), 100, search=False)
    assert all(r["verdict"].startswith("nondeterministic") for r in rows)
    # the same check with the repeat switched off is fooled
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(SandboxedHeuristic, "confirm", lambda self, answers: None)
        fooled = check_program(program, tasks, Limits(timeout=5.0))
    assert fooled.accepted and fooled.tasks_passed == 3


@pytest.mark.parametrize("name", ["create_files_flood", "meddle_supervisor"])
def test_the_escape_detector_sees_floods_and_meddling_without_the_boundary(name):
    """Without the boundary the file flood fills the worker's scratch folder and the child
    changes its supervisor's limits, so the suite's verdict on them can fail (a longer limit:
    the host's file system makes files slower than a tmpfs)."""
    outcome = run_hostile_program(name, shipped_task("ferry", 1), timeout=10.0,
                                  sandbox="unsafe_process")
    assert outcome.escaped, outcome.outcome


@pytest.mark.slow
@pytest.mark.parametrize("name", ["page_tables_spread", "page_tables_holes"])
def test_the_page_table_programs_hold_kernel_memory_without_the_child_filter(name):
    """Without the child's filter (and at 3,000 rounds, not the suite's 60,000) the
    page-table programs make the host hold tens of MiB of page tables that RLIMIT_AS does
    not count, and the suite sees it: the contained run's few KiB are a real bound."""
    outcome = run_hostile_program(name, shipped_task("ferry", 1), sandbox="unsafe_process",
                                  rounds=3000)
    assert outcome.escaped, outcome.outcome
    assert outcome.page_tables_kib > 16 * 1024, outcome


CHAIN_DOMAIN = """(define (domain chain) (:requirements :strips)
  (:predicates (at ?p) (next ?a ?b))
  (:action move :parameters (?a ?b) :precondition (and (at ?a) (next ?a ?b))
   :effect (and (at ?b) (not (at ?a)))))"""


def chain_task(folder, steps: int):
    """A task whose only plan is ``steps`` moves along a chain (one successor per state)."""
    (folder / "domain.pddl").write_text(CHAIN_DOMAIN)
    links = " ".join(f"(next p{i} p{i + 1})" for i in range(steps))
    (folder / "chain.pddl").write_text(
        f"(define (problem chain) (:domain chain) (:objects "
        f"{' '.join(f'p{i}' for i in range(steps + 1))}) (:init (at p0) {links}) "
        f"(:goal (at p{steps})))")
    return ground(folder / "domain.pddl", folder / "chain.pddl")


def test_a_program_just_inside_the_limit_is_stopped_by_its_budget(tmp_path):
    """An honest heuristic that answers every batch after 0.9 of the 1 s limit: hill
    climbing on a 40-step chain would take 40 s; the per-task budget (3 limits) stops it
    within 20 s, as its own outcome, and it is counted as a failed program."""
    from methods.directsynth.hostile import _UNGUARD

    task = chain_task(tmp_path, 40)
    program = _UNGUARD + ("def heuristic(state, task):\n"
                          "    _pause(0.9)\n"
                          "    (at,) = [a for a in state if a[0] == 'at']\n"
                          "    return 40 - int(at[1][1:])\n")
    limits = Limits(timeout=1.0)
    climbs = []
    run = run_over_tasks(program, [task], limits,
                         lambda t, h: climbs.append(hill_climb(t, h, 100)) or False)
    assert run.kind == "too slow" and not climbs, run
    assert run.seconds < 20
    assert re.fullmatch(r"too slow: 3\.\d s over \d requests \(budget 3 s per task\)", run.error)
    assert outcome_text(run.error, run.kind) == run.error  # its own outcome, not "error: ..."
    check = check_program(program, [task], limits)
    assert not check.accepted and check.outcome.startswith("too slow")
    # the same heuristic without the sleep climbs the chain: the budget, not the program,
    # stopped it
    honest = program.replace("    _pause(0.9)\n", "")
    assert run_over_tasks(honest, [task], limits,
                          lambda t, h: climbs.append(hill_climb(t, h, 100)) or False).kind == ""
    assert climbs[-1].solved and len(climbs[-1].plan) == 40


def test_the_escape_detector_sees_an_unsandboxed_escape(tmp_path):
    """The same hostile program run without the sandbox does write its marker, so the
    suite's check can fail."""
    marker = tmp_path / "import_os.marker"
    program = HOSTILE["import_os"].format(marker=str(marker), port=1)
    subprocess.run([sys.executable, "-c", program + "\nheuristic(None, None)\n"], check=True)
    assert marker.exists()


# Plain Python, no guards at all, inside the boundary, with the filter of the child that runs
# a program: every attempt must fail.
_RAW_ATTEMPTS = """
import ctypes, json, os, resource, signal, socket, sys
folder, victim_pid, port, child_filter = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \\
    int(sys.argv[4])
def attempt(f):
    try:
        f()
        return "succeeded"
    except Exception as err:
        return type(err).__name__
def checked(result):
    if result != 0:
        raise OSError(ctypes.get_errno(), "refused")
target = lambda name: os.path.join(folder, name)
libc = ctypes.CDLL(None, use_errno=True)
def mapping(prot):
    libc.mmap.restype = ctypes.c_void_p
    address = libc.mmap(None, 1 << 22, prot, 0x22, -1, 0)  # MAP_PRIVATE | MAP_ANONYMOUS
    if address in (None, ctypes.c_void_p(-1).value):
        raise OSError(ctypes.get_errno(), "refused")
    return address
def huge_page():
    address = (mapping(3) + (1 << 21) - 1) >> 21 << 21
    checked(libc.madvise(ctypes.c_void_p(address), 1 << 21, 14))  # MADV_HUGEPAGE
F_GETFL, F_SETFL, F_SETOWN, F_SETSIG, F_SETPIPE_SZ, O_ASYNC = 3, 4, 8, 10, 1031, 0o20000
pipe = os.pipe()
before = {"fork_in_supervisor": attempt(lambda: os.waitpid(os.fork() or os._exit(0), 0)),
          "shmget": attempt(lambda: checked(libc.shmget(0, 1 << 20, 0o1600) < 0)),
          "msgget": attempt(lambda: checked(libc.msgget(0, 0o1600) < 0)),
          "inotify_init1": attempt(lambda: checked(libc.inotify_init1(0) < 0)),
          "vmsplice": attempt(lambda: checked(libc.vmsplice(pipe[1], None, 0, 0) < 0)),
          "fcntl_setown": attempt(lambda: checked(libc.fcntl(pipe[0], F_SETOWN, 1))),
          "prlimit_self": attempt(lambda: resource.prlimit(0, resource.RLIMIT_NOFILE)),
          "proc_mountinfo": attempt(lambda: open("/proc/self/mountinfo").read()),
          "host_root": sorted(os.listdir("/")), "uid": os.getuid()}
sys.path.insert(0, "/opt/worker")
from sandbox_worker import _disable_huge_pages, _install_filter, _not_dumpable
_disable_huge_pages()
before["huge_pages_disabled"] = libc.prctl(42, 0, 0, 0, 0)  # PR_GET_THP_DISABLE
_not_dumpable()
before["dumpable"] = libc.prctl(3, 0, 0, 0, 0)  # PR_GET_DUMPABLE
with os.fdopen(child_filter, "rb") as handle:
    program = handle.read()
_install_filter(program)
results = {
    "read_host_file": attempt(lambda: open(target("secret.txt")).read()),
    "write_host": attempt(lambda: open(target("written"), "w").write("x")),
    "mknod": attempt(lambda: os.mknod(target("node"))),
    "mkfifo": attempt(lambda: os.mkfifo(target("fifo"))),
    "write_tmp": attempt(lambda: open("/tmp/scratch", "w").write("x")),
    "create_in_root": attempt(lambda: os.close(os.open("/scratch", os.O_CREAT | os.O_WRONLY))),
    "create_in_dev": attempt(lambda: open("/dev/shm/scratch", "w").write("x")),
    "tmpfile": attempt(lambda: os.close(os.open("/", os.O_TMPFILE | os.O_WRONLY))),
    "setxattr": attempt(lambda: os.setxattr("/dev/null", "user.flood", bytes(4096))),
    "prlimit_parent": attempt(lambda: resource.prlimit(os.getppid(), resource.RLIMIT_NOFILE)),
    "setpriority_user": attempt(lambda: os.setpriority(os.PRIO_USER, 0, 10)),
    "affinity_parent": attempt(lambda: os.sched_setaffinity(os.getppid(), {0})),
    "link": attempt(lambda: os.link(sys.executable, target("hard"))),
    "symlink": attempt(lambda: os.symlink("/etc/passwd", target("soft"))),
    "utime": attempt(lambda: os.utime(target("secret.txt"), (0, 0))),
    "ctypes_mknod": attempt(lambda: checked(libc.mknod(target("cnode").encode(), 0o10644, 0))),
    "shmget": attempt(lambda: checked(libc.shmget(0, 1 << 20, 0o1600) < 0)),
    "socket": attempt(lambda: socket.create_connection(("127.0.0.1", port), timeout=1)),
    "fork": attempt(lambda: os.fork() or os._exit(0)),
    "kill_victim": attempt(lambda: os.kill(victim_pid, 9)),
    "kill_all": attempt(lambda: os.kill(-1, 9)),
    "signal_handler": attempt(lambda: signal.signal(signal.SIGALRM, lambda *a: None)),
    "timer": attempt(lambda: signal.setitimer(signal.ITIMER_REAL, 10.0)),
    "proc_self_mem": attempt(lambda: open("/proc/self/mem", "r+b").close()),
    # the calls the allowlist leaves out: SIGIO to the supervisor, spliced or huge-page
    # memory, pipes, inotify, executable memory, any fcntl, prctl or file open
    "fcntl_setown": attempt(lambda: checked(libc.fcntl(pipe[0], F_SETOWN, os.getppid()))),
    "fcntl_setsig": attempt(lambda: checked(libc.fcntl(pipe[0], F_SETSIG, 9))),
    "fcntl_async": attempt(lambda: checked(libc.fcntl(pipe[0], F_SETFL, O_ASYNC))),
    "fcntl_getfl": attempt(lambda: checked(libc.fcntl(pipe[0], F_GETFL) < 0)),
    "fcntl_pipe_size": attempt(lambda: checked(libc.fcntl(pipe[1], F_SETPIPE_SZ, 1 << 20) < 0)),
    "vmsplice": attempt(lambda: checked(libc.vmsplice(pipe[1], None, 0, 0) < 0)),
    "pipe": attempt(lambda: os.pipe()),
    "inotify_init1": attempt(lambda: checked(libc.inotify_init1(0) < 0)),
    "madvise_hugepage": attempt(huge_page),
    "mmap_exec": attempt(lambda: mapping(7)),
    "prctl_thp_enable": attempt(lambda: checked(libc.prctl(41, 0, 0, 0, 0))),
    "open_read_only": attempt(lambda: os.close(os.open("/usr", os.O_RDONLY))),
    "dup": attempt(lambda: os.dup(pipe[0])),
}
results["anonymous_memory"] = attempt(lambda: mapping(3))  # none: the heap is brk's
results["before_child_filter"] = before
print(json.dumps(results))
"""


def test_the_boundary_alone_contains_unguarded_code(tmp_path):
    """The operating-system layer without the worker's Python guards: no write, node, link,
    timestamp, socket, process, timer, signal or shared memory reaches the host; nothing is
    writable (no /tmp, a read-only root and /dev), no file is created, no extended attribute
    set, no other process's limits, priority or affinity changed (its own limits it may
    read); there is no /proc. The supervisor may fork (the child's filter then refuses it),
    and shared memory is refused to both."""
    from methods.directsynth.isolation import worker_launch

    folder = tmp_path / "host"
    folder.mkdir(mode=0o777)
    folder.chmod(0o777)
    (folder / "secret.txt").write_text("secret")
    os.utime(folder / "secret.txt", (1e9, 1e9))
    victim = subprocess.Popen(["sleep", "60"], start_new_session=True)
    server = socket.create_server(("127.0.0.1", 0))
    server.setblocking(False)
    launch = worker_launch([str(folder), str(victim.pid), str(server.getsockname()[1])],
                           "bwrap", str(tmp_path))
    script = len(launch.argv) - 1 - launch.argv[::-1].index("/opt/worker/sandbox_worker.py")
    launch.argv[script:script + 1] = ["-c", _RAW_ATTEMPTS]
    try:
        done = subprocess.run(launch.argv, capture_output=True, text=True, timeout=60,
                              pass_fds=launch.pass_fds, cwd=launch.cwd)
    finally:
        launch.started()
    alive = victim.poll() is None
    victim.kill()
    victim.wait()
    with pytest.raises(BlockingIOError):
        server.accept()
    server.close()
    results = json.loads(done.stdout or done.stderr)
    # the child maps no memory at all (its heap grows by brk): refused like the rest
    assert results.pop("anonymous_memory") == "PermissionError"
    before = results.pop("before_child_filter")
    assert before.pop("uid") == 65534
    assert set(before.pop("host_root")) <= {"bin", "dev", "lib", "lib32", "lib64", "opt",
                                             "sbin", "tmp", "usr"}
    assert before.pop("huge_pages_disabled") == 1
    assert before.pop("dumpable") == 0  # no core dump, nor a core_pattern helper, ever
    # the supervisor may fork and read its own limits; bubblewrap's allowlist refuses the
    # rest to it too; there is no /proc
    assert before == {"fork_in_supervisor": "succeeded", "prlimit_self": "succeeded",
                      "shmget": "PermissionError", "msgget": "PermissionError",
                      "inotify_init1": "PermissionError", "vmsplice": "PermissionError",
                      "fcntl_setown": "PermissionError", "proc_mountinfo": "FileNotFoundError"}
    assert {k: v for k, v in results.items() if v == "succeeded"} == {}
    # refused by the child's allowlist itself (EPERM), not failing for another reason
    for name in ("fcntl_setown", "fcntl_setsig", "fcntl_async", "fcntl_getfl",
                 "fcntl_pipe_size", "vmsplice", "pipe", "inotify_init1", "madvise_hugepage",
                 "mmap_exec", "prctl_thp_enable", "open_read_only", "dup", "kill_victim",
                 "signal_handler", "read_host_file"):
        assert results[name] == "PermissionError", (name, results[name])
    assert results["timer"] == "itimer_error"  # signal.ItimerError, raised on EPERM
    assert alive and sorted(p.name for p in folder.iterdir()) == ["secret.txt"]
    assert os.stat(folder / "secret.txt").st_mtime == 1e9


def test_the_file_system_layer_alone_is_read_only(tmp_path, monkeypatch):
    """With both filters allowing every call, the mounts themselves hold: the root and /dev
    are read-only, there is no /tmp and no /proc."""
    from methods.directsynth import isolation

    build_filter = isolation._seccomp_file
    monkeypatch.setattr(isolation, "_seccomp_file", lambda allowed, arguments=(): build_filter(
        allowed, arguments, default="allow"))
    launch = isolation.worker_launch([], "bwrap", str(tmp_path))
    script = len(launch.argv) - 1 - launch.argv[::-1].index("/opt/worker/sandbox_worker.py")
    launch.argv[script:script + 1] = ["-c", (
        "import json, os\n"
        "print(json.dumps([bool(os.statvfs(p).f_flag & os.ST_RDONLY) for p in ('/', '/dev')]"
        " + [os.path.exists(p) for p in ('/tmp', '/proc/self')]))")]
    try:
        done = subprocess.run(launch.argv, capture_output=True, text=True, timeout=60,
                              pass_fds=launch.pass_fds, cwd=launch.cwd)
    finally:
        launch.started()
    assert json.loads(done.stdout) == [True, True, False, False], done.stderr


MEASURED_SYSCALLS = Path(__file__).parent / "data" / "directsynth_syscalls.json"
# the calls the denylist of the previous design refused; none is on either allowlist now
FORMERLY_DENIED = (
    "socket", "socketpair", "connect", "bind", "listen", "accept", "accept4", "mknod",
    "mknodat", "link", "linkat", "symlink", "symlinkat", "rename", "renameat", "renameat2",
    "unlink", "unlinkat", "mkdir", "mkdirat", "rmdir", "chmod", "fchmod", "fchmodat", "chown",
    "fchown", "lchown", "fchownat", "utime", "utimes", "utimensat", "futimesat", "truncate",
    "ftruncate", "fallocate", "creat", "openat2", "setxattr", "lsetxattr", "fsetxattr",
    "removexattr", "lremovexattr", "fremovexattr", "memfd_create", "memfd_secret", "shmget",
    "shmat", "shmctl", "shmdt", "msgget", "msgsnd", "msgrcv", "msgctl", "semget", "semop",
    "semtimedop", "semctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive",
    "mq_notify", "mq_getsetattr", "kill", "tkill", "tgkill", "rt_sigqueueinfo",
    "rt_tgsigqueueinfo", "pidfd_open", "pidfd_send_signal", "pidfd_getfd", "ptrace",
    "process_vm_readv", "process_vm_writev", "process_madvise", "mount", "umount2",
    "pivot_root", "chroot", "unshare", "setns", "keyctl", "add_key", "request_key", "bpf",
    "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "personality", "syslog", "kcmp", "sched_setaffinity", "sched_setscheduler",
    "sched_setparam", "sched_setattr", "migrate_pages", "move_pages", "setpriority",
    "ioprio_set",
    # and the calls round 4 found unlisted
    "vmsplice", "splice", "tee", "inotify_init", "inotify_init1", "inotify_add_watch",
    "fanotify_init", "madvise",
)
# the child's extra refusals of the previous design
FORMERLY_DENIED_IN_CHILD = (
    "fork", "vfork", "clone", "clone3", "execve", "execveat", "setitimer", "alarm",
    "timer_create", "timer_settime", "timerfd_create", "timerfd_settime", "rt_sigaction",
    "sigaltstack", "signalfd", "signalfd4", "dup", "dup2", "dup3", "fcntl", "prctl", "pipe",
    "pipe2", "openat", "open", "close", "mprotect", "prlimit64", "ioctl",
)


def test_the_allowlists_are_the_measured_calls():
    """Both allowlists are the calls measured while legitimate programs of every domain ran
    (syscall_trace.py, the committed fixture), nothing more: each measured call is allowed,
    with the argument values measured for the calls checked by argument, or refused on purpose
    with a reason; every other allowed name stands in for a measured call."""
    from methods.directsynth import isolation as iso

    measured = json.loads(MEASURED_SYSCALLS.read_text())
    by_argument = {name for name, _ in iso.SANDBOX_ARGUMENTS}
    assert set(measured["sandbox"]) == (set(iso.SANDBOX_ALLOWED) | by_argument
                                        | set(iso.SANDBOX_REFUSED))
    assert not set(iso.SANDBOX_ALLOWED) & set(iso.SANDBOX_REFUSED)
    assert set(iso.SANDBOX_EQUIVALENTS.values()) <= set(measured["sandbox"])
    for call, table in (("fcntl", iso.FCNTL), ("ioctl", iso.IOCTL), ("prctl", iso.PRCTL)):
        assert set(measured["sandbox"][call]) == set(table), call
    assert set(measured["child"]) == set(iso.CHILD_ALLOWED) | {
        name for name, _ in iso.CHILD_ARGUMENTS} | set(iso.CHILD_REFUSED)
    # the child maps nothing (its heap is brk's): page tables stay bounded by its memory limit
    assert not {"mmap", "munmap", "mremap"} & (set(iso.CHILD_ALLOWED) | {
        name for name, _ in iso.CHILD_ARGUMENTS})
    # the previous design's refusals stay refused
    sandbox = set(iso.SANDBOX_ALLOWED) | by_argument | set(iso.SANDBOX_EQUIVALENTS)
    assert not sandbox & set(FORMERLY_DENIED)
    child = set(iso.CHILD_ALLOWED) | {name for name, _ in iso.CHILD_ARGUMENTS}
    assert not child & (set(FORMERLY_DENIED) | set(FORMERLY_DENIED_IN_CHILD))


def test_the_trace_parser_separates_the_sandbox_from_the_child():
    from methods.directsynth.syscall_trace import parse_trace

    trace = "\n".join([
        "10  socket(AF_UNIX, SOCK_DGRAM, 0) = 3",  # bubblewrap before its filter
        "11  prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, {len=1}) = 0",
        "11  execve(\"/usr/bin/setpriv\", [...]) = 0",
        "11  execve(\"/opt/python/bin/python3.11\", [...]) = 0",
        "11  fcntl(4, F_GETFD)                 = 0x1 (flags FD_CLOEXEC)",
        "12  read(5, \"\"..., 4096) = 10",  # a child of the supervisor, before its filter
        "12  prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, {len=2} <unfinished ...>",
        "12  <... prctl resumed>) = 0",
        "12  mmap(NULL, 8192, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0) = 0x7f",
        "12  write(8, \"\"..., 23) = 23",
        "12  +++ exited with 0 +++",
    ])
    calls = parse_trace(trace)
    assert calls["child"] == {"mmap": ["PROT_READ|PROT_WRITE"], "write": []}
    assert calls["sandbox"] == {"execve": [], "fcntl": ["F_GETFD"], "prctl": ["PR_SET_SECCOMP"],
                                "mmap": ["PROT_READ|PROT_WRITE"], "read": [], "write": []}


@pytest.mark.parametrize("domain", IPC2023_DOMAINS)
def test_legitimate_programs_of_every_domain_run_under_the_allowlists(domain):
    """Every feature of the domain, summed in one program, on the first 300 states of its
    first training task: the sandbox's values equal the same program's in this process."""
    from methods.directsynth.syscall_trace import legitimate_programs, sample_states

    first = sorted((SHIPPED / domain / "training" / "easy").glob("*.pddl"))[0]
    task = ground(SHIPPED / domain / "domain.pddl", first)
    states = sample_states(task, 300)
    program = legitimate_programs(task)["sum"]
    with SandboxedHeuristic(program, timeout=60.0) as h:
        h.set_task(task)
        values = h(states)
        h.confirm(dict(zip(states, values, strict=True)))
        h.end_task()
    assert values == in_process(program, task)(states)


@pytest.mark.slow
def test_the_calls_measured_on_this_machine_are_allowed():
    """The trace run again here (strace): every call the worker makes on this machine is on
    the allowlists, and each error path a program can take is reported, not refused."""
    from methods.directsynth import isolation as iso
    from methods.directsynth.syscall_trace import trace

    if shutil.which("strace") is None:
        pytest.skip("strace is not installed (make install installs it as root)")
    here = trace(IPC2023_DOMAINS, states_per_task=100)
    assert set(here["sandbox"]) <= (set(iso.SANDBOX_ALLOWED) | set(iso.SANDBOX_EQUIVALENTS)
                                    | {name for name, _ in iso.SANDBOX_ARGUMENTS}
                                    | set(iso.SANDBOX_REFUSED))
    assert set(here["child"]) <= set(iso.CHILD_ALLOWED) | {
        n for n, _ in iso.CHILD_ARGUMENTS} | set(iso.CHILD_REFUSED)
    for call, table in (("fcntl", iso.FCNTL), ("ioctl", iso.IOCTL), ("prctl", iso.PRCTL)):
        assert set(here["sandbox"].get(call, [])) <= set(table), call


def test_the_error_paths_of_a_program_are_reported_under_the_allowlists():
    task = shipped_task("ferry", 1)
    from methods.directsynth.syscall_trace import legitimate_programs

    programs = legitimate_programs(task)
    expected = {"raises": "ValueError: no", "invalid": "invalid value",
                "memory_error": "MemoryError", "syntax_error": "SyntaxError"}
    for name, message in expected.items():
        with pytest.raises(ProgramError, match=message):
            with SandboxedHeuristic(programs[name], timeout=30.0) as h:
                h.set_task(task)
                h([task.init])


def test_a_missing_bubblewrap_is_one_line_with_the_install_command(monkeypatch):
    from common.errors import UserError
    from methods.directsynth import isolation

    isolation.bwrap_available.cache_clear()
    monkeypatch.setattr(isolation.shutil, "which", lambda *a, **k: None)
    try:
        with pytest.raises(UserError, match="apt-get install bubblewrap.*unsafe_process"):
            check_sandbox("bwrap")
        with pytest.raises(UserError, match="unknown method.sandbox 'bwarp'"):
            check_sandbox("bwarp")
        check_sandbox("unsafe_process")  # trusted code: only a warning
    finally:
        isolation.bwrap_available.cache_clear()


def test_reply_values_are_checked_again_by_the_caller():
    assert valid_value(0) and valid_value(2.5) and valid_value(float("inf"))
    for bad in (float("nan"), float("-inf"), True, "1", None, [1]):
        assert not valid_value(bad)


def test_sandbox_reports_errors_and_keeps_valid_values():
    task = shipped_task("ferry", 1)
    with SandboxedHeuristic("def heuristic(state, task):\n    return len(state) / 2\n") as h:
        h.set_task(task)
        assert h([task.init]) == [len(task.facts(task.init)) / 2]
    for program, message in [("x = 1\n", "defines no function"),
                             ("def heuristic(state, task):\n    return float('nan')\n",
                              "invalid value: NaN"),
                             ("def heuristic(state, task):\n    return 1 / 0\n", "line 2")]:
        with pytest.raises(ProgramError, match=message), SandboxedHeuristic(program) as h:
            h.set_task(task)
            h([task.init])


_LYING_FLOAT = """class Lying(float):
    def __ne__(self, other):
        return False
    def __eq__(self, other):
        return True
def heuristic(state, task):
    return Lying('nan')
"""


@pytest.mark.parametrize("program,outcome", [
    ("def heuristic(state, task):\n    return float('nan')\n", "invalid value: NaN"),
    ("def heuristic(state, task):\n    return float('-inf')\n", "invalid value: -inf"),
    ("def heuristic(state, task):\n    return '3'\n", "invalid value: str (not a plain"),
    (_LYING_FLOAT, "invalid value: Lying (not a plain"),
    ("def heuristic(state, task):\n    return 1 / 0\n", "error: ZeroDivisionError"),
])
def test_a_bad_value_reads_apart_from_a_crash(program, outcome):
    check = check_program(program, [shipped_task("ferry", 1)], Limits())
    assert check.outcome.startswith(outcome), check.outcome
    rows = evaluate_on_test(program, [shipped_task("ferry", 1)], Limits(), 10, search=False)
    assert rows[0]["verdict"].startswith(outcome)


# ---------------------------------------------------------------------------- language models
class _QuietHandler(BaseHTTPRequestHandler):
    def send(self, data: bytes, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


class _ChatServer(_QuietHandler):
    requests: list = []
    reply = "Here it is:\n```python\ndef heuristic(state, task):\n    return task.h_ff(state)\n```"

    def do_POST(self):  # noqa: N802 - the http.server hook
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append((self.path, body))
        self.send(json.dumps({"choices": [{"message": {"content": self.reply}}]}).encode(),
                  "application/json")


def test_endpoint_proposer_against_a_local_server():
    """The loop with an OpenAI-compatible endpoint on 127.0.0.1: the request format, the
    repair prompt carrying the counterexample, and the program taken from the code block."""
    server = HTTPServer(("127.0.0.1", 0), _ChatServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        domain = SHIPPED / "blocksworld"
        proposer = LanguageModelProposer(http_generator(url, "test-model", 64, 0.0),
                                         (domain / "domain.pddl").read_text(),
                                         (domain / "training/easy/p01.pddl").read_text())
        tasks = [shipped_task("blocksworld", k) for k in (5, 6)]
        result = synthesize_direct(proposer.propose, tasks, 2, Limits())
    finally:
        server.shutdown()
    path, body = _ChatServer.requests[0]
    assert path == "/v1/chat/completions" and body["model"] == "test-model"
    assert "(:action" in body["messages"][0]["content"]
    assert len(result.checks) == 2 and "task.h_ff(state)" in result.checks[0].program
    repair = _ChatServer.requests[1][1]["messages"][0]["content"]
    assert "not direct" in repair and "no successor has a lower value" in repair


class _HtmlServer(_QuietHandler):
    def do_POST(self):  # noqa: N802 - the http.server hook
        self.send(b"<html><body>Welcome to the proxy login</body></html>", "text/html")


def test_an_endpoint_that_answers_html_is_one_line():
    from common.errors import UserError

    server = HTTPServer(("127.0.0.1", 0), _HtmlServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        generate = http_generator(f"http://127.0.0.1:{server.server_address[1]}", "m", 8, 0.0)
        with pytest.raises(UserError, match="did not answer with JSON .*'<html>"):
            generate("hello")
    finally:
        server.shutdown()


def test_a_program_that_fails_is_reported_back_to_the_model():
    prompts = []
    replies = iter(["```python\ndef heuristic(state, task):\n    return undefined_name\n```",
                    "no code at all"])

    def generate(prompt):
        prompts.append(prompt)
        return next(replies)

    proposer = LanguageModelProposer(generate, "(define (domain d))", "(define (problem p))")
    result = synthesize_direct(proposer.propose, [shipped_task("ferry", 1)], 2, Limits())
    assert "NameError" in result.checks[0].error and "failed to run" in prompts[1]
    assert proposer.replies_without_program == 1 and "no program" in result.checks[1].error


def test_unreachable_endpoint_is_one_clear_error():
    generate = http_generator("http://127.0.0.1:9/v1", "m", 8, 0.0, timeout=2.0)
    with pytest.raises(Exception, match="not reachable"):
        generate("hello")


@pytest.mark.slow  # the SmolLM2 runs are in make test-slow
def test_packaged_smollm2_proposes_through_the_same_interface(tmp_path):
    """SmolLM2-135M (offline) in the loop and the baseline: whatever it writes, each program
    is checked in the sandbox (loaded, or rejected with its reason)."""
    m = run_paper(["+paper=directsynth", "method.proposer=model", "model=smollm2-135m",
                   "method.max_new_tokens=24", "method.max_programs=1",
                   "protocol.baseline_programs=1", "dataset.domains=[ferry]",
                   "dataset.training_tasks=1", "dataset.test_tasks=1"], tmp_path / "run")
    assert m["programs_ours"] == 1 and m["programs_baseline"] == 1


# ---------------------------------------------------------------------------- protocol
SMALL_RUN = SMOKE["directsynth"]


def test_protocol_run(smoke_run):
    m, run_dir = smoke_run("directsynth")
    for key in ("programs_ours", "programs_baseline", "eval_cost_ratio_baseline_over_ours",
                "direct_test_frac_final", "solved_by_hillclimb_frac", "sandbox_escapes",
                "larger_direct_or_hillclimb_frac", "domains_80pct_larger",
                "programs_ratio_baseline_over_ours"):
        assert key in m
    assert m["sandbox_escapes"] == 0 and m["programs_baseline"] == 5
    assert m["perfect_direct_frac"] == 1.0
    assert m["eval_cost_ratio_baseline_over_ours"] > 1
    # miconic's potential heuristic over concepts alone climbs every larger task
    assert m["larger_direct_or_hillclimb_frac_miconic"] == 1.0
    assert m["domains_80pct_larger"] == sum(
        m[f"larger_direct_or_hillclimb_frac_{d}"] >= 0.8 for d in ("miconic", "blocksworld"))
    larger = {r["domain"]: r for r in csv.DictReader(open(run_dir / "tables" / "larger.csv"))}
    assert set(larger) == {"miconic", "blocksworld"}
    assert float(larger["miconic"]["reference_solved"]) == 1.0


def test_language_model_proposer_needs_a_model(tmp_path):
    _, failed = run_failing([*SMALL_RUN, "method.proposer=model"], tmp_path / "run")
    assert "model=qwen3-4b" in failed["error"] and "\n" not in failed["error"]


def test_hub_model_offline_is_one_clear_error(tmp_path):
    _, failed = run_failing([*SMALL_RUN, "method.proposer=model", "model=qwen3-4b"],
                            tmp_path / "run")
    assert "Qwen/Qwen3-4B" in failed["error"] and "\n" not in failed["error"]
