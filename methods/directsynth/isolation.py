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
- two seccomp filters (libseccomp through ``pyseccomp``) that refuse with EPERM the system
  calls a heuristic never needs. The first, for every process of the sandbox
  (:data:`DENIED_SYSCALLS`, :data:`DENIED_FLAGS`, :data:`SELF_ONLY`): sockets, file creation
  and every file-system change (``open`` with ``O_CREAT`` or ``O_TMPFILE``, ``openat2``,
  ``mknod``, ``link``, ``rename``, ``chmod``, ``utime``, ``fallocate``, the ``setxattr``
  family ...), signals to other processes, ``ptrace``, namespaces, ``bpf``, ``io_uring``,
  ``syslog``, memory that the address-space limit does not count (System V shared memory,
  message queues and semaphores, POSIX message queues, ``memfd_create``), and the calls that
  change another process's limits, priority, scheduling or memory placement (``prlimit64``,
  ``setpriority``, ``sched_set*``, ``ioprio_set``, ``migrate_pages``, ``move_pages``) unless
  they name the calling process itself, and ``kcmp``: the program's process and its
  supervisor run as the same user, so without this the program could lower the
  supervisor's limits. The second, which the worker's supervisor installs in each child that
  runs the program (:data:`CHILD_DENIED_SYSCALLS`), adds process and thread creation, timers,
  signal handlers and descriptor duplication: the program's code runs only while the child
  answers a request, and its result pipe stays the one the supervisor reads.

What the layers do not hold: CPU time between requests is the caller's to bound (each
request has a wall-clock limit and each program a total budget, sandbox.py); kernel memory
that a process always may use (its page tables, pipe buffers of its few descriptors) counts
against no limit here. A memory cgroup would bound those too; it is not used because it needs
a delegated cgroup v2 tree, which machines this runs on often do not have.

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
# System calls that no process of the sandbox needs; refused with EPERM. Names unknown on
# this architecture are skipped (e.g. ``fork`` and ``mknod`` do not exist on aarch64).
DENIED_SYSCALLS = (
    "socket", "socketpair", "connect", "bind", "listen", "accept", "accept4",
    "mknod", "mknodat", "link", "linkat", "symlink", "symlinkat", "rename", "renameat",
    "renameat2", "unlink", "unlinkat", "mkdir", "mkdirat", "rmdir", "chmod", "fchmod",
    "fchmodat", "chown", "fchown", "lchown", "fchownat", "utime", "utimes", "utimensat",
    "futimesat", "truncate", "ftruncate", "fallocate", "creat", "openat2",
    # extended attributes live in kernel memory on a tmpfs
    "setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr", "fremovexattr",
    # memory outside the address-space limit
    "memfd_create", "memfd_secret", "shmget", "shmat", "shmctl", "shmdt", "msgget", "msgsnd",
    "msgrcv", "msgctl", "semget", "semop", "semtimedop", "semctl", "mq_open", "mq_unlink",
    "mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr",
    "kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "pidfd_open",
    "pidfd_send_signal", "pidfd_getfd", "ptrace", "process_vm_readv", "process_vm_writev",
    "process_madvise", "mount", "umount2", "pivot_root", "chroot", "unshare", "setns",
    "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register", "personality", "syslog",
    "kcmp",
)
# Calls newer than some libseccomp releases know by name, by their number (the same on
# every architecture since Linux 5.1's unified numbering): setxattrat, removexattrat.
DENIED_SYSCALL_NUMBERS = (463, 466)
# (call, argument index, flag bits): refused when the argument has the bits set. O_CREAT
# and O_TMPFILE (whose own bit is 0o20000000): no file is created, even where a file system
# would allow it.
DENIED_FLAGS = (("open", 1, os.O_CREAT), ("open", 1, 0o20000000),
                ("openat", 2, os.O_CREAT), ("openat", 2, 0o20000000))
# (call, argument index, value): allowed only when that argument is the value that names the
# calling process itself (pid 0; for setpriority and ioprio_set, ``which`` must also name a
# single process: PRIO_PROCESS is 0, IOPRIO_WHO_PROCESS is 1)
SELF_ONLY = (("prlimit64", 0, 0), ("sched_setaffinity", 0, 0), ("sched_setscheduler", 0, 0),
             ("sched_setparam", 0, 0), ("sched_setattr", 0, 0), ("migrate_pages", 0, 0),
             ("move_pages", 0, 0), ("setpriority", 0, 0), ("setpriority", 1, 0),
             ("ioprio_set", 0, 1), ("ioprio_set", 1, 0))
# Denied on top of those in the child that runs the program: no other process or thread, and
# no timer or signal handler that could run the program's code after it has answered.
CHILD_DENIED_SYSCALLS = (
    "fork", "vfork", "clone", "clone3", "execve", "execveat",
    "setitimer", "alarm", "timer_create", "timer_settime", "timerfd_create",
    "timerfd_settime", "rt_sigaction", "sigaltstack", "signalfd", "signalfd4",
    "dup", "dup2", "dup3",
)
# fcntl commands that duplicate a descriptor (F_DUPFD, F_DUPFD_CLOEXEC), refused in the child
# too: the result pipe may not be moved or copied
CHILD_DENIED_FCNTL = (0, 1030)
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


def check_sandbox(sandbox: str) -> None:
    """Refuse (UserError, one line) when ``sandbox`` is unknown or cannot run here; warn
    for ``unsafe_process``."""
    if sandbox == "unsafe_process":
        log.warning("method.sandbox=unsafe_process: generated programs run without an "
                    "operating-system boundary (only for trusted programs)")
    elif sandbox == "bwrap":
        bwrap_available()
    else:
        raise UserError(f"unknown method.sandbox '{sandbox}' ({', '.join(SANDBOXES)})")


def worker_launch(worker_args: list[str], sandbox: str, scratch: str) -> Launch:
    """The command that starts ``sandbox_worker.py worker_args...`` under ``sandbox``."""
    if sandbox == "unsafe_process":
        return Launch([sys.executable, "-I", "-B", str(Path(__file__).with_name(WORKER_FILES[0])),
                       *worker_args], cwd=scratch)
    if sandbox != "bwrap":
        raise UserError(f"unknown method.sandbox '{sandbox}' ({', '.join(SANDBOXES)})")
    child_filter = _seccomp_file(DENIED_SYSCALLS + CHILD_DENIED_SYSCALLS, CHILD_DENIED_FCNTL)
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
            "--setenv", "PATH", "/usr/bin:/bin",
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
    seccomp = _seccomp_file(DENIED_SYSCALLS)
    argv += ["--seccomp", str(seccomp.fileno())]
    python = [str(inside_interpreter), "-I", "-B", *python_args]
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


@functools.cache
def bwrap_available() -> str:
    """The bwrap executable, after one probe that it can build a sandbox here (a kernel
    without user namespaces, or a container without the rights, fails here, not mid-run)."""
    bwrap = _which("bwrap")
    probe = [bwrap, "--ro-bind", "/", "/", "--unshare-net", "--unshare-pid", "--dev", "/dev",
             "--proc", "/proc", "--die-with-parent", "true"]
    if os.geteuid() != 0:
        probe[5:5] = ["--unshare-user"]
    done = subprocess.run(probe, capture_output=True, text=True, timeout=30)
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


def _seccomp_file(syscalls: tuple[str, ...], fcntl_commands: tuple[int, ...] = ()):
    """A temporary file holding a compiled filter that refuses ``syscalls``, the
    ``fcntl_commands``, :data:`DENIED_SYSCALL_NUMBERS`, :data:`DENIED_FLAGS` and the
    :data:`SELF_ONLY` calls that name another process, with EPERM (bwrap, or the worker's
    supervisor, reads it from a descriptor)."""
    import errno

    import pyseccomp

    refuse = pyseccomp.ERRNO(errno.EPERM)
    denied = pyseccomp.SyscallFilter(defaction=pyseccomp.ALLOW)

    def number(name: str) -> int:
        return pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, name)

    for name in syscalls:
        if number(name) >= 0:
            denied.add_rule(refuse, number(name))
    for syscall in DENIED_SYSCALL_NUMBERS:
        denied.add_rule(refuse, syscall)
    for name, index, bits in DENIED_FLAGS:
        if number(name) >= 0:
            denied.add_rule(refuse, number(name), pyseccomp.Arg(index, pyseccomp.MASKED_EQ,
                                                                bits, bits))
    for name, index, value in SELF_ONLY:
        if number(name) >= 0:
            denied.add_rule(refuse, number(name), pyseccomp.Arg(index, pyseccomp.NE, value))
    for command in fcntl_commands:
        denied.add_rule(refuse, "fcntl", pyseccomp.Arg(1, pyseccomp.EQ, command))
    handle = tempfile.TemporaryFile()
    denied.export_bpf(handle)
    handle.flush()
    handle.seek(0)
    return handle
