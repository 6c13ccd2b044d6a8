"""Run untrusted heuristic programs out of process (see sandbox_worker.py for the lock-down).

One long-lived worker per program evaluates batches of states, so a task with thousands of
successors per state costs one round trip per batch, not one process per state. Every
request has a wall-clock limit; a worker that overruns it, dies or answers garbage is killed
and the program is reported as failed with the reason. The worker runs with an empty
environment in a scratch directory that is removed afterwards.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from methods.directsynth.features import task_spec
from methods.directsynth.strips import Task, bits

WORKER = Path(__file__).with_name("sandbox_worker.py")


class ProgramError(Exception):
    """The program failed: it raised, returned a non-number, ran out of time or memory."""


class SandboxedHeuristic:
    """A heuristic program in a sandboxed worker; call it with a list of bitmask states."""

    def __init__(self, program: str, timeout: float = 10.0, memory_mb: int = 512,
                 batch: int = 512):
        self.program, self.timeout, self.batch = program, timeout, batch
        self.seconds = 0.0  # wall-clock time spent in the worker
        self.scratch = tempfile.mkdtemp(prefix="heuristic-")
        self.proc = subprocess.Popen(
            [sys.executable, "-I", str(WORKER), str(memory_mb * 2**20)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            cwd=self.scratch, env={"PATH": "/usr/bin:/bin"}, start_new_session=True)
        self._task = None
        self._request({"cmd": "load", "program": program})

    def set_task(self, task: Task):
        if self._task is not task:
            self._request({"cmd": "task", "task": task_spec(task)})
            self._task = task

    def __call__(self, states) -> list[float]:
        out = []
        for start in range(0, len(states), self.batch):
            chunk = states[start:start + self.batch]
            reply = self._request({"cmd": "eval", "states": [list(bits(s)) for s in chunk]})
            values = reply.get("h")
            if not isinstance(values, list) or len(values) != len(chunk) or not all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
                self.close()
                raise ProgramError("the worker returned a malformed reply")
            out.extend(float(v) for v in values)
        return out

    def _request(self, message: dict) -> dict:
        if self.proc.poll() is not None:
            raise ProgramError(f"the worker is not running (exit code {self.proc.returncode})")
        start = time.perf_counter()
        try:
            self.proc.stdin.write((json.dumps(message) + "\n").encode())
            self.proc.stdin.flush()
            ready, _, _ = select.select([self.proc.stdout], [], [], self.timeout)
            line = self.proc.stdout.readline() if ready else b""
        except (BrokenPipeError, OSError) as err:
            self.close()
            raise ProgramError(f"the worker died: {err}") from err
        finally:
            self.seconds += time.perf_counter() - start
        if not ready:
            self.close()
            raise ProgramError(f"timeout: no answer within {self.timeout:g} s")
        if not line:
            code = self.proc.wait()
            self.close()
            raise ProgramError(f"the worker died (exit code {code})")
        try:
            reply = json.loads(line)
        except ValueError as err:
            self.close()
            raise ProgramError("the worker returned a malformed reply") from err
        if not isinstance(reply, dict):
            self.close()
            raise ProgramError("the worker returned a malformed reply")
        if "error" in reply:
            raise ProgramError(str(reply["error"])[:500])
        return reply

    def close(self):
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
