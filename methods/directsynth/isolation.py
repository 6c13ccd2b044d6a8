"""The operating-system boundary around a heuristic worker.

Generated programs are untrusted code. Python-level guards (the worker's restricted builtins
and audit hook) cannot be made complete, so by default (``sandbox="bwrap"``) each worker runs
inside bubblewrap with:

- only the Python installation and the worker's two files, bound read-only; a private empty
  ``/tmp`` (the scratch folder) and minimal ``/dev`` and ``/proc``; nothing else of the host;
- new network, PID, IPC and UTS namespaces: no network, no view of (or signals to) host
  processes; ``--die-with-parent`` and ``--new-session``;
- an unprivileged uid (65534, nobody) with no capabilities and ``no_new_privs``: as root the
  worker's uid is changed by ``setpriv`` (so it is nobody outside the sandbox too), as any
  other user a user namespace maps it;
- a seccomp filter (libseccomp through ``pyseccomp``) that refuses with EPERM the system calls
  a heuristic never needs: sockets, process creation, file-system changes (``mknod``,
  ``link``, ``symlink``, ``rename``, ``chmod``, ``utime`` ...), signals, ``ptrace``,
  namespaces, ``bpf``, ``io_uring``.

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
# System calls a heuristic program never needs; refused with EPERM. Names unknown on this
# architecture are skipped (e.g. ``fork`` and ``mknod`` do not exist on aarch64).
DENIED_SYSCALLS = (
    "socket", "socketpair", "connect", "bind", "listen", "accept", "accept4",
    "fork", "vfork", "clone", "clone3",
    "mknod", "mknodat", "link", "linkat", "symlink", "symlinkat", "rename", "renameat",
    "renameat2", "unlink", "unlinkat", "mkdir", "mkdirat", "rmdir", "chmod", "fchmod",
    "fchmodat", "chown", "fchown", "lchown", "fchownat", "utime", "utimes", "utimensat",
    "futimesat", "truncate", "ftruncate", "memfd_create",
    "kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "pidfd_open",
    "pidfd_send_signal", "ptrace", "process_vm_readv", "process_vm_writev",
    "mount", "umount2", "pivot_root", "chroot", "unshare", "setns", "keyctl", "add_key",
    "request_key", "bpf", "perf_event_open", "userfaultfd", "io_uring_setup",
    "io_uring_enter", "io_uring_register", "personality",
)
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
    return isolated_python([f"/opt/worker/{WORKER_FILES[0]}", *worker_args], scratch)


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
    argv += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", "/tmp",
             "--chdir", "/tmp"]
    seccomp = _seccomp_file()
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


def _seccomp_file():
    """A temporary file holding the compiled filter (bwrap reads it from a descriptor)."""
    import errno

    import pyseccomp

    denied = pyseccomp.SyscallFilter(defaction=pyseccomp.ALLOW)
    for name in DENIED_SYSCALLS:
        number = pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, name)
        if number >= 0:
            denied.add_rule(pyseccomp.ERRNO(errno.EPERM), number)
    handle = tempfile.TemporaryFile()
    denied.export_bpf(handle)
    handle.flush()
    handle.seek(0)
    return handle
