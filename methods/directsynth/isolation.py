"""The operating-system boundary around a heuristic worker.

Generated programs are untrusted code. Python-level guards (the worker's restricted builtins
and audit hook) cannot be made complete, so by default (``sandbox="bwrap"``) each worker runs
inside bubblewrap with:

- only the Python installation and the worker's two files, bound read-only, and a minimal
  ``/dev``; the sandbox's root and ``/dev`` are remounted read-only and there is no ``/tmp``,
  so the program has no writable file system at all (no file data, inodes or extended
  attributes that the kernel would hold outside the address-space limit); no ``/proc`` (so
  no host paths in ``mountinfo`` and no other process's ``mem``); nothing else of the host;
- new network, PID, IPC and UTS namespaces: no network, no view of (or signals to) host
  processes; ``--die-with-parent`` and ``--new-session``;
- an unprivileged uid (65534, nobody) with no capabilities and ``no_new_privs``: as root the
  worker's uid is changed by ``setpriv`` (so it is nobody outside the sandbox too), as any
  other user a user namespace maps it;
- two seccomp filters (libseccomp through ``pyseccomp``), both allowlists: a call that is
  not listed is refused with EPERM, so a call nobody thought of is refused too. The lists
  are measured, not remembered: :mod:`~methods.directsynth.syscall_trace` runs legitimate
  programs of every shipped domain under ``strace`` and the committed result is a test
  fixture. The first filter, for every process of the sandbox (:data:`SANDBOX_ALLOWED`,
  :data:`SANDBOX_ARGUMENTS`, :data:`SANDBOX_EQUIVALENTS`), admits what the uid change, the
  interpreter's start and the supervisor need (about 45 calls), files opened but never
  created, executable memory only from files, limits of the calling process only, and the
  measured ``fcntl``, ``ioctl`` and ``prctl`` commands. The second, which the supervisor
  installs in each child before the program's text runs (:data:`CHILD_ALLOWED`), admits
  four: ``read`` and ``write`` on the child's two pipes, ``brk`` for its memory and
  ``exit_group``. No ``mmap``, ``munmap`` or ``mremap``: the child's heap is one
  contiguous ``brk`` range, which RLIMIT_AS counts, so the page tables it can make the
  kernel hold (unswappable, outside RLIMIT_AS) stay about 1/512 of its memory limit; with
  mappings placed far apart or punched into holes a child held about 940 MiB of page tables
  under a 469 MiB limit. The worker runs on the C library's allocator
  (``PYTHONMALLOC=malloc``, set in the sandbox's otherwise empty environment, so the
  interpreter's own arenas are not mapped), told by the supervisor never to map memory
  (``mallopt(M_MMAP_MAX, 0)``), which every child inherits. The program
  therefore cannot open a file (nor import a module that is not loaded already), make a pipe,
  change a descriptor (no ``fcntl``: no SIGIO owner or signal, no ``O_ASYNC``, no pipe
  size), splice memory (``vmsplice``), advise memory (``madvise``: no huge pages), watch
  files (``inotify``), signal, fork, sleep, set a timer or handler, or read its own ids.
  The program's process and its supervisor run as the same uid; what keeps the program from
  signalling the supervisor is the child's allowlist (no call that sends or arranges a
  signal is on it), not a second uid. Before its filter the child turns transparent huge
  pages off (``PR_SET_THP_DISABLE``), so no page it touches can pin more than it maps.

The filters are measured with this machine's C library and interpreter; another one may
make a call the lists lack. ``sandbox.check_sandbox`` therefore loads one program in a worker
before any work and refuses in one line when the worker does not start.

What the layers do not hold: CPU time between requests is the caller's to bound (each
request has a wall-clock limit and each program a total budget, sandbox.py); kernel memory
that a process always may use (its page tables, the buffers of its two pipes) counts
against no limit here. A memory cgroup would bound those too; it is not used because it needs
a delegated cgroup v2 tree, which machines this runs on often do not have. That a program
answers the same state with the same value is checked by the caller, not by the boundary
(``SandboxedHeuristic.confirm``).

``sandbox="unsafe_process"`` keeps only the Python guards and resource limits, for trusted
programs; it logs a warning.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from common.errors import UserError

log = logging.getLogger(__name__)

SANDBOXES = ("bwrap", "unsafe_process")
NOBODY = 65534
INSTALL_HINT = ("install bubblewrap (Debian/Ubuntu: `apt-get install bubblewrap`, or `make "
                "install` as root), or set method.sandbox=unsafe_process to run trusted "
                "programs without isolation")
# Both filters are allowlists: a call not listed is refused with EPERM. The lists are the
# calls measured by syscall_trace.py while legitimate programs of every shipped domain ran
# (the fixture tests/data/directsynth_syscalls.json, which a test holds them to), plus the
# few named in SANDBOX_EQUIVALENTS. Calls that are only safe with some arguments are allowed
# with those arguments alone (SANDBOX_ARGUMENTS, CHILD_ARGUMENTS).
#
# Every process of the sandbox (bubblewrap's filter): the uid change (setpriv), the
# interpreter's start, the supervisor, which forks the children and reads and writes pipes.
SANDBOX_ALLOWED = (
    "access", "arch_prctl", "brk", "capget", "capset", "clone", "close", "close_range", "dup2",
    "execve", "exit_group", "futex", "getdents64", "getrandom", "getresgid", "getresuid",
    "gettid", "getuid", "lseek", "newfstatat", "pipe2", "pread64", "read",
    "readlink", "rseq", "rt_sigaction", "rt_sigprocmask", "set_robust_list", "set_tid_address",
    "setgroups", "setresgid", "setresuid", "sysinfo", "wait4", "write",
)
# calls another C library or kernel makes for a measured step (call -> the measured one);
# names unknown on this architecture are skipped
SANDBOX_EQUIVALENTS = {
    "clone3": "clone", "fork": "clone", "vfork": "clone", "statx": "newfstatat",
    "fstat": "newfstatat", "stat": "newfstatat", "lstat": "newfstatat", "faccessat": "access",
    "faccessat2": "access", "getdents": "getdents64", "readlinkat": "readlink",
    "pipe": "pipe2", "exit": "exit_group", "waitid": "wait4",
    "getpid": "gettid", "getppid": "gettid", "geteuid": "getuid", "getgid": "getuid",
    "getegid": "getuid", "pread": "pread64", "futex_waitv": "futex", "mmap2": "mmap",
    "rt_sigreturn": "rt_sigaction",  # the return from a handler installed by rt_sigaction
}
# measured, and refused on purpose (call -> why the worker runs without it)
SANDBOX_REFUSED = {
    "socket": "setpriv looks up the user through nscd first; refused, it reads no passwd file "
              "(there is none in the sandbox) and goes on with the numeric uid",
    "connect": "the same lookup's connection",
}
# The child that runs the program: its job and result pipes, its heap (brk only), its exit.
CHILD_ALLOWED = ("brk", "exit_group", "read", "write")
CHILD_REFUSED = {
    "mmap": "the allocator's fallback when brk fails at the memory limit; refused, malloc "
            "returns NULL and the program gets its MemoryError as it did",
}
# argument constants (Linux, every architecture)
PROT_EXEC, MAP_ANONYMOUS, O_CREAT, O_TMPFILE_BIT = 0x4, 0x20, os.O_CREAT, 0o20000000
FCNTL = {"F_GETFD": 1, "F_DUPFD_CLOEXEC": 1030}
IOCTL = {"TCGETS": 0x5401, "FIOCLEX": 0x5451}
PRCTL = {"PR_SET_PDEATHSIG": 1, "PR_GET_DUMPABLE": 3, "PR_SET_DUMPABLE": 4,
         "PR_SET_KEEPCAPS": 8, "PR_SET_SECCOMP": 22,
         "PR_CAPBSET_READ": 23, "PR_CAPBSET_DROP": 24, "PR_GET_SECUREBITS": 27,
         "PR_SET_NO_NEW_PRIVS": 38, "PR_GET_NO_NEW_PRIVS": 39, "PR_SET_THP_DISABLE": 41,
         "PR_GET_THP_DISABLE": 42, "PR_CAP_AMBIENT": 47}
# (call, [(argument index, mask, value), ...]): allowed when every (argument & mask) == value
# (one check per argument), one rule per entry: a call with several is allowed when any
# of them matches
SANDBOX_ARGUMENTS = (
    # files are opened, never created (no O_CREAT, no O_TMPFILE)
    ("openat", [(2, O_CREAT | O_TMPFILE_BIT, 0)]),
    # executable memory only from a file (the interpreter's libraries), never anonymous
    ("mmap", [(2, PROT_EXEC, 0)]), ("mmap", [(3, MAP_ANONYMOUS, 0)]),
    ("mprotect", [(2, PROT_EXEC, 0)]),
    # limits of the calling process only (pid 0)
    ("prlimit64", [(0, 2**64 - 1, 0)]),
    *(("fcntl", [(1, 2**64 - 1, value)]) for value in FCNTL.values()),
    *(("ioctl", [(1, 2**32 - 1, value)]) for value in IOCTL.values()),
    *(("prctl", [(0, 2**64 - 1, value)]) for value in PRCTL.values()),
)
CHILD_ARGUMENTS = ()  # no call is allowed by its arguments: no mapping at all
WORKER_FILES = ("sandbox_worker.py", "features.py")


@dataclass
class Launch:
    """How to start one worker: argv, descriptors to hand over, and what to clean up."""

    argv: list[str]
    cwd: str
    pass_fds: tuple[int, ...] = ()
    cleanup: list = field(default_factory=list)  # callables, run after the worker started

    def started(self) -> None:
        for step in self.cleanup:
            step()
        self.cleanup.clear()


def worker_launch(worker_args: list[str], sandbox: str, scratch: str) -> Launch:
    """The command that starts ``sandbox_worker.py worker_args...`` under ``sandbox``."""
    if sandbox == "unsafe_process":
        return Launch([sys.executable, "-I", "-B", str(Path(__file__).with_name(WORKER_FILES[0])),
                       *worker_args], cwd=scratch)
    if sandbox != "bwrap":
        raise UserError(f"unknown method.sandbox '{sandbox}' ({', '.join(SANDBOXES)})")
    child_filter = _seccomp_file(CHILD_ALLOWED, CHILD_ARGUMENTS)
    try:
        launch = isolated_python([f"/opt/worker/{WORKER_FILES[0]}", *worker_args,
                                  str(child_filter.fileno())], scratch)
    except BaseException:
        child_filter.close()
        raise
    launch.pass_fds += (child_filter.fileno(),)
    launch.cleanup.append(child_filter.close)
    return launch


def isolated_python(python_args: list[str], scratch: str) -> Launch:
    """``python -I -B python_args...`` inside the bubblewrap boundary described above (the
    worker's files are at /opt/worker). Raises UserError when bubblewrap cannot run here."""
    bwrap = bwrap_available()
    folder = Path(__file__).parent
    interpreter = Path(os.path.realpath(sys.executable))
    prefix = Path(os.path.realpath(sys.base_prefix))
    try:
        inside_interpreter = Path("/opt/python") / interpreter.relative_to(prefix)
    except ValueError:
        raise UserError(f"the Python interpreter {interpreter} is not inside its prefix "
                        f"{prefix}; run with a standard installation or "
                        "method.sandbox=unsafe_process") from None
    argv = [bwrap, "--die-with-parent", "--new-session", "--clearenv",
            "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "PYTHONMALLOC", "malloc",
            "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try",
            "--ro-bind", "/usr", "/usr"]
    for top in ("bin", "lib", "lib32", "lib64", "sbin"):  # merged-/usr symlinks or folders
        path = Path("/") / top
        if path.is_symlink():
            argv += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            argv += ["--ro-bind", str(path), str(path)]
    argv += ["--perms", "0755", "--dir", "/opt",
             "--ro-bind", str(prefix), "/opt/python",
             "--perms", "0755", "--dir", "/opt/worker"]
    for name in WORKER_FILES:
        argv += ["--ro-bind", str(folder / name), f"/opt/worker/{name}"]
    # nothing writable: the worker writes no file (its RLIMIT_FSIZE is 0)
    argv += ["--dev", "/dev", "--remount-ro", "/dev", "--remount-ro", "/", "--chdir", "/"]
    seccomp = _seccomp_file(SANDBOX_ALLOWED + tuple(SANDBOX_EQUIVALENTS), SANDBOX_ARGUMENTS)
    argv += ["--seccomp", str(seccomp.fileno())]
    # -s -B (and -P where it exists), not -I: -I would ignore PYTHONMALLOC; the environment
    # is empty but for the two variables above
    safe_path = ["-P"] if sys.version_info >= (3, 11) else []
    python = [str(inside_interpreter), "-s", "-B", *safe_path, *python_args]
    if os.geteuid() == 0:
        # no user namespace: the worker becomes nobody for the host kernel too
        argv += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID",
                 "--cap-add", "CAP_SETPCAP", "--",
                 _which("setpriv"), f"--reuid={NOBODY}", f"--regid={NOBODY}",
                 "--clear-groups", "--no-new-privs", "--inh-caps=-all",
                 "--bounding-set=-all", *python]
    else:
        argv += ["--unshare-user", "--uid", str(NOBODY), "--gid", str(NOBODY),
                 "--cap-drop", "ALL", "--", *python]
    return Launch(argv, cwd=scratch, pass_fds=(seccomp.fileno(),), cleanup=[seccomp.close])


def _which(program: str) -> str:
    path = shutil.which(program, path="/usr/bin:/bin:/usr/sbin:/sbin") or shutil.which(program)
    if path is None:
        raise UserError(f"the heuristic sandbox needs `{program}`, which is not installed; "
                        + INSTALL_HINT)
    return path


PROBE_SECONDS = 30  # a sandbox that takes longer to build than this is not coming


@functools.cache
def bwrap_available() -> str:
    """The bwrap executable, after one probe that it can build a sandbox here (a kernel
    without user namespaces, or a container without the rights, fails here, not mid-run)."""
    bwrap = _which("bwrap")
    probe = [bwrap, "--ro-bind", "/", "/", "--unshare-net", "--unshare-pid", "--dev", "/dev",
             "--proc", "/proc", "--die-with-parent", "true"]
    if os.geteuid() != 0:
        probe[5:5] = ["--unshare-user"]
    try:
        done = subprocess.run(probe, capture_output=True, text=True, timeout=PROBE_SECONDS)
    except subprocess.TimeoutExpired:
        raise UserError(f"bubblewrap did not build a test sandbox within {PROBE_SECONDS} s "
                        "(a hung namespace or mount setup on this machine); check `bwrap "
                        "--ro-bind / / true` by hand, or set method.sandbox=unsafe_process to "
                        "run trusted programs without isolation") from None
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise UserError(f"bubblewrap cannot create a sandbox on this machine ({reason}); "
                        "allow unprivileged user namespaces, run as root, or set "
                        "method.sandbox=unsafe_process to run trusted programs without "
                        "isolation")
    try:
        import pyseccomp  # noqa: F401 - loads libseccomp
    except (ImportError, OSError) as err:
        raise UserError(f"the heuristic sandbox needs libseccomp and pyseccomp ({err}); "
                        "`pip install pyseccomp` and `apt-get install libseccomp2`") from None
    return bwrap


def _seccomp_file(allowed: tuple[str, ...], arguments: tuple = (), default: str = "refuse"):
    """A temporary file holding a compiled filter that allows ``allowed`` and the
    ``arguments`` rules and refuses every other call with EPERM (bwrap, or the worker's
    supervisor, reads it from a descriptor); ``default="allow"`` allows every call (for
    tracing what the worker asks for, syscall_trace.py)."""
    import errno

    import pyseccomp

    allowlist = pyseccomp.SyscallFilter(defaction=pyseccomp.ALLOW if default == "allow"
                                        else pyseccomp.ERRNO(errno.EPERM))
    if default == "allow":  # libseccomp refuses rules that repeat the default
        allowed, arguments = (), ()

    def number(name: str) -> int:
        return pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, name)

    for name in allowed:
        if number(name) >= 0:
            allowlist.add_rule(pyseccomp.ALLOW, number(name))
    for name, checks in arguments:
        if number(name) >= 0:
            allowlist.add_rule(pyseccomp.ALLOW, number(name),
                               *(pyseccomp.Arg(index, pyseccomp.MASKED_EQ, mask, value)
                                 for index, mask, value in checks))
    handle = tempfile.TemporaryFile()
    allowlist.export_bpf(handle)
    handle.flush()
    handle.seek(0)
    return handle
