"""A one-node Slurm cluster on this host, for the tests marked ``slurm`` (make test-slurm).

Debian's ``slurmctld``, ``slurmd`` and ``munge`` (installed by ``make test-slurm``) are
started as root from a temporary state folder: a fresh munge key and socket, a
``slurm.conf`` for this host (its cores and memory as ``slurmd -C`` reports them, one
partition ``debug``, no accounting, ``proctrack/linuxproc`` and no task plugin, so no cgroup
is needed), free ports. :func:`one_node_cluster` yields the environment the clients need
(``SLURM_CONF``) and, on the way out, also after a failure, cancels what is left in the
queue, stops the three daemons it started by their pids and removes the folder.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")


def missing() -> str | None:
    """Why a cluster cannot start here, or None."""
    absent = [p for p in (*DAEMONS, "sbatch", "squeue") if shutil.which(p) is None]
    if absent:
        return (f"{', '.join(absent)} not installed (make test-slurm installs slurmctld, "
                "slurmd, slurm-client and munge as root)")
    if os.geteuid() != 0:
        return "the one-node cluster runs its daemons as root"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _node_line() -> str:
    """This host as slurmd sees it (``NodeName=... CPUs=... RealMemory=...``)."""
    out = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, check=True).stdout
    return next(line for line in out.splitlines() if line.startswith("NodeName="))


def slurm_conf(state: Path, node: str) -> str:
    host = node.split()[0].split("=", 1)[1]
    return "\n".join([
        "ClusterName=paperlab-test", f"SlurmctldHost={host}",
        "SlurmUser=root", "SlurmdUser=root",
        f"SlurmctldPort={_free_port()}", f"SlurmdPort={_free_port()}",
        # a requeued job may start again after the credential's lifetime (default 120 s)
        "AuthType=auth/munge", f"AuthInfo=socket={state}/munge.socket,cred_expire=10",
        f"StateSaveLocation={state}/ctld", f"SlurmdSpoolDir={state}/spool",
        f"SlurmctldPidFile={state}/slurmctld.pid", f"SlurmdPidFile={state}/slurmd.pid",
        f"SlurmctldLogFile={state}/slurmctld.log", f"SlurmdLogFile={state}/slurmd.log",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
        "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
        "MpiDefault=none", "ReturnToService=2", "KillWait=2",
        f"{node} State=UNKNOWN",
        "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP", ""])


def _pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _stop(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 15
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def one_node_cluster():
    """Start the cluster; yield the clients' environment; stop it and remove its folder."""
    state = Path(tempfile.mkdtemp(prefix="slurm-"))
    pids: list[int] = []
    try:
        for sub in ("ctld", "spool"):
            (state / sub).mkdir()
        key = state / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        subprocess.run(["munged", "--force", f"--socket={state}/munge.socket",
                        f"--key-file={key}", f"--log-file={state}/munged.log",
                        f"--pid-file={state}/munged.pid", f"--seed-file={state}/munged.seed"],
                       check=True, capture_output=True)
        pids.append(_pid(state / "munged.pid"))
        conf = state / "slurm.conf"
        conf.write_text(slurm_conf(state, _node_line()))
        env = {**os.environ, "SLURM_CONF": str(conf)}
        for daemon, pid_file in (("slurmctld", "slurmctld.pid"), ("slurmd", "slurmd.pid")):
            subprocess.run([daemon, "-f", str(conf)], check=True, capture_output=True, env=env)
            for _ in range(100):
                if (pid := _pid(state / pid_file)) is not None:
                    pids.append(pid)
                    break
                time.sleep(0.1)
        for _ in range(150):  # the node registers with the controller
            idle = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True,
                                  env=env).stdout.strip()
            if idle == "idle":
                break
            time.sleep(0.2)
        else:
            raise RuntimeError(f"the Slurm node did not come up ({idle!r}); logs in {state}")
        yield {"SLURM_CONF": str(conf)}
    finally:
        if len(pids) == 3:  # jobs a failed test left behind end with the cluster
            subprocess.run(["scancel", "--user=root"], capture_output=True,
                           env={**os.environ, "SLURM_CONF": str(state / "slurm.conf")})
        _stop([p for p in pids if p])
        shutil.rmtree(state, ignore_errors=True)


def queue(env: dict) -> list[str]:
    """The jobs Slurm still runs or holds (empty when every job has ended)."""
    out = subprocess.run(["squeue", "-h", "-o", "%i %T"], capture_output=True, text=True,
                         env={**os.environ, **env}, check=True).stdout
    return out.split("\n")[:-1]


def cancel_all(env: dict) -> None:
    """Cancel every job and wait until the queue is empty, so that a test that failed or
    timed out leaves its jobs holding none of the node's cores for the next one."""
    env = {**os.environ, **env}
    subprocess.run(["scancel", "--user=root"], capture_output=True, env=env)
    for _ in range(150):
        if not queue(env):
            return
        time.sleep(0.2)


def job_logs(folder: Path, env: dict, lines: int = 15) -> str:
    """What a failing test shows of its jobs: the queue with Slurm's reason for each job,
    and the last lines of each task's submitit log under ``folder``."""
    listing = subprocess.run(["squeue", "-h", "-o", "%i %T %r"], capture_output=True,
                             text=True, env={**os.environ, **env}).stdout.strip()
    parts = [f"queue: {listing or 'empty'}"]
    for log in sorted(Path(folder).rglob(".submitit/*/*_log.*")):
        tail = log.read_text(errors="replace").splitlines()[-lines:]
        parts.append(f"== {log.relative_to(folder)}\n" + "\n".join(tail))
    return "\n".join(parts)
