"""Run untrusted heuristic programs out of process, behind an operating-system boundary
(isolation.py) and a supervisor that never runs the program (sandbox_worker.py).

One long-lived worker per program evaluates batches of states, so a task with thousands of
successors per state costs one round trip per batch, not one process per state; the program
itself runs in one confined child per task. Every request has a wall-clock limit, each
program a total time budget per task and over its run (so a program that answers every
request just inside the limit is still stopped: :class:`TooSlow`), and every request a fresh
random id that the supervisor's reply must carry (the program's process never sees either
the id or this channel); the reply must be exactly one line with nothing after it, and every
value is checked again here (a number, int or float, not NaN or -inf). A worker that
overruns its time, dies or answers garbage is killed and the program reported as failed
with the reason. When the supervisor finds that the program wrote to its own result pipe,
the error is a :class:`ProtocolViolation`: its earlier answers may be forged, and
:func:`~methods.directsynth.synthesis.run_over_tasks` voids the whole run. The same holds
for a program whose answers, asked again in a fresh process (:meth:`SandboxedHeuristic.
confirm`), differ: :class:`Nondeterministic`.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import secrets
import select
import shutil
import subprocess
import tempfile
import time

from common.errors import UserError
from methods.directsynth.features import task_spec
from methods.directsynth.isolation import SANDBOXES, bwrap_available, worker_launch
from methods.directsynth.strips import Task, bits

# the supervisor's reply: a batch's values (at most MAX_BATCH) or a message, and the id
MAX_BATCH = 10_000
MAX_REPLY_BYTES = 2**20

log = logging.getLogger(__name__)


class ProgramError(Exception):
    """The program failed: it raised, returned a non-number, ran out of time or memory."""


class InvalidValue(ProgramError):
    """The heuristic returned a value that is not one (NaN, -inf, a non-number)."""


class TooSlow(ProgramError):
    """The program used up its time budget for a task or for its run: too slow, not a
    crash (each request may still have been inside the per-request limit)."""


class ProtocolViolation(ProgramError):
    """The program wrote to its result channel itself (or its process ended out of turn):
    values it answered before may be forged, so the caller voids all of its results."""


class Nondeterministic(ProtocolViolation):
    """The program answered a state differently when asked again in a fresh process: its
    values depend on something other than the state (what it was asked before, say), so
    none of them can be trusted."""


def valid_value(value) -> bool:
    """A heuristic value: an int or float (not bool), not NaN, and not -inf (+inf marks a
    dead end)."""
    return type(value) in (int, float) and not math.isnan(value) and value != -math.inf


class SandboxedHeuristic:
    """A heuristic program in a sandboxed worker; call it with a list of bitmask states.

    ``timeout``: seconds per request; ``task_budget`` and ``run_budget``: seconds of requests
    per task and over the worker's whole run (every task it is given), after which the
    program is stopped as :class:`TooSlow`. ``sandbox``: ``bwrap`` (the default, an
    operating-system boundary) or ``unsafe_process`` (a plain subprocess with the Python
    guards only, for trusted programs)."""

    def __init__(self, program: str, timeout: float = 10.0, memory_mb: int = 512,
                 batch: int = 512, sandbox: str = "bwrap", task_budget: float = math.inf,
                 run_budget: float = math.inf):
        if not 1 <= batch <= MAX_BATCH:
            raise ValueError(f"batch must be between 1 and {MAX_BATCH}, not {batch}")
        self.program, self.timeout, self.batch = program, timeout, batch
        self.task_budget, self.run_budget = task_budget, run_budget
        self.seconds = 0.0  # wall-clock time spent in the worker
        self.requests = 0
        self.task_seconds, self.task_requests = 0.0, 0
        self.scratch = tempfile.mkdtemp(prefix="heuristic-")
        self.proc = None
        try:
            launch = worker_launch([str(memory_mb * 2**20)], sandbox, self.scratch)
            try:
                self.proc = subprocess.Popen(
                    launch.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL, cwd=launch.cwd, env={"PATH": "/usr/bin:/bin"},
                    start_new_session=True, pass_fds=launch.pass_fds, bufsize=0)
            finally:
                launch.started()
        except BaseException:
            shutil.rmtree(self.scratch, ignore_errors=True)
            raise
        self._task = None
        try:
            self._request({"cmd": "load", "program": program})
        except BaseException:  # a program that does not load: no worker left behind
            self.close()
            raise

    def set_task(self, task: Task):
        if self._task is not task:
            self.task_seconds, self.task_requests = 0.0, 0
            self._request({"cmd": "task", "task": task_spec(task)})
            self._task = task

    def end_task(self):
        """End the task's run of the program; ProtocolViolation when its result stream was
        not exactly its answers (results of the task must be kept only after this)."""
        self._request({"cmd": "end"})

    def confirm(self, answers: dict[int, float]) -> None:
        """Ask the states of ``answers`` (state -> the value the program gave) again, in
        reverse order, of a fresh run of the program on the current task (a new child,
        after the current one's result stream was checked); :class:`Nondeterministic` when
        a value differs. A heuristic is a function of the state: a program that answers
        from a counter could make every explored state look improving."""
        if not answers:
            return
        self.end_task()
        states = list(answers)[::-1]
        for state, value in zip(states, self(states), strict=True):
            if value != answers[state]:
                self.close()
                raise Nondeterministic(
                    f"nondeterministic: the program answered a state of {self._task.name} "
                    f"with {answers[state]:g}, and with {value:g} when asked again in a "
                    "fresh process")

    def __call__(self, states) -> list[float]:
        out = []
        for start in range(0, len(states), self.batch):
            chunk = states[start:start + self.batch]
            reply = self._request({"cmd": "eval", "states": [list(bits(s)) for s in chunk]})
            values = reply.get("h")
            if not isinstance(values, list) or len(values) != len(chunk) or not all(
                    valid_value(v) for v in values):
                self._fail("the worker returned a malformed reply")
            out.extend(float(v) for v in values)
        return out

    def _fail(self, reason: str):
        self.close()
        raise ProgramError(reason)

    def _request(self, message: dict) -> dict:
        if self.proc.poll() is not None:
            raise ProgramError(f"the worker is not running (exit code {self.proc.returncode})")
        budget_left = min(self.task_budget - self.task_seconds, self.run_budget - self.seconds)
        if budget_left <= 0:
            self._too_slow()
        nonce = secrets.token_hex(16)
        start = time.perf_counter()
        try:
            if self._pending():
                self._fail("the program wrote to the reply channel")
            payload = memoryview((json.dumps({**message, "id": nonce}) + "\n").encode())
            while payload:
                payload = payload[os.write(self.proc.stdin.fileno(), payload):]
            line = self._read_line(start, min(self.timeout, budget_left))
        except (BrokenPipeError, OSError) as err:
            self.close()
            raise ProgramError(f"the worker died: {err}") from err
        finally:
            spent = time.perf_counter() - start
            self.seconds += spent
            self.task_seconds += spent
            self.requests += 1
            self.task_requests += 1
        if line is None:
            self._too_slow()
        try:
            reply = json.loads(line)
        except (ValueError, RecursionError):
            reply = None
        if not isinstance(reply, dict) or reply.get("id") != nonce:
            self._fail("the worker returned a malformed reply (or the program wrote to the "
                       "reply channel)")
        if self._pending():
            self._fail("the program wrote to the reply channel")
        if "invalid" in reply:
            raise InvalidValue(str(reply["invalid"])[:500])
        if "error" in reply:
            error = ProtocolViolation if reply.get("violation") is True else ProgramError
            raise error(str(reply["error"])[:500])
        return reply

    def _too_slow(self):
        self.close()
        per_task = self.task_seconds >= self.task_budget
        raise TooSlow(f"too slow: {self.task_seconds if per_task else self.seconds:.1f} s over "
                      f"{self.task_requests if per_task else self.requests} requests (budget "
                      f"{self.task_budget if per_task else self.run_budget:g} s "
                      f"{'per task' if per_task else 'per run'})")

    def _pending(self) -> bool:
        ready, _, _ = select.select([self.proc.stdout], [], [], 0)
        return bool(ready)

    def _read_line(self, start: float, limit: float) -> bytes | None:
        """Exactly one line from the worker within ``limit`` seconds of ``start``, read in
        bounded chunks; bytes after its newline are a protocol error. Past the per-request
        timeout the program failed; None when the rest of its budget ended first."""
        data, scanned = bytearray(), 0
        while (end := data.find(b"\n", scanned)) < 0:
            scanned = len(data)
            if scanned > MAX_REPLY_BYTES:
                self._fail("the worker's reply is too large")
            left = start + limit - time.perf_counter()
            ready, _, _ = select.select([self.proc.stdout], [], [], max(left, 0))
            if not ready:
                if limit < self.timeout:
                    return None  # the budget ended before the per-request limit
                self._fail(f"timeout: no answer within {self.timeout:g} s")
            chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
            if not chunk:
                self._fail(f"the worker died (exit code {self.proc.wait()})")
            data += chunk
        if end + 1 != len(data):
            self._fail("the program wrote to the reply channel")
        return bytes(data[:end])

    def close(self):
        if self.proc is not None:
            if self.proc.poll() is None:
                try:
                    os.killpg(self.proc.pid, 9)
                except ProcessLookupError:
                    pass
            self.proc.wait()
            for stream in (self.proc.stdin, self.proc.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
        shutil.rmtree(self.scratch, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def check_sandbox(sandbox: str) -> None:
    """Refuse (UserError, one line) when ``sandbox`` is unknown or cannot run here; warn
    for ``unsafe_process``. For ``bwrap``, one program is loaded in a worker first, so an
    allowlist that refuses a call this machine's interpreter or C library needs fails here,
    before any work."""
    if sandbox == "unsafe_process":
        log.warning("method.sandbox=unsafe_process: generated programs run without an "
                    "operating-system boundary (only for trusted programs)")
    elif sandbox == "bwrap":
        bwrap_available()
        _probe_worker()
    else:
        raise UserError(f"unknown method.sandbox '{sandbox}' ({', '.join(SANDBOXES)})")


@functools.cache
def _probe_worker() -> None:
    try:
        SandboxedHeuristic("def heuristic(state, task):\n    return 0\n", timeout=30.0).close()
    except ProgramError as err:
        raise UserError(f"the heuristic sandbox's worker does not start on this machine ({err});"
                        " its system-call allowlist may lack a call this Python or C library "
                        "makes: `python -m methods.directsynth.syscall_trace` shows them "
                        "(isolation.py), or set method.sandbox=unsafe_process to run trusted "
                        "programs without isolation") from None
