"""Whether the Hugging Face hub can be asked at all: offline mode, or one quick connection.

Models (models/lm/loader.py) and datasets (data/hub.py) look in the local cache first and ask
these before a download, so that a name that is not cached fails within seconds with one line
when the hub cannot answer, instead of a minute of retries."""

from __future__ import annotations

import os
import socket
from urllib.parse import urlparse


def hub_is_offline() -> bool:
    return any(os.environ.get(v, "").lower() in ("1", "true", "yes")
               for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"))


def hub_reachable(timeout: float = 3.0) -> bool:
    """One TCP connection to the hub's endpoint (``HF_ENDPOINT``), ``timeout`` seconds."""
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    try:
        with socket.create_connection((url.hostname, url.port or 443), timeout=timeout):
            return True
    except OSError:
        return False


def why_unreachable() -> str | None:
    """Why the hub cannot be asked now, or None when it can."""
    if hub_is_offline():
        return "offline mode is on (HF_HUB_OFFLINE=1)"
    return None if hub_reachable() else "the hub is unreachable"
