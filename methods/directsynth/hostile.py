"""A suite of hostile heuristic programs and the check that the sandbox contains them.

Each program tries one thing a generated program must never do: loop forever, write a file,
import os/subprocess/socket, reach ``os.system`` or ``os.open`` through object introspection,
open a network connection, allocate huge memory, recurse without end, kill its own worker or
forge protocol replies. A program *escapes* when its side effect happens: the marker file
exists, the listening socket received a connection, or a forged value reached the caller.
"""

from __future__ import annotations

import socket
import tempfile
from dataclasses import dataclass
from pathlib import Path

from methods.directsynth.sandbox import ProgramError, SandboxedHeuristic
from methods.directsynth.strips import Task

_INTROSPECT = """def _globals_with(name):
    for cls in ().__class__.__base__.__subclasses__():
        try:
            g = cls.__init__.__globals__
        except AttributeError:
            continue
        if name in g:
            return g
"""

HOSTILE = {
    "infinite_loop": "def heuristic(state, task):\n    while True:\n        pass\n",
    "write_file_open": "def heuristic(state, task):\n"
                       "    open({marker!r}, 'w').write('x')\n    return 0\n",
    "import_os": "import os\ndef heuristic(state, task):\n"
                 "    os.system('touch {marker}')\n    return 0\n",
    "import_subprocess": "import subprocess\ndef heuristic(state, task):\n"
                         "    subprocess.run(['touch', {marker!r}])\n    return 0\n",
    "import_socket": "import socket\ndef heuristic(state, task):\n"
                     "    socket.create_connection(('127.0.0.1', {port}))\n    return 0\n",
    "dunder_import": "def heuristic(state, task):\n"
                     "    __builtins__['__import__']('os').system('touch {marker}')\n"
                     "    return 0\n",
    "introspect_system": _INTROSPECT + "def heuristic(state, task):\n"
                         "    _globals_with('system')['system']('touch {marker}')\n    return 0\n",
    "introspect_os_open": _INTROSPECT + "def heuristic(state, task):\n"
                          "    _globals_with('O_CREAT')['open']({marker!r}, 577)\n    return 0\n",
    "introspect_import_socket": _INTROSPECT + "def heuristic(state, task):\n"
                                "    sys = _globals_with('sys')['sys']\n"
                                "    mod = sys.modules['importlib'].import_module('socket')\n"
                                "    mod.create_connection(('127.0.0.1', {port}))\n"
                                "    return 0\n",
    "huge_allocation": "def heuristic(state, task):\n    x = bytearray(10 ** 11)\n"
                       "    return len(x)\n",
    "unbounded_recursion": "def heuristic(state, task):\n    return heuristic(state, task) + 1\n",
    "kill_worker": _INTROSPECT + "def heuristic(state, task):\n"
                   "    _globals_with('_exit')['_exit'](0)\n",
    "forge_reply": "def heuristic(state, task):\n"
                   "    print('{{\"h\": [-1000]}}')\n    return 0\n",
}


@dataclass
class HostileOutcome:
    name: str
    escaped: bool
    outcome: str  # how the sandbox reported it


def run_hostile_suite(task: Task, timeout: float = 2.0) -> list[HostileOutcome]:
    """Run every hostile program on the initial state of ``task``."""
    out = []
    with tempfile.TemporaryDirectory(prefix="hostile-") as folder, \
            socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        server.setblocking(False)
        port = server.getsockname()[1]
        for name, template in HOSTILE.items():
            marker = Path(folder) / f"{name}.marker"
            program = template.format(marker=str(marker), port=port)
            try:
                with SandboxedHeuristic(program, timeout=timeout) as h:
                    h.set_task(task)
                    values = h([task.init])
                outcome, forged = f"ran, returned {values[0]:g}", values[0] != 0
            except ProgramError as err:
                outcome, forged = f"contained: {err}", False
            try:
                server.accept()[0].close()
                connected = True
            except BlockingIOError:
                connected = False
            out.append(HostileOutcome(name, marker.exists() or connected or forged, outcome))
    return out
