"""The worker that runs one untrusted heuristic program (started by sandbox.py as
``python -I -B sandbox_worker.py <memory_bytes> [<filter_fd>]``, by default inside the
operating-system boundary of isolation.py).

The worker is two processes. This one, the supervisor, never runs the program: it reads the
caller's requests, keeps the task and frames every reply with its request's id. For each
task it forks a child that

1. closes every descriptor but its own job and result pipes (the caller's channels, and so
   the request ids, are out of its reach) and points 0-2 at /dev/null;
2. confines itself: address-space, file-size, process and open-file limits; the second
   seccomp filter read from ``filter_fd`` (no process or thread creation, no timer or signal
   handler, no ``dup``: the program's code runs only while the child serves a request, and
   the result pipe stays the one the supervisor reads); an audit hook that refuses file
   opens, sockets, subprocesses, process control and ctypes, and a builtins table without
   ``open``, ``exec``, ``eval``, ``compile``, ``input`` or ``breakpoint`` and with an
   ``__import__`` that admits a few pure standard-library modules (these two are the second
   layer: a program that reaches ``sys`` through introspection can undo them);
3. runs the program's text once, then answers each job line (a sequence number and the
   states) with one result line carrying the same number, and exits at the end of its jobs.

The supervisor holds the child to that stream: one line per job, in order, nothing between
or after, and a clean exit when the task ends. A program that writes to its result pipe
itself (a forged value, then a raise) breaks the stream: the supervisor sees it at the next
job or at the end of the task at the latest, and reports a protocol violation, on which the
caller voids every result of the program (synthesis.py). A program that never returns and
answers the jobs itself behaves, to the caller, as a heuristic of those values; its code
ends with the task's child.
"""

import builtins
import collections
import ctypes
import functools
import gc
import heapq
import importlib.util
import io
import itertools
import json
import math
import operator
import os
import resource
import statistics
import sys
import traceback

ALLOWED_MODULES = {"math": math, "itertools": itertools, "collections": collections,
                   "heapq": heapq, "functools": functools, "operator": operator,
                   "statistics": statistics}
BLOCKED_EVENTS = ("open", "socket.", "subprocess.", "os.system", "os.exec", "os.spawn",
                  "os.posix_spawn", "os.fork", "os.forkpty", "os.kill", "os.killpg",
                  "os.remove", "os.unlink", "os.rename", "os.rmdir", "os.mkdir", "os.symlink",
                  "os.link", "os.chmod", "os.chown", "os.truncate", "os.chdir", "os.putenv",
                  "os.unsetenv", "shutil.", "ctypes.", "mmap.", "pty.", "urllib.", "webbrowser.",
                  "sys.addaudithook", "signal.")
REMOVED_BUILTINS = ("open", "exec", "eval", "compile", "input", "breakpoint", "help", "exit",
                    "quit", "copyright", "credits", "license", "memoryview", "globals",
                    "vars", "locals")
MAX_RESULT_BYTES = 64 * 2**20
CHILD_OPEN_FILES = 16  # 0-2, the result pipe, and a few pipes at most (their buffers count)
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _load_features():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "features.py")
    spec = importlib.util.spec_from_file_location("sandbox_features", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _audit(event, args):
    if event.startswith(BLOCKED_EVENTS):
        raise PermissionError(f"sandbox: {event} is not allowed")


def _restricted_import(name, globals=None, locals=None, fromlist=(), level=0):
    root = name.split(".")[0]
    if level or root not in ALLOWED_MODULES:
        raise ImportError(f"sandbox: import of {name} is not allowed "
                          f"(allowed: {', '.join(sorted(ALLOWED_MODULES))})")
    return ALLOWED_MODULES[root]


def _safe_builtins() -> dict:
    table = {k: v for k, v in vars(builtins).items() if k not in REMOVED_BUILTINS}
    table["__import__"] = _restricted_import
    return table


def _install_filter(program: bytes) -> None:
    """Load a compiled seccomp filter (an array of struct sock_filter) into this process."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    code = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.addressof(code))
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP) failed")


def _confine(memory_bytes: int, child_filter: bytes | None) -> None:
    """Everything the child does before the program's first line runs."""
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
    resource.setrlimit(resource.RLIMIT_NOFILE, (CHILD_OPEN_FILES, CHILD_OPEN_FILES))
    if child_filter is not None:
        _install_filter(child_filter)
    sys.modules.pop("ctypes", None)
    sys.addaudithook(_audit)


class InvalidValue(Exception):
    """The heuristic returned something that is not a heuristic value."""


def _number(value) -> float:
    """A plain int or float (no bool, no subclass, whose comparisons could lie), not NaN and
    not -inf (+inf marks a dead end)."""
    if type(value) not in (int, float):
        raise InvalidValue(f"{type(value).__name__} (not a plain int or float)")
    value = float(value)
    if math.isnan(value):
        raise InvalidValue("NaN")
    if value == -math.inf:
        raise InvalidValue("-inf")
    return value


def _program_error(err: BaseException) -> str:
    lines = [n for f, n in traceback.walk_tb(err.__traceback__)
             if f.f_code.co_filename == "<heuristic>"]
    where = f"(line {lines[-1]})" if lines else ""
    return f"{type(err).__name__}: {err} {where}".strip()


def _load_program(code):
    """In the child: the program's text; its ``heuristic``, or the error that says why not."""
    try:
        namespace = {"__builtins__": _safe_builtins(), "__name__": "heuristic_program"}
        exec(code, namespace)
        heuristic = namespace.get("heuristic")
        if not callable(heuristic):
            raise NameError("the program defines no function heuristic(state, task)")
        return heuristic, None
    except MemoryError:
        return None, "MemoryError: the program exceeded the memory limit"
    except BaseException as err:  # noqa: BLE001 - anything the program raises is reported
        return None, _program_error(err)


def _evaluate(heuristic, task, states) -> dict:
    try:
        atoms = task.atoms
        return {"h": [_number(heuristic(frozenset(atoms[i] for i in ids), task))
                      for ids in states]}
    except InvalidValue as err:
        return {"invalid": f"invalid value: {err}"}
    except MemoryError:
        return {"error": "MemoryError: the program exceeded the memory limit"}
    except BaseException as err:  # noqa: BLE001 - anything the program raises is reported
        return {"error": _program_error(err)}


def _child(job_fd: int, result_fd: int, memory_bytes: int, child_filter, code, task) -> None:
    """A forked child: drop the supervisor's descriptors, confine itself, load the program,
    answer its jobs, exit at their end."""
    status = 1
    try:
        keep = sorted((job_fd, result_fd))
        os.closerange(3, keep[0])
        os.closerange(keep[0] + 1, keep[1])
        os.closerange(keep[1] + 1, os.sysconf("SC_OPEN_MAX"))
        jobs = os.fdopen(job_fd, "rb")  # before the audit hook, which refuses io.open
        try:
            _confine(memory_bytes, child_filter)
        except BaseException as err:  # noqa: BLE001 - never run the program unconfined
            heuristic, error = None, f"the sandbox could not confine the program: {err}"
        else:
            heuristic, error = _load_program(code)
        for line in jobs:
            job = json.loads(line)
            if error:
                reply = {"error": error}
            elif job["states"] is None:
                reply = {"ok": True}
            else:
                reply = _evaluate(heuristic, task, job["states"])
            reply["seq"] = job["seq"]
            data = memoryview((json.dumps(reply) + "\n").encode())
            while data:
                data = data[os.write(result_fd, data):]
        status = 0
    finally:
        os._exit(status)


class Violation(Exception):
    """The child's result stream is not one line per job, in order, then a clean exit."""


def _valid_result(reply, states) -> bool:
    if not isinstance(reply, dict) or len(reply) != 1:
        return False
    (key, value), = reply.items()
    if key in ("error", "invalid"):
        return isinstance(value, str)
    if key == "ok":
        return value is True and states is None
    return (key == "h" and states is not None and isinstance(value, list)
            and len(value) == len(states)
            and all(type(v) is float and v == v and v != -math.inf for v in value))


class Child:
    """The confined process that runs the program for one task."""

    def __init__(self, memory_bytes: int, child_filter, code, task):
        self.code, self.task, self.seq, self.buffer = code, task, 0, b""
        job_read, self.job = os.pipe()
        self.result, result_write = os.pipe()
        gc.freeze()  # the child's collector leaves the supervisor's objects (and pages) alone
        self.pid = os.fork()
        if self.pid == 0:
            os.close(self.job)
            os.close(self.result)
            _child(job_read, result_write, memory_bytes, child_filter, code, task)
        os.close(job_read)
        os.close(result_write)

    def run(self, states) -> dict:
        """One job: its reply, or an error from the program; Violation when the stream
        breaks."""
        self.seq += 1
        payload = memoryview((json.dumps({"seq": self.seq, "states": states}) + "\n").encode())
        try:
            while payload:
                payload = payload[os.write(self.job, payload):]
        except OSError:
            raise Violation("the program's process is gone") from None
        while b"\n" not in self.buffer:
            chunk = os.read(self.result, 1 << 20)
            if not chunk:
                raise Violation("the program's process ended before answering")
            self.buffer += chunk
            if len(self.buffer) > MAX_RESULT_BYTES:
                raise Violation("the program's result is too large")
        line, _, self.buffer = self.buffer.partition(b"\n")
        if self.buffer:
            raise Violation("the program wrote to its result channel")
        try:
            reply = json.loads(line)
        except ValueError:
            reply = None
        if not isinstance(reply, dict) or reply.pop("seq", None) != self.seq \
                or not _valid_result(reply, states):
            raise Violation("the program wrote to its result channel")
        return reply

    def end(self) -> None:
        """Close the jobs; the child must exit cleanly having written nothing more."""
        os.close(self.job)
        try:
            rest = self.buffer + os.read(self.result, 1 << 16)
        finally:
            os.close(self.result)
            _, status = os.waitpid(self.pid, 0)
        if rest:
            raise Violation("the program wrote to its result channel")
        if status != 0:
            raise Violation(f"the program's process ended with status {status}")


def main():
    memory = int(sys.argv[1])
    child_filter = None
    if len(sys.argv) > 2:
        with os.fdopen(int(sys.argv[2]), "rb") as handle:
            child_filter = handle.read()
    features = _load_features()
    requests = io.TextIOWrapper(os.fdopen(os.dup(0), "rb"))
    replies = os.fdopen(os.dup(1), "w")
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    sys.stdin = io.StringIO()
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    code, task, child = None, None, None
    for line in requests:
        request = json.loads(line)
        cmd = request["cmd"]
        try:
            if child is not None and cmd in ("load", "task", "end"):
                ending, child = child, None
                ending.end()
            if cmd == "load":
                code = builtins.compile(request["program"], "<heuristic>", "exec")
                checker = Child(memory, child_filter, code, None)
                reply = checker.run(None)
                checker.end()
            elif cmd == "task":
                task = features.TaskView(request["task"])
                reply = {"ok": True}
            elif cmd == "end":
                reply = {"ok": True}
            else:
                if child is None:
                    child = Child(memory, child_filter, code, task)
                reply = child.run(request["states"])
        except Violation as err:
            reply = {"error": f"protocol violation: {err}", "violation": True}
        except (SyntaxError, ValueError, MemoryError, RecursionError, OSError) as err:
            reply = {"error": f"{type(err).__name__}: {err}"}
        reply["id"] = request["id"]
        replies.write(json.dumps(reply) + "\n")
        replies.flush()


if __name__ == "__main__":
    main()
