"""Measure the system calls a heuristic worker makes, to derive the sandbox's allowlists.

``python -m methods.directsynth.syscall_trace [--out FILE]`` runs legitimate programs of
every shipped planning domain (each task feature alone, a weighted sum of all of them, a
program that builds and frees large lists, and the error paths a worker must report: a
raise, an invalid value, a syntax error, a memory error) through the bubblewrap sandbox
under ``strace -f`` and writes, as JSON, the set of calls made

- by the processes of the sandbox after bubblewrap installed its filter (``sandbox``: the
  uid change, the interpreter's start, the supervisor and its children), and
- by each child that runs a program, after its own filter is installed (``child``),

with the arguments that :mod:`methods.directsynth.isolation` checks (both filters allow
every call while tracing, so the trace shows what the worker asks for) (fcntl commands, madvise
advice, mmap/mprotect protections, prctl options, ioctl requests) as the values seen. The
committed result (``tests/data/directsynth_syscalls.json``) is the fixture the allowlists
are tested against; regenerate it after a change of the worker, the interpreter or the C
library. Needs ``strace`` (Debian: ``apt-get install strace``).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import tempfile
from collections import defaultdict
from pathlib import Path

from common.errors import UserError

# argument index whose values are recorded, per call (the rest are recorded by name only)
ARGUMENTS = {"fcntl": 1, "madvise": 2, "mmap": 2, "mprotect": 2, "prctl": 0, "ioctl": 1}
_START = re.compile(r"^(\d+)\s+(\w+)\((.*)")
_SECCOMP = "prctl(PR_SET_SECCOMP"


def legitimate_programs(task) -> dict[str, str]:
    """Programs a proposer may write for ``task``: every feature alone, all of them summed,
    one that allocates and frees large lists, and the error paths."""
    from methods.directsynth.proposers import domain_features

    features = domain_features(task)
    programs = {f.code(): f"def heuristic(state, task):\n    return {f.code()}\n"
                for f in features}
    programs["sum"] = ("def heuristic(state, task):\n    return "
                       + " + ".join(f"0.5 * {f.code()}" for f in features) + "\n")
    programs["allocates"] = ("import collections, heapq, itertools, math\n"
                             "def heuristic(state, task):\n"
                             "    big = [list(range(1000)) for _ in range(2000)]\n"
                             "    grown = []\n"
                             "    for i in range(300000):\n"
                             "        grown.append(i)\n"
                             "    text = ''.join(str(i) for i in grown)\n"
                             "    table = collections.Counter(a[0] for a in state)\n"
                             "    del big, grown\n"
                             "    return (math.fsum(table.values()) + len(text) % 2\n"
                             "            + task.h_ff(state))\n")
    programs["raises"] = "def heuristic(state, task):\n    raise ValueError('no')\n"
    programs["invalid"] = "def heuristic(state, task):\n    return 'x'\n"
    programs["memory_error"] = "def heuristic(state, task):\n    return len(bytearray(2**40))\n"
    programs["syntax_error"] = "def heuristic(state, task)\n    return 0\n"
    return programs


def sample_states(task, count: int) -> list[int]:
    """The first ``count`` states of a breadth-first walk from the initial state."""
    seen, frontier = [task.init], [task.init]
    while frontier and len(seen) < count:
        nxt = []
        for s in frontier:
            for _, t in task.successors(s):
                if t not in seen and len(seen) < count:
                    seen.append(t)
                    nxt.append(t)
        frontier = nxt
    return seen


def parse_trace(text: str) -> dict[str, dict[str, list]]:
    """The calls in ``strace -f`` output made under the sandbox's filters: ``sandbox``, every
    call a process makes after its first ``PR_SET_SECCOMP`` (bubblewrap's filter), and every
    call of a process first seen after that (its descendants: the supervisor's children);
    ``child``, the calls a process makes after its second (the filter of the child that runs
    a program). Each call counts under the filters active before it."""
    filters: dict[str, int] = {}  # pid -> filters active
    inside = interpreter = False  # bubblewrap's filter is in place; the worker has started
    calls = {"sandbox": defaultdict(set), "child": defaultdict(set)}
    for line in text.splitlines():
        start = _START.match(line)
        if not start:
            continue  # a resumed call (counted at its start), a signal or an exit
        pid, name, args = start.groups()
        if pid not in filters:
            filters[pid] = 1 if inside else 0
        active = filters[pid]
        value = _argument(name, args)
        if active >= 1:
            calls["sandbox"][name].add(value)
        if active >= 2:
            calls["child"][name].add(value)
        if name == "execve" and active >= 1 and "python" in args.split(",", 1)[0]:
            interpreter = True
        if line.split(None, 1)[1].startswith(_SECCOMP):
            # the program's child's filter: installed after the worker started, on top of an
            # inherited one; any other is bubblewrap's (its processes' lines interleave with
            # the worker's start differently under load)
            filters[pid] = 2 if interpreter and active >= 1 else 1
            inside = True
    return {kind: {name: sorted(v for v in values if v is not None)
                   for name, values in sorted(found.items())}
            for kind, found in calls.items()}


def _argument(name: str, args: str) -> str | None:
    index = ARGUMENTS.get(name)
    if index is None:
        return None
    args = re.sub(r"\)\s+=\s.*$", "", args.replace("<unfinished ...>", "")).rstrip(" )")
    parts = [p.strip() for p in re.split(r",(?![^{\[]*[}\]])", args)]
    return parts[index] if index < len(parts) else None


def trace(domains, states_per_task: int = 300) -> dict:
    """Run :func:`legitimate_programs` of each domain's first training task under strace;
    the parsed calls of all of them together."""
    from data.planning import SHIPPED
    from methods.directsynth import ground, isolation, sandbox
    from methods.directsynth.sandbox import ProgramError, SandboxedHeuristic

    strace = shutil.which("strace")
    if strace is None:
        raise UserError("tracing needs strace (Debian: apt-get install strace)")
    merged = {"sandbox": defaultdict(set), "child": defaultdict(set)}
    launch_worker = sandbox.worker_launch
    with tempfile.TemporaryDirectory(prefix="syscalls-") as folder:
        log = Path(folder) / "trace.txt"

        def traced(args, kind, scratch):
            launch = launch_worker(args, kind, scratch)
            launch.argv = [strace, "-f", "-qq", "-s", "0", "-o", str(log), *launch.argv]
            return launch

        # both filters allow everything while tracing: the trace shows what the worker asks
        # for, not what the current lists grant
        build_filter = isolation._seccomp_file
        sandbox.worker_launch = traced
        isolation._seccomp_file = lambda allowed, arguments=(): build_filter(
            allowed, arguments, default="allow")
        try:
            for domain in domains:
                first = sorted((SHIPPED / domain / "training" / "easy").glob("*.pddl"))[0]
                task = ground(SHIPPED / domain / "domain.pddl", first)
                states = sample_states(task, states_per_task)
                for program in legitimate_programs(task).values():
                    try:
                        with SandboxedHeuristic(program, timeout=60.0) as h:
                            h.set_task(task)
                            h(states)
                            h.end_task()
                    except ProgramError:
                        pass  # the error paths: reported, as they should be
                    for kind, found in parse_trace(log.read_text()).items():
                        for name, values in found.items():
                            merged[kind][name].update(values)
        finally:
            sandbox.worker_launch = launch_worker
            isolation._seccomp_file = build_filter
    return {kind: {name: sorted(values) for name, values in sorted(found.items())}
            for kind, found in merged.items()}


def main(argv=None) -> None:
    from data.planning import IPC2023_DOMAINS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="tests/data/directsynth_syscalls.json")
    parser.add_argument("--domains", default=",".join(IPC2023_DOMAINS))
    args = parser.parse_args(argv)
    found = trace(args.domains.split(","))
    Path(args.out).write_text(json.dumps(found, indent=1) + "\n")
    print(f"{args.out}: {len(found['sandbox'])} calls in the sandbox, "
          f"{len(found['child'])} in the program's child: {', '.join(found['child'])}")


if __name__ == "__main__":
    main()
