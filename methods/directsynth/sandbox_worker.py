"""The worker that runs one untrusted heuristic program (started by sandbox.py as
``python -I -B sandbox_worker.py <memory_bytes>``, by default inside the operating-system
boundary of isolation.py; what follows is the second layer).

Before the program is compiled the worker locks itself down: address-space, file-size,
process and open-file limits; an audit hook (which cannot be removed) that refuses file opens,
sockets, subprocesses, process control and ctypes; a builtins table without ``open``,
``exec``, ``eval``, ``compile``, ``input`` or ``breakpoint``, and an ``__import__`` that only
admits a few pure standard-library modules. The program's own output goes to /dev/null; the
protocol (JSON lines, one reply per request, each reply carrying its request's ``id``) runs
on duplicated descriptors.
"""

import builtins
import collections
import functools
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


def _lock_down(memory_bytes: int):
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
    sys.addaudithook(_audit)


def _safe_builtins() -> dict:
    table = {k: v for k, v in vars(builtins).items() if k not in REMOVED_BUILTINS}
    table["__import__"] = _restricted_import
    return table


def _number(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"heuristic returned {type(value).__name__}, not a number")
    if value != value or value == -math.inf:
        raise ValueError(f"heuristic returned {value!r} (NaN and -inf are not heuristic values)")
    return float(value)


def main():
    memory = int(sys.argv[1])
    features = _load_features()
    channel_in = io.TextIOWrapper(os.fdopen(os.dup(0), "rb"))
    channel_out = os.fdopen(os.dup(1), "w")
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    sys.stdin = io.StringIO()
    _lock_down(memory)
    heuristic, task = None, None
    for line in channel_in:
        request = json.loads(line)
        request_id = request.get("id")
        try:
            if request["cmd"] == "load":
                namespace = {"__builtins__": _safe_builtins(), "__name__": "heuristic_program"}
                exec(builtins.compile(request["program"], "<heuristic>", "exec"), namespace)
                heuristic = namespace.get("heuristic")
                if not callable(heuristic):
                    raise NameError("the program defines no function heuristic(state, task)")
                reply = {"ok": True}
            elif request["cmd"] == "task":
                task = features.TaskView(request["task"])
                reply = {"ok": True}
            else:
                atoms = task.atoms
                values = [_number(heuristic(frozenset(atoms[i] for i in ids), task))
                          for ids in request["states"]]
                reply = {"h": values}
        except MemoryError:
            reply = {"error": "MemoryError: the program exceeded the memory limit"}
        except BaseException as err:  # noqa: BLE001 - anything the program raises is reported
            lines = [n for f, n in traceback.walk_tb(err.__traceback__)
                     if f.f_code.co_filename == "<heuristic>"]
            where = f"(line {lines[-1]})" if lines else ""
            reply = {"error": f"{type(err).__name__}: {err} {where}".strip()}
        reply["id"] = request_id
        channel_out.write(json.dumps(reply) + "\n")
        channel_out.flush()


if __name__ == "__main__":
    main()
