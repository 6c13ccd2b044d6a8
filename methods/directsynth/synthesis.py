"""Counterexample-guided synthesis of direct heuristics and the sample-and-select baseline.

- :func:`synthesize_direct` (the paper's loop): propose a program, check directness on the
  training tasks in a fixed order, stop at the first violation and hand the counterexample
  back to the proposer; repeat until a program passes every training task or the budget ends.
- :func:`sample_and_select` (Corrêa, Pereira & Seipp 2025): draw ``n`` programs from the same
  proposer without feedback, run GBFS with each on every training task and keep the one that
  solves the most (ties: fewer expansions); :func:`baseline_at_equal_quality`: the smallest
  sample whose selected program is as good on test tasks as a given target.

Every program runs in a :class:`SandboxedHeuristic`; heuristic evaluations (states whose h a
program computed) and wall-clock seconds are counted for both.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from methods.directsynth.sandbox import (
    InvalidValue,
    ProgramError,
    ProtocolViolation,
    SandboxedHeuristic,
    TooSlow,
)
from methods.directsynth.search import Counterexample, check_direct, gbfs
from methods.directsynth.strips import Task


@dataclass
class Limits:
    max_states: int = 2000  # improving-closure states per directness check
    max_expansions: int = 2000  # GBFS expansions per task
    timeout: float = 20.0  # seconds per batch of heuristic evaluations
    memory_mb: int = 512
    sandbox: str = "bwrap"  # bwrap | unsafe_process (isolation.py)
    # a program's total seconds per task, and over one run (every task one worker is given),
    # in units of ``timeout``: past either it is stopped as too slow
    task_budget: float = 3.0
    run_budget: float = 10.0


@dataclass
class ProgramCheck:
    program: str
    tasks_passed: int = 0  # training tasks (in order) before the first violation
    proven: int = 0  # of those, with the whole improving closure explored
    counterexample: Counterexample | None = None
    error: str = ""
    evaluations: int = 0
    seconds: float = 0.0
    error_kind: str = ""  # ProgramRun.kind

    @property
    def accepted(self) -> bool:
        return not self.error and self.counterexample is None

    @property
    def outcome(self) -> str:
        if self.error:
            return outcome_text(self.error, self.error_kind)
        if self.counterexample is not None:
            return f"counterexample on {self.counterexample.task}"
        return "direct on every training task"


@dataclass
class SynthesisResult:
    checks: list[ProgramCheck] = field(default_factory=list)
    proposer_evaluations: int = 0

    @property
    def final(self) -> ProgramCheck | None:
        """The accepted program, else the one that passed the most training tasks."""
        if not self.checks:
            return None
        return max(self.checks, key=lambda c: (c.accepted, c.tasks_passed, c.proven))

    @property
    def succeeded(self) -> bool:
        return bool(self.checks) and self.checks[-1].accepted

    @property
    def evaluations(self) -> int:
        return sum(c.evaluations for c in self.checks) + self.proposer_evaluations


@dataclass
class ProgramRun:
    error: str  # "" when the program ran on every task it was given
    seconds: float
    kind: str = ""  # "error", "invalid value", "too slow" or "protocol violation"

    @property
    def void(self) -> bool:
        """A protocol violation: none of the program's results may be kept."""
        return self.kind == "protocol violation"


def outcome_text(error: str, kind: str) -> str:
    """How a program's failure reads in the per-program table: a bad value, a program too
    slow for its budget and a protocol violation apart from a crash (their messages already
    say which they are)."""
    return error if kind in ("invalid value", "too slow", "protocol violation") \
        else f"error: {error}"


def run_over_tasks(program: str, tasks: list[Task], limits: Limits, step) -> ProgramRun:
    """Run ``program`` in one sandboxed worker over the tasks in order; ``step(task, h)``
    returns True to stop early. Each task's run ends with the supervisor's check of the
    program's result stream; on a violation the run is void (callers drop every result of
    the program, also those of earlier tasks)."""
    start, error, kind = time.perf_counter(), "", ""
    try:
        with SandboxedHeuristic(program, limits.timeout, limits.memory_mb,
                                sandbox=limits.sandbox,
                                task_budget=limits.task_budget * limits.timeout,
                                run_budget=limits.run_budget * limits.timeout) as h:
            for task in tasks:
                h.set_task(task)
                stop = step(task, h)
                h.end_task()
                if stop:
                    break
    except ProtocolViolation as err:
        error, kind = str(err), "protocol violation"
    except InvalidValue as err:
        error, kind = str(err), "invalid value"
    except TooSlow as err:
        error, kind = str(err), "too slow"
    except ProgramError as err:
        error, kind = str(err), "error"
    return ProgramRun(error, time.perf_counter() - start, kind)


def check_program(program: str, tasks: list[Task], limits: Limits) -> ProgramCheck:
    """Directness on each task in order, stopping at the first counterexample or error; the
    values each verdict rests on are asked again in a fresh process (a program whose
    answers differ is void). Those repeats are not counted as evaluations."""
    check = ProgramCheck(program)

    def step(task, h) -> bool:
        result = check_direct(task, h, limits.max_states)
        h.confirm(result.evidence)  # the verdict's values, again in a fresh process
        check.evaluations += result.evaluations
        check.counterexample = result.counterexample
        check.tasks_passed += result.counterexample is None
        check.proven += result.direct
        return result.counterexample is not None

    run = run_over_tasks(program, tasks, limits, step)
    check.error, check.seconds, check.error_kind = run.error, run.seconds, run.kind
    if run.void:
        check.tasks_passed, check.proven, check.counterexample = 0, 0, None
    return check


def synthesize_direct(propose: Callable, tasks: list[Task], max_programs: int,
                      limits: Limits) -> SynthesisResult:
    """The counterexample-guided loop; ``propose(feedback, tasks_by_name)`` returns a program
    or None when the proposer has nothing left. ``feedback`` holds, per rejected program,
    its counterexample or (when it failed to run) its error message."""
    result, feedback = SynthesisResult(), []
    by_name = {t.name: t for t in tasks}
    for _ in range(max_programs):
        program = propose(feedback, by_name)
        if program is None:
            break
        check = check_program(program, tasks, limits)
        result.checks.append(check)
        if check.accepted:
            break
        feedback.append(check.counterexample or check.error)
    return result


@dataclass
class CoverageCheck:
    program: str
    solved: int = 0
    expansions: int = 0
    error: str = ""
    evaluations: int = 0
    seconds: float = 0.0
    error_kind: str = ""  # ProgramRun.kind

    @property
    def outcome(self) -> str:
        return outcome_text(self.error, self.error_kind) if self.error else \
            f"GBFS solved {self.solved}"


def gbfs_coverage(program: str, tasks: list[Task], limits: Limits) -> CoverageCheck:
    check = CoverageCheck(program)

    def step(task, h) -> bool:
        result = gbfs(task, h, limits.max_expansions)
        check.solved += result.solved
        check.expansions += result.expansions
        check.evaluations += result.evaluations
        return False

    run = run_over_tasks(program, tasks, limits, step)
    check.error, check.seconds, check.error_kind = run.error, run.seconds, run.kind
    # any error excludes the program from the selection
    return check


def sample_and_select(propose: Callable, tasks: list[Task], n: int,
                      limits: Limits) -> tuple[CoverageCheck | None, list[CoverageCheck]]:
    """``n`` programs without feedback, each scored by GBFS coverage; the best and all."""
    by_name = {t.name: t for t in tasks}
    checks = []
    for _ in range(n):
        program = propose([], by_name)
        if program is None:
            break
        checks.append(gbfs_coverage(program, tasks, limits))
    valid = [c for c in checks if not c.error]
    best = max(valid, key=lambda c: (c.solved, -c.expansions)) if valid else None
    return best, checks


def baseline_at_equal_quality(sampled: list[CoverageCheck], target: float,
                              quality: Callable[[str], float]) -> int | None:
    """The smallest sample size whose selected program (most training tasks solved by GBFS,
    then fewest expansions) reaches ``quality(program) >= target``; None when no prefix of
    ``sampled`` does. Each distinct selected program is scored once."""
    scores: dict[str, float] = {}
    best = None
    for m, check in enumerate(sampled, start=1):
        if not check.error and (best is None or (check.solved, -check.expansions)
                                > (best.solved, -best.expansions)):
            best = check
        if best is None:
            continue
        if best.program not in scores:
            scores[best.program] = quality(best.program)
        if scores[best.program] >= target:
            return m
    return None
