"""A suite of hostile heuristic programs and the check that the sandbox contains them.

Each program tries one thing a generated program must never do: loop forever, write a file,
import os/subprocess/socket, reach ``os.system``, ``os.open``, ``os.mknod``, ``os.mkfifo``,
``os.link``, ``os.symlink``, ``os.utime``, ``os.fork``, ``os.kill`` or ``os.write`` through
object introspection (CPython raises no audit event for several of these), load ``ctypes``,
write ``/proc/self/mem``, open a network connection, allocate huge memory, recurse without
end, kill its own worker, signal another process, forge protocol replies on any inherited
descriptor, fill kernel memory with files or extended attributes, change its supervisor's
limits or scheduling, answer every request just inside the time limit, or break its result
stream with a line the supervisor cannot parse or a line too long to read in time, signal its
supervisor through SIGIO, pin memory in a pipe with ``vmsplice`` (on transparent huge pages),
take inotify watches, or answer the same state differently on repeated calls. A program
*escapes* when its side effect happens: the marker file exists, the host file's timestamp
changed, the victim process died, the listening socket received a connection, a forged value
(anything but 0) reached the caller, a program reported its side effect with its value
(:data:`REPORTS_SIDE_EFFECT`), the supervisor died or stalled, it ran past its time budget,
or a program that broke its result stream or answered a state differently was not voided
(:data:`MUST_VOID`).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from methods.directsynth.sandbox import ProgramError, ProtocolViolation, SandboxedHeuristic
from methods.directsynth.strips import Task
from methods.directsynth.synthesis import Limits

_INTROSPECT = """def _globals_with(name):
    for cls in ().__class__.__base__.__subclasses__():
        try:
            g = cls.__init__.__globals__
        except AttributeError:
            continue
        if name in g:
            return g
"""

# The worker's Python guards are a second layer: a program that reaches ``sys`` through
# introspection can switch its audit table off, so these attacks start there and test the
# operating-system boundary alone.
_UNGUARD = _INTROSPECT + """def _unguard():
    sys = _globals_with('sys')['sys']
    sys.modules['__main__'].BLOCKED_EVENTS = ()
    return sys
def _pause(seconds):
    clock = _unguard().modules['importlib'].import_module('time').perf_counter
    end = clock() + seconds
    while clock() < end:
        pass
"""

# Any system call by number, through the C extension ctypes leaves loaded (the ``ctypes``
# package itself cannot be imported again: no file can be opened); returns (result, errno).
_SYSCALL = _UNGUARD + """def _syscall(number, *args):
    c = _unguard().modules['_ctypes']
    class Long(c._SimpleCData):
        _type_ = 'l'
    class Function(c.CFuncPtr):
        _flags_ = c.FUNCFLAG_CDECL | c.FUNCFLAG_USE_ERRNO
        _restype_ = Long
    call = Function(c.dlsym(c.dlopen(None, 0), 'syscall'))
    c.set_errno(0)
    result = call(Long(number), *(a if isinstance(a, c._SimpleCData) else Long(a)
                                  for a in args))
    return result, c.get_errno()
def _cstring(text):
    class String(_unguard().modules['_ctypes']._SimpleCData):
        _type_ = 'z'
    return String(text)
"""
# x86-64 call numbers (the suite runs where the project is tested)
_NR = {"fcntl": 72, "getppid": 110, "mmap": 9, "munmap": 11, "madvise": 28, "pipe2": 293,
       "vmsplice": 278, "inotify_init1": 294, "inotify_add_watch": 254, "shmget": 29,
       "shmat": 30, "shmdt": 67}

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
    # a crash without a system call: C code recursing through a million nested iterators
    # overflows the C stack (SIGSEGV); the child is non-dumpable, so no core helper runs
    "c_stack_overflow": "import itertools\ndef heuristic(state, task):\n"
                        "    it = iter([0.0])\n    for _ in range(10 ** 6):\n"
                        "        it = itertools.chain(it)\n    return next(it)\n",
    "kill_worker": _INTROSPECT + "def heuristic(state, task):\n"
                   "    _globals_with('_exit')['_exit'](0)\n",
    "forge_reply": "def heuristic(state, task):\n"
                   "    print('{{\"h\": [-1000]}}')\n    return 0\n",
    "introspect_mknod": _INTROSPECT + "def heuristic(state, task):\n"
                        "    _globals_with('mknod')['mknod']({marker!r})\n    return 0\n",
    "introspect_mkfifo": _INTROSPECT + "def heuristic(state, task):\n"
                         "    _globals_with('mkfifo')['mkfifo']({marker!r})\n    return 0\n",
    "introspect_link": _INTROSPECT + "def heuristic(state, task):\n"
                       "    _globals_with('link')['link']({victim_file!r}, {marker!r})\n"
                       "    return 0\n",
    "introspect_symlink": _INTROSPECT + "def heuristic(state, task):\n"
                          "    _globals_with('symlink')['symlink']('/etc/passwd', {marker!r})\n"
                          "    return 0\n",
    "introspect_utime": _INTROSPECT + "def heuristic(state, task):\n"
                        "    _globals_with('utime')['utime']({victim_file!r}, (0, 0))\n"
                        "    return 0\n",
    "introspect_fork_bomb": _INTROSPECT + "def heuristic(state, task):\n"
                            "    fork = _globals_with('fork')['fork']\n"
                            "    while True:\n        fork()\n",
    "introspect_kill_other": _INTROSPECT + "def heuristic(state, task):\n"
                             "    _globals_with('kill')['kill']({victim_pid}, 9)\n"
                             "    return 0\n",
    "import_ctypes": _INTROSPECT + "def heuristic(state, task):\n"
                     "    sys = _globals_with('sys')['sys']\n"
                     "    ctypes = sys.modules['importlib'].import_module('ctypes')\n"
                     "    ctypes.CDLL(None).mknod({marker!r}.encode(), 0o10644, 0)\n"
                     "    return 0\n",
    "proc_self_mem": _INTROSPECT + "def heuristic(state, task):\n"
                     "    g = _globals_with('O_RDWR')\n"
                     "    fd = g['open']('/proc/self/mem', g['O_RDWR'])\n"
                     "    g['write'](fd, b'x')\n    return 0\n",
    # the worker's reply descriptor is one of the inherited ones: write a reply of our own
    # (NaN, and a plausible value) to every descriptor, then answer normally
    "forge_nan_on_descriptors": _INTROSPECT + "def heuristic(state, task):\n"
                                "    write = _globals_with('write')['write']\n"
                                "    for fd in range(64):\n"
                                "        try:\n"
                                "            write(fd, b'{{\"h\": [NaN]}}\\n')\n"
                                "        except Exception:\n"
                                "            pass\n"
                                "    return 0\n",
    "forge_stale_reply": _INTROSPECT + "def heuristic(state, task):\n"
                         "    write = _globals_with('write')['write']\n"
                         "    for fd in range(3, 64):\n"
                         "        try:\n"
                         "            write(fd, b'{{\"h\": [-1000], \"ok\": true}}\\n')\n"
                         "        except Exception:\n"
                         "            pass\n"
                         "    return 0\n",
    # System V shared memory is not counted in the address-space limit: hold 768 MiB in six
    # segments, mapping one at a time, and report whether more than the 512 MB limit was held
    "sysv_shared_memory": _SYSCALL + "def heuristic(state, task):\n"
                          "    c = _unguard().modules['_ctypes']\n"
                          "    class Long(c._SimpleCData):\n"
                          "        _type_ = 'l'\n"
                          "    size, held = 128 * 2 ** 20, 0\n"
                          "    for _ in range(6):\n"
                          f"        ident = _syscall({_NR['shmget']}, 0, size, 0o1600)[0]\n"
                          "        if ident < 0:\n"
                          "            break\n"
                          f"        address = _syscall({_NR['shmat']}, ident, 0, 0)[0]\n"
                          "        if address in (-1, 0):\n"
                          "            break\n"
                          "        for offset in range(0, size, 4096):\n"
                          "            Long.from_address(address + offset).value = 1\n"
                          f"        _syscall({_NR['shmdt']}, address)\n"
                          "        held += size\n"
                          "    return 1 if held > 512 * 2 ** 20 else 0\n",
    # find the live request (its id) and the reply channel in the callers' frames, answer
    # the request with a value of our own, then raise
    "forge_reply_live_id": _UNGUARD + "def heuristic(state, task):\n"
                           "    sys = _unguard()\n"
                           "    json = sys.modules['json']\n"
                           "    frame, requests, channels = sys._getframe(), [], []\n"
                           "    while frame is not None:\n"
                           "        for value in list(frame.f_locals.values()):\n"
                           "            if isinstance(value, dict) and 'id' in value:\n"
                           "                requests.append(value)\n"
                           "            elif hasattr(value, 'write'):\n"
                           "                channels.append(value)\n"
                           "        frame = frame.f_back\n"
                           "    for request in requests:\n"
                           "        reply = {{'h': [-1000] * len(request.get('states', [0])),\n"
                           "                 'id': request['id']}}\n"
                           "        for channel in channels:\n"
                           "            try:\n"
                           "                channel.write(json.dumps(reply) + '\\n')\n"
                           "                channel.flush()\n"
                           "                raise RuntimeError('forged')\n"
                           "            except Exception as err:\n"
                           "                if str(err) == 'forged':\n"
                           "                    # let the caller take the forged line first\n"
                           "                    _pause(0.3)\n"
                           "                    raise\n"
                           "    raise RuntimeError('the real answer is an error')\n",
    # the same against the program's own result pipe: a result line with the live job's
    # sequence number on every descriptor, a pause so the supervisor takes it, then a raise
    "forge_result_then_raise": _UNGUARD + "def heuristic(state, task):\n"
                               "    sys = _unguard()\n"
                               "    _load = sys.modules['importlib'].import_module\n"
                               "    os, json, time = (_load(m) for m in ('os', 'json', 'time'))\n"
                               "    frame, seq = sys._getframe(), None\n"
                               "    while frame is not None and seq is None:\n"
                               "        job = frame.f_locals.get('job')\n"
                               "        seq = job.get('seq') if isinstance(job, dict) else None\n"
                               "        frame = frame.f_back\n"
                               "    line = json.dumps({{'h': [-1000.0], 'seq': seq}}) + '\\n'\n"
                               "    for fd in range(3, 16):\n"
                               "        try:\n"
                               "            os.write(fd, line.encode())\n"
                               "        except OSError:\n"
                               "            pass\n"
                               "    _pause(0.3)\n"
                               "    raise RuntimeError('the real answer is an error')\n",
    # kernel memory outside the address-space limit: empty files (inodes) wherever one can be
    # made, the working folder first; returns 1 once more than 4 MiB of it (about 1.2 KiB an
    # inode) is held
    "create_files_flood": _UNGUARD + "def heuristic(state, task):\n"
                          "    sys = _unguard()\n"
                          "    os = sys.modules['importlib'].import_module('os')\n"
                          "    made = 0\n"
                          "    for folder in ('.', '/tmp', '/', '/dev', '/dev/shm'):\n"
                          "        for i in range(20000):\n"
                          "            try:\n"
                          "                os.close(os.open(f'{{folder}}/f{{i}}', 0o101))\n"
                          "            except OSError:\n"
                          "                break\n"
                          "            made += 1\n"
                          "            if made * 1200 > 4 * 2 ** 20:\n"
                          "                return 1\n"
                          "    return 0\n",
    # the same with extended attributes (a tmpfs keeps them in kernel memory): 64 KiB values
    # on a file of each folder (made there if it can be) and on the folder itself
    "xattr_flood": _UNGUARD + "def heuristic(state, task):\n"
                   "    sys = _unguard()\n"
                   "    os = sys.modules['importlib'].import_module('os')\n"
                   "    held = 0\n"
                   "    for folder in ('.', '/tmp', '/', '/dev', '/dev/shm'):\n"
                   "        try:\n"
                   "            os.close(os.open(f'{{folder}}/attrs', 0o101))\n"
                   "        except OSError:\n"
                   "            pass\n"
                   "        for path in (f'{{folder}}/attrs', folder, '/dev/null'):\n"
                   "            for i in range(100):\n"
                   "                try:\n"
                   "                    os.setxattr(path, f'user.flood{{i}}', bytes(65536))\n"
                   "                except OSError:\n"
                   "                    break\n"
                   "                held += 65536\n"
                   "                if held > 4 * 2 ** 20:\n"
                   "                    return 1\n"
                   "    return 0\n",
    # the supervisor (this process's parent) runs as the same user: set its open-file limit,
    # priority and CPU affinity (each to its current value, so a success harms nothing) and
    # return how many of the three calls succeeded
    "meddle_supervisor": _UNGUARD + "def heuristic(state, task):\n"
                         "    sys = _unguard()\n"
                         "    _load = sys.modules['importlib'].import_module\n"
                         "    os, resource = _load('os'), _load('resource')\n"
                         "    parent, changed = os.getppid(), 0\n"
                         "    calls = (lambda: resource.prlimit(parent, resource.RLIMIT_NOFILE,\n"
                         "                                      resource.getrlimit(\n"
                         "                                          resource.RLIMIT_NOFILE)),\n"
                         "             lambda: os.setpriority(os.PRIO_PROCESS, parent,\n"
                         "                                    os.getpriority(os.PRIO_PROCESS,\n"
                         "                                                   parent)),\n"
                         "             lambda: os.sched_setaffinity(parent,\n"
                         "                                          os.sched_getaffinity(0)))\n"
                         "    for call in calls:\n"
                         "        try:\n"
                         "            call()\n"
                         "            changed += 1\n"
                         "        except OSError:\n"
                         "            pass\n"
                         "    return changed\n",
    # every request answered correctly, each just inside the per-request limit
    "slow_answers": _UNGUARD + "def heuristic(state, task):\n"
                    "    sys = _unguard()\n"
                    "    _pause({pause})\n"
                    "    return 0\n",
    # a result line of 100,000 nested lists, a pause so the supervisor takes it, then a raise:
    # the supervisor's parser gives up (RecursionError), which must void the program like any
    # other broken stream
    "nested_result_line": _UNGUARD + "def heuristic(state, task):\n"
                          "    sys = _unguard()\n"
                          "    os = sys.modules['importlib'].import_module('os')\n"
                          "    line = ('[' * 100000 + ']' * 100000 + '\\n').encode()\n"
                          "    for fd in range(3, 16):\n"
                          "        try:\n"
                          "            os.write(fd, line)\n"
                          "        except OSError:\n"
                          "            pass\n"
                          "    _pause(0.3)\n"
                          "    raise RuntimeError('the real answer is an error')\n",
    # 96 MiB without a newline on the result pipe
    "huge_result_line": _UNGUARD + "def heuristic(state, task):\n"
                        "    sys = _unguard()\n"
                        "    os = sys.modules['importlib'].import_module('os')\n"
                        "    chunk = b'1' * 2 ** 20\n"
                        "    for fd in range(3, 16):\n"
                        "        try:\n"
                        "            for _ in range(96):\n"
                        "                os.write(fd, chunk)\n"
                        "        except OSError:\n"
                        "            pass\n"
                        "    return 0\n",
    # at import: take over the request descriptor (an idle pipe dup2'd over it keeps the
    # worker waiting) and answer every later request from a SIGALRM handler, with the right id
    "timer_answers_between_calls": _UNGUARD + "sys = _unguard()\n"
        "_load = sys.modules['importlib'].import_module\n"
        "os, signal, json = (_load(m) for m in ('os', '_signal', 'json'))\n"
        "signal.signal(signal.SIGALRM, lambda signum, frame: _answer())\n"
        "signal.setitimer(signal.ITIMER_REAL, 0.01, 0.01)\n"
        "_ends = {{}}\n"
        "_frame = sys._getframe()\n"
        "while _frame is not None:\n"
        "    for _value in list(_frame.f_locals.values()):\n"
        "        if hasattr(_value, 'fileno') and hasattr(_value, 'readable'):\n"
        "            _ends['in' if _value.readable() else 'out'] = _value.fileno()\n"
        "    _frame = _frame.f_back\n"
        "_requests = os.dup(_ends['in'])\n"
        "os.dup2(os.pipe()[0], _ends['in'])\n"
        "_pending = [b'']\n"
        "def _answer():\n"
        "    select = _load('select')\n"
        "    while select.select([_requests], [], [], 0)[0]:\n"
        "        chunk = os.read(_requests, 1 << 20)\n"
        "        if not chunk:\n"
        "            return\n"
        "        _pending[0] += chunk\n"
        "        while b'\\n' in _pending[0]:\n"
        "            line, _pending[0] = _pending[0].split(b'\\n', 1)\n"
        "            request = json.loads(line)\n"
        "            reply = {{'id': request['id'], 'ok': True}}\n"
        "            if request['cmd'] == 'eval':\n"
        "                reply['h'] = [-1000] * len(request['states'])\n"
        "            os.write(_ends['out'], (json.dumps(reply) + '\\n').encode())\n"
        "def heuristic(state, task):\n"
        "    raise RuntimeError('never answers by itself')\n",
    # SIGIO to the supervisor: every descriptor owned by the parent, its signal SIGKILL and
    # O_ASYNC set, so the supervisor's next job line would kill it (the same uid may signal)
    "sigio_supervisor": _SYSCALL + "def heuristic(state, task):\n"
                        f"    parent = _syscall({_NR['getppid']})[0]\n"
                        "    for fd in range(16):\n"
                        f"        _syscall({_NR['fcntl']}, fd, 8, parent)\n"  # F_SETOWN
                        f"        _syscall({_NR['fcntl']}, fd, 10, 9)\n"  # F_SETSIG, SIGKILL
                        f"        flags = _syscall({_NR['fcntl']}, fd, 3, 0)[0]\n"  # F_GETFL
                        "        if flags >= 0:\n"
                        f"            _syscall({_NR['fcntl']}, fd, 4, flags | 0o20000)\n"
                        "    return 0\n",
    # memory outside the address-space limit: a page marked for transparent huge pages,
    # spliced into a pipe of the program's own, stays pinned (its whole 2 MiB) after munmap;
    # returns 1 when a page was spliced
    "vmsplice_huge_pages": _SYSCALL + "def heuristic(state, task):\n"
                           "    c = _unguard().modules['_ctypes']\n"
                           "    class Long(c._SimpleCData):\n"
                           "        _type_ = 'l'\n"
                           "    size = 4 * 2 ** 20\n"
                           f"    base = _syscall({_NR['mmap']}, 0, size, 3, 0x22, -1, 0)[0]\n"
                           "    if base in (-1, 0):\n"
                           "        return 0\n"
                           "    page = (base + 2 ** 21 - 1) // 2 ** 21 * 2 ** 21\n"
                           f"    _syscall({_NR['madvise']}, page, 2 ** 21, 14)\n"  # HUGEPAGE
                           "    Long.from_address(page).value = 1\n"
                           f"    if _syscall({_NR['pipe2']}, base, 0)[0] != 0:\n"
                           "        return 0\n"
                           "    write_end = Long.from_address(base).value >> 32\n"
                           "    Long.from_address(base + 16).value = page\n"
                           "    Long.from_address(base + 24).value = 4096\n"
                           f"    spliced = _syscall({_NR['vmsplice']}, write_end, base + 16, 1,"
                           " 0)[0]\n"
                           f"    _syscall({_NR['munmap']}, base, size)\n"
                           "    return 1 if spliced > 0 else 0\n",
    # inotify watches are a host-wide quota of the uid (and pin kernel memory): returns 1
    # when a watch was added
    "inotify_watches": _SYSCALL + "def heuristic(state, task):\n"
                       f"    fd = _syscall({_NR['inotify_init1']}, 0)[0]\n"
                       "    if fd < 0:\n"
                       "        return 0\n"
                       f"    watch = _syscall({_NR['inotify_add_watch']}, fd, _cstring(b'/'),"
                       " 0x100)[0]\n"
                       "    return 1 if watch >= 0 else 0\n",
    # kernel memory outside the address-space limit: page tables. Two-page read-only
    # mappings 2 GiB apart, each across a 1 GiB line, each page read once: every 8 KiB that
    # RLIMIT_AS counts costs the kernel page-table pages at every level (about 2x the limit
    # in page tables); returns the pages touched
    "page_tables_spread": _SYSCALL + "def heuristic(state, task):\n"
                          "    c = _unguard().modules['_ctypes']\n"
                          "    class Byte(c._SimpleCData):\n"
                          "        _type_ = 'b'\n"
                          "    touched = 0\n"
                          "    for k in range({rounds}):\n"
                          "        hint = 2 ** 40 + k * 2 ** 31 + 2 ** 30 - 4096\n"
                          f"        address = _syscall({_NR['mmap']}, hint, 8192, 1, 0x22, -1, 0)"
                          "[0]\n"
                          "        if address in (-1, 0) or address < 0:\n"
                          "            return touched\n"
                          "        touched += 2 + 0 * (Byte.from_address(address).value\n"
                          "                            + Byte.from_address(address + 4096).value)\n"
                          "    return touched\n",
    # the same by punching holes: map 256 MiB, touch one page, unmap the rest, again (one
    # page-table page per kept page, up to the kernel's count of mappings)
    "page_tables_holes": _SYSCALL + "def heuristic(state, task):\n"
                         "    c = _unguard().modules['_ctypes']\n"
                         "    class Byte(c._SimpleCData):\n"
                         "        _type_ = 'b'\n"
                         "    touched, size = 0, 256 * 2 ** 20\n"
                         "    for k in range({rounds}):\n"
                         f"        base = _syscall({_NR['mmap']}, 0, size, 3, 0x22, -1, 0)[0]\n"
                         "        if base in (-1, 0) or base < 0:\n"
                         "            return touched\n"
                         "        keep = base + (k % 127 + 1) * 2 ** 21\n"
                         "        Byte.from_address(keep).value = 1\n"
                         f"        _syscall({_NR['munmap']}, base, keep - base)\n"
                         f"        _syscall({_NR['munmap']}, keep + 4096,"
                         " base + size - keep - 4096)\n"
                         "        touched += 1\n"
                         "    return touched\n",
    # a value that depends on how often the program was asked, not on the state: each answer
    # smaller than the ones before, so every explored state would look improving
    "answers_differ": "_asked = [0]\n"
                      "def heuristic(state, task):\n"
                      "    _asked[0] += 1\n"
                      "    return 1000.0 / _asked[0]\n",
}


# Programs that break their result stream: whatever they answered must be voided.
MUST_VOID = ("forge_result_then_raise", "nested_result_line", "huge_result_line",
             "answers_differ")
# Programs whose value (1, or a count) says that their side effect happened on the host.
REPORTS_SIDE_EFFECT = ("sysv_shared_memory", "create_files_flood", "xattr_flood",
                       "meddle_supervisor", "vmsplice_huge_pages", "inotify_watches",
                       "page_tables_spread", "page_tables_holes")
PAGE_TABLE_ROUNDS = 60_000  # the page-table programs' rounds: about 940 MiB unconfined
REQUESTS = 8  # requests per program (stopping at the first error)
SLOW_FRACTION = 0.9  # slow_answers answers each request after this share of the limit


@dataclass
class HostileOutcome:
    name: str
    escaped: bool
    outcome: str  # how the sandbox reported it
    page_tables_kib: int = 0  # the host's page tables while the program's child lived, more
    # than before it started (/proc/meminfo; other processes move it a little too)


def page_tables_kib() -> int:
    """The host's kernel memory in page tables (``PageTables`` of /proc/meminfo), KiB."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("PageTables:"):
            return int(line.split()[1])
    return 0


def run_hostile_suite(task: Task, timeout: float = 2.0,
                      sandbox: str = "bwrap") -> list[HostileOutcome]:
    """Run every hostile program on the initial state of ``task`` (up to :data:`REQUESTS`
    times, so a stale reply left in the channel would be read by a later request and a slow
    program meets its budget, then the end of the task's run, which checks the program's
    result stream)."""
    return [run_hostile_program(name, task, timeout, sandbox) for name in HOSTILE]


def run_hostile_program(name: str, task: Task, timeout: float = 2.0,
                        sandbox: str = "bwrap", rounds: int = PAGE_TABLE_ROUNDS
                        ) -> HostileOutcome:
    """Run one program of :data:`HOSTILE` and look for its side effect on the host, with the
    default time budgets of :class:`Limits` in units of ``timeout``."""
    budget = Limits().task_budget * timeout
    with tempfile.TemporaryDirectory(prefix="hostile-") as folder, \
            socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        os.chmod(folder, 0o777)  # writable by anyone: only the boundary may stop a write
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        server.setblocking(False)
        victim_file = Path(folder) / "victim.txt"
        victim_file.write_text("host file")
        os.utime(victim_file, (1e9, 1e9))
        victim = subprocess.Popen(["sleep", "60"], start_new_session=True)
        marker = Path(folder) / f"{name}.marker"
        program = HOSTILE[name].format(marker=str(marker), port=server.getsockname()[1],
                                       victim_file=str(victim_file), victim_pid=victim.pid,
                                       pause=SLOW_FRACTION * timeout, rounds=rounds)
        start = time.perf_counter()
        voided, returned = False, []
        page_tables_before, grown = page_tables_kib(), 0
        try:  # as run_over_tasks: values count once the task's run ended without error
            with SandboxedHeuristic(program, timeout=timeout, sandbox=sandbox,
                                    task_budget=budget,
                                    run_budget=Limits().run_budget * timeout) as h:
                h.set_task(task)
                for _ in range(REQUESTS):
                    returned += h([task.init])
                    grown = max(grown, page_tables_kib() - page_tables_before)
                values = returned
                h.confirm({task.init: values[-1]})  # as the directness check's evidence
                h.end_task()
            outcome = f"ran, returned {values[:2]}"
            # a value other than 0 is forged; a program that must be voided was not
            forged = any(v != 0 for v in values) and name not in MUST_VOID
        except ProgramError as err:
            outcome, forged = f"contained: {err}", False
            voided = isinstance(err, ProtocolViolation)
        overran = time.perf_counter() - start > budget + timeout
        try:
            server.accept()[0].close()
            connected = True
        except BlockingIOError:
            connected = False
        killed = victim.poll() is not None
        if not killed:
            os.kill(victim.pid, signal.SIGKILL)
        victim.wait()
        touched = os.stat(victim_file).st_mtime != 1e9
        kept = name in MUST_VOID and not voided
        # the supervisor itself died or stalled: something of the program's reached it
        harmed = any(text in outcome for text in ("the worker died", "worker is not running",
                                                   "timeout"))
        # a side effect the program reports with its value happened, even if it then failed
        reported = name in REPORTS_SIDE_EFFECT and any(v != 0 for v in returned)
        escaped = (os.path.lexists(marker) or connected or forged or killed or touched
                   or overran or kept or reported or (harmed and name != "infinite_loop"))
        return HostileOutcome(name, escaped, outcome, grown)
