"""Job states for ``hydra/launcher=submitit_slurm`` on a cluster without job accounting.

submitit reads the state of its jobs with ``sacct``, which fails where the cluster keeps no
accounting (``AccountingStorageType=accounting_storage/none``, common on small clusters):
every poll then printed a three-line "Bypassing sacct error ... status may be inaccurate"
warning, and a job that died without writing its result stayed "UNKNOWN", so the sweep
waited for it forever. :func:`watch_jobs` checks once whether ``sacct`` answers; where it
does not, it says so in one line and submitit reads the states from ``squeue`` instead (every
job the controller still knows, finished ones included; a job that has left the queue is
finished, and its result file says how).
"""

from __future__ import annotations

import shutil
import subprocess
import sys

from common.errors import UserError

OTHER_LAUNCHERS = "hydra/launcher=joblib (this machine) or submitit_local (a test)"

FINISHED = "FINISHED (no longer in the queue)"


def check_cluster() -> None:
    """UserError (one line) unless a Slurm controller answers here."""
    if shutil.which("srun") is None or shutil.which("sinfo") is None:
        raise UserError("hydra/launcher=submitit_slurm submits to a Slurm cluster and srun "
                        "is not found here; run it on the cluster's login node, or use "
                        + OTHER_LAUNCHERS)
    try:
        done = subprocess.run(["sinfo", "--noheader", "--format=%P"], capture_output=True,
                              text=True, timeout=30)
        reason = (done.stderr.strip().splitlines() or [""])[-1] if done.returncode else ""
    except subprocess.TimeoutExpired:
        reason = "sinfo did not answer within 30 s"
    if reason:
        raise UserError(f"hydra/launcher=submitit_slurm: no Slurm controller answers here "
                        f"({reason}); run it where one does (SLURM_CONF names the cluster's "
                        f"slurm.conf), or use {OTHER_LAUNCHERS}")


def accounting_answers() -> tuple[bool, str]:
    """Whether ``sacct`` answers on this cluster, and what it said when it does not."""
    try:
        done = subprocess.run(["sacct", "--noheader", "-X", "-o", "JobID", "-j", "1"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as err:
        return False, str(err)
    return done.returncode == 0, (done.stderr.strip().splitlines() or [""])[-1]


def queue_watcher(watcher_class):
    """A submitit watcher (a subclass of ``watcher_class``) that reads job states from
    ``squeue``."""

    class QueueWatcher(watcher_class):
        def _make_command(self):
            if super()._make_command() is None:  # nothing left to watch
                return None
            # -r: one line per array element; --states=all: finished jobs the controller
            # still keeps
            return ["squeue", "--noheader", "-r", "--states=all", "--format=%i|%T"]

        def read_info(self, string) -> dict[str, dict[str, str]]:
            text = string.decode() if isinstance(string, bytes) else string
            states = {}
            for line in text.splitlines():
                job, _, state = line.partition("|")
                if job.strip():
                    states[job.strip()] = {"JobID": job.strip(), "State": state.strip()}
            for job in self._registered - self._finished:
                states.setdefault(job, {"JobID": job, "State": FINISHED})
            return states

    return QueueWatcher


def watch_jobs() -> None:
    """Before a submitit Slurm sweep: where ``sacct`` does not answer, one line, and job
    states from ``squeue``."""
    from submitit.slurm import slurm

    answers, message = accounting_answers()
    if answers:
        return
    print(f"note: this Slurm cluster keeps no job accounting (sacct: {message or 'no answer'});"
          " job states are read from squeue", file=sys.stderr)
    slurm.SlurmJob.watcher = queue_watcher(slurm.SlurmInfoWatcher)(delay_s=600)
