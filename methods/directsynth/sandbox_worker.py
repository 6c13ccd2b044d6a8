"""The worker that runs one untrusted heuristic program (started by sandbox.py as
``python -I -B sandbox_worker.py <memory_bytes> [<filter_fd>]``, by default inside the
operating-system boundary of isolation.py).

The worker is two processes. This one, the supervisor, never runs the program: it reads the
caller's requests, keeps the program's text and the task, and frames every reply with its
request's id. The child that runs the program is forked before the request it serves is
read (one spare child is always ready), so its memory never holds a live request id. Each
child

1. closes every descriptor but its own job and result pipes (the caller's channels are out
   of its reach) and points 0-2 at /dev/null;
2. confines itself: address-space, file-size, process and open-file limits; the second
   seccomp filter read from ``filter_fd`` (no process or thread creation, no timer or signal
   handler, no ``dup``: the program's code runs only while the child serves a request, and
   the result pipe stays the one the supervisor reads); an audit hook that refuses file
   opens, sockets, subprocesses, process control and ctypes, and a builtins table without
   ``open``, ``exec``, ``eval``, ``compile``, ``input`` or ``breakpoint`` and with an
   ``__import__`` that admits a few pure standard-library modules (these two are the second
   layer: a program that reaches ``sys`` through introspection can undo them);
3. takes its first job (the task and the program's text), runs the program's text once,
   then answers each job line (a sequence number and the states) with one result line
   carrying the same number, and exits at the end of its jobs.

The supervisor holds the child to that stream: one line per job, in order, nothing between
or after, each line at most :data:`MAX_RESULT_BYTES` (read in bounded chunks) and a valid
reply, and a clean exit when the task ends. Anything else (a program that writes to its
result pipe itself, a line that does not parse, for whatever reason) breaks the stream: the
supervisor reports a protocol violation, on which the caller voids every result of the
program (synthesis.py). A program that never returns and answers the jobs itself behaves, to
the caller, as a heuristic of those values; its code ends with the task's child.
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
import signal
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
# a result line: a batch of up to 10,000 values (the caller's batch is 512) or a message
MAX_RESULT_BYTES = 2**20
MAX_MESSAGE_CHARS = 500
CHILD_OPEN_FILES = 16  # 0-2, the result pipe, and a few pipes at most (their buffers count)
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
PR_SET_THP_DISABLE, PR_GET_THP_DISABLE = 41, 42
PR_GET_DUMPABLE, PR_SET_DUMPABLE = 3, 4
M_MMAP_MAX = -4  # mallopt: how many chunks the allocator may map (0: none, brk only)
FEATURES = None  # features.py, loaded by main() from beside this file


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


def _disable_huge_pages() -> None:
    """Transparent huge pages off for this process: no page the program touches can pin
    more memory (a whole 2 MiB page) than it maps."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) != 0 or \
            libc.prctl(PR_GET_THP_DISABLE, 0, 0, 0, 0) != 1:
        raise OSError(ctypes.get_errno(), "transparent huge pages could not be disabled")


def _heap_only() -> None:
    """The C library's allocator grows the heap with brk alone, never mmap (the sandbox's
    filters allow no munmap or mremap, the child's no mmap either; the interpreter allocates
    through it: PYTHONMALLOC=malloc). Set once in the supervisor: every child it forks
    inherits the allocator's settings."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mallopt(M_MMAP_MAX, 0) != 1:
        raise OSError(ctypes.get_errno(), "mallopt(M_MMAP_MAX, 0) failed")


def _not_dumpable() -> None:
    """No core dump of this process, ever: RLIMIT_CORE 0 does not stop a kernel whose
    core_pattern pipes to a helper from starting that helper (as root, outside the sandbox)
    for a crashed process; a non-dumpable one is never dumped."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0 or \
            libc.prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "the process could not be made non-dumpable")


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
    _disable_huge_pages()
    _not_dumpable()
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
    return f"{type(err).__name__}: {str(err)[:MAX_MESSAGE_CHARS]} {where}".strip()


def _load_program(source: str):
    """In the child: the program's text run once; its ``heuristic``, or the error that says
    why not."""
    try:
        code = compile(source, "<heuristic>", "exec")
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


def _child(job_fd: int, result_fd: int, memory_bytes: int, child_filter) -> None:
    """A forked child: drop the supervisor's descriptors, confine itself, then take the task
    and the program (the first job), answer the rest, exit at their end."""
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
            error = f"the sandbox could not confine the program: {err}"
        else:
            error = None
        heuristic = task = None
        for line in jobs:
            job = json.loads(line)
            if "program" in job:
                task = FEATURES.TaskView(job["task"]) if job["task"] is not None else None
                if not error:
                    heuristic, error = _load_program(job["program"])
                reply = {"error": error} if error else {"ok": True}
            elif error:
                reply = {"error": error}
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
    """A result the child may send: for the first job (``states`` None) ok or an error; for
    a batch of states one value per state, an error or an invalid value."""
    if not isinstance(reply, dict) or len(reply) != 1:
        return False
    (key, value), = reply.items()
    if key == "error":
        return isinstance(value, str)
    if states is None:
        return key == "ok" and value is True
    if key == "invalid":
        return isinstance(value, str)
    return (key == "h" and isinstance(value, list) and len(value) == len(states)
            and all(type(v) is float and v == v and v != -math.inf for v in value))


class Child:
    """The confined process that runs the program for one task (or the load check), forked
    when it is made: make it before reading the request it will serve."""

    def __init__(self, memory_bytes: int, child_filter):
        self.seq, self.buffer, self.scanned = 0, bytearray(), 0
        job_read, self.job = os.pipe()
        self.result, result_write = os.pipe()
        gc.freeze()  # the child's collector leaves the supervisor's objects (and pages) alone
        self.pid = os.fork()
        if self.pid == 0:
            os.close(self.job)
            os.close(self.result)
            _child(job_read, result_write, memory_bytes, child_filter)
        os.close(job_read)
        os.close(result_write)

    def start(self, program: str, task) -> dict:
        """The first job: the task's spec (None for the load check) and the program's text;
        the reply says whether the program loaded."""
        return self._job({"program": program, "task": task}, None)

    def run(self, states) -> dict:
        """One batch: its reply, or an error from the program; Violation when the stream
        breaks."""
        return self._job({"states": states}, states)

    def _job(self, job: dict, states) -> dict:
        self.seq += 1
        payload = memoryview((json.dumps({"seq": self.seq, **job}) + "\n").encode())
        try:
            while payload:
                payload = payload[os.write(self.job, payload):]
        except OSError:
            raise Violation("the program's process is gone") from None
        line = self._read_line()
        try:  # whatever goes wrong here, the stream is not one valid result per job
            reply = json.loads(line)
            valid = (isinstance(reply, dict) and reply.pop("seq", None) == self.seq
                     and _valid_result(reply, states))
        except Exception:  # noqa: BLE001 - e.g. RecursionError on a deeply nested line
            valid = False
        if not valid:
            raise Violation("the program wrote to its result channel")
        return reply

    def _read_line(self) -> bytes:
        """One result line, read in bounded chunks; a newline is looked for only in the new
        bytes, and bytes after it are a violation."""
        while (end := self.buffer.find(b"\n", self.scanned)) < 0:
            self.scanned = len(self.buffer)
            if self.scanned > MAX_RESULT_BYTES:
                raise Violation("the program's result is too large")
            chunk = os.read(self.result, 1 << 16)
            if not chunk:  # only the child holds the pipe's write end: it is exiting
                raise Violation(f"the program's process {self._how_it_ended()} before "
                                "answering")
            self.buffer += chunk
        if end + 1 != len(self.buffer) or end > MAX_RESULT_BYTES:
            raise Violation("the program wrote to its result channel")
        line = bytes(self.buffer[:end])
        self.buffer.clear()
        self.scanned = 0
        return line

    def _how_it_ended(self) -> str:
        """'was killed by SIGSEGV' (a crash, a C-stack overflow) or 'ended' (it exited)."""
        _, status = os.waitpid(self.pid, 0)
        self.pid = None
        if os.WIFSIGNALED(status):
            return f"was killed by {signal.Signals(os.WTERMSIG(status)).name}"
        return "ended"

    def end(self) -> None:
        """Close the jobs; the child must exit cleanly having written nothing more."""
        os.close(self.job)
        try:
            rest = self.buffer + os.read(self.result, 1 << 16)
        finally:
            os.close(self.result)
            _, status = os.waitpid(self.pid, 0) if self.pid else (None, 0)
        if rest:
            raise Violation("the program wrote to its result channel")
        if status != 0:
            raise Violation(f"the program's process ended with status {status}")


class Supervisor:
    """The program's text, the current task, the child serving it and a spare child."""

    def __init__(self, memory_bytes: int, child_filter):
        self.memory, self.filter = memory_bytes, child_filter
        self.program, self.task, self.child, self.spare = None, None, None, None

    def fork_spare(self) -> None:
        """Fork the next child now, before the request it will serve is read."""
        if self.spare is None:
            self.spare = Child(self.memory, self.filter)

    def handle(self, request: dict) -> dict:
        cmd = request["cmd"]
        try:
            if self.child is not None and cmd in ("load", "task", "end"):
                ending, self.child = self.child, None
                ending.end()
            if cmd == "load":
                builtins.compile(request["program"], "<heuristic>", "exec")  # syntax, here
                self.program = request["program"]
                checker, self.spare = self.spare, None
                reply = checker.start(self.program, None)
                checker.end()
                return reply
            if cmd == "task":
                self.task = request["task"]
                return {"ok": True}
            if cmd == "end":
                return {"ok": True}
            if self.child is None:
                self.child, self.spare = self.spare, None
                started = self.child.start(self.program, self.task)
                if "error" in started:
                    return started
            return self.child.run(request["states"])
        except Violation as err:
            return {"error": f"protocol violation: {err}", "violation": True}
        except (SyntaxError, ValueError, MemoryError, RecursionError, OSError) as err:
            return {"error": f"{type(err).__name__}: {err}"}


def main():
    global FEATURES  # the children build their task views with it
    memory = int(sys.argv[1])
    child_filter = None
    if len(sys.argv) > 2:
        with os.fdopen(int(sys.argv[2]), "rb") as handle:
            child_filter = handle.read()
    FEATURES = _load_features()
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
    if child_filter is not None:  # in the sandbox, whose filter allows no munmap either
        _heap_only()
    supervisor = Supervisor(memory, child_filter)
    while True:
        supervisor.fork_spare()
        line = requests.readline()
        if not line:
            break
        request = json.loads(line)
        reply = supervisor.handle(request)
        reply["id"] = request["id"]
        replies.write(json.dumps(reply) + "\n")
        replies.flush()
        del line, request, reply  # the next child is forked without them


if __name__ == "__main__":
    main()
