"""User-facing errors: one clear line, a documented exit code, no traceback."""

from __future__ import annotations

import difflib
import os
import threading
from pathlib import Path


class UserError(Exception):
    """A mistake the user can fix (unknown name, bad value, missing file, no GPU, ...).

    The runner prints ``error: <message>`` without a traceback (``HYDRA_FULL_ERROR=1`` shows
    it); exit code 1 when the command is rejected before a run starts, 2 when a started run
    stops on it (README, "Exit codes").
    """


def did_you_mean(kind: str, name: str, known: list[str]) -> UserError:
    """Build the "unknown X 'foo'; did you mean bar? known: ..." error."""
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
    hint = f"; did you mean {close[0]}?" if close else ";"
    return UserError(f"unknown {kind} '{name}'{hint} known: {', '.join(sorted(known))}")


NAME_MAX = 255  # bytes of one path component on Linux file systems


def ensure_writable(folder: Path, what: str) -> None:
    """``UserError`` naming ``what`` (the setting the user controls) when ``folder`` cannot be
    created or written. Creates nothing: a probe file of this process is written and removed
    in the folder, or in its nearest existing parent when it does not exist yet, so callers
    that check the same new folder at once (the ranks of one job, the jobs of a sweep that
    share a cache folder) cannot remove what another is checking."""
    folder = Path(folder).absolute()
    too_long = [part for part in folder.parts if len(part.encode()) > NAME_MAX]
    if too_long:
        raise UserError(f"{what}: the folder name '{too_long[0][:40]}...' has "
                        f"{len(too_long[0].encode())} bytes, over the file system's {NAME_MAX}")
    existing = next(p for p in [folder, *folder.parents] if p.exists())
    probe = existing / f".write_probe.{os.getpid()}.{threading.get_ident()}"
    try:
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        raise UserError(f"{what} is not writable ({err.strerror}); choose a folder you can "
                        "write to (paths.output_dir, paths.cache_dir or hydra.run.dir)") from None
