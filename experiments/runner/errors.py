"""User-facing errors: one clear line, a non-zero exit code, no traceback."""

from __future__ import annotations

import difflib
from pathlib import Path


class UserError(Exception):
    """A mistake the user can fix (unknown name, bad value, missing file, no GPU, ...).

    The runner prints ``error: <message>`` and exits with code 2; set ``HYDRA_FULL_ERROR=1``
    to see the traceback instead.
    """


def did_you_mean(kind: str, name: str, known: list[str]) -> UserError:
    """Build the "unknown X 'foo'; did you mean bar? known: ..." error."""
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
    hint = f"; did you mean {close[0]}?" if close else ""
    return UserError(f"unknown {kind} '{name}'{hint} known: {', '.join(sorted(known))}")


def ensure_writable(folder: Path, what: str) -> None:
    """Create ``folder`` and write a probe file in it; ``UserError`` naming ``what`` (the
    setting the user controls) when that fails."""
    probe = Path(folder) / ".write_probe"
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        raise UserError(f"{what} is not writable ({err.strerror}); choose a folder you can "
                        "write to (paths.output_dir or hydra.run.dir)") from None
