"""Whether the Hugging Face hub can be asked at all: offline mode, or one quick connection.

Models (models/lm/loader.py) and datasets (data/hub.py) look in the local cache first and ask
these before a download, so that a name that is not cached fails within seconds with one line
when the hub cannot answer, instead of a minute of retries."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from urllib.parse import urlparse

from common.errors import UserError


def hub_is_offline() -> bool:
    return any(os.environ.get(v, "").lower() in ("1", "true", "yes")
               for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"))


def reachable(address: str, timeout: float = 3.0) -> bool:
    """One TCP connection to the host of ``address`` (a URL), ``timeout`` seconds."""
    url = urlparse(address)
    try:
        with socket.create_connection((url.hostname, url.port or 443), timeout=timeout):
            return True
    except OSError:
        return False


def hub_reachable(timeout: float = 3.0) -> bool:
    """One TCP connection to the hub's endpoint (``HF_ENDPOINT``)."""
    return reachable(os.environ.get("HF_ENDPOINT", "https://huggingface.co"), timeout)


def why_unreachable() -> str | None:
    """Why the hub cannot be asked now, or None when it can."""
    if hub_is_offline():
        return "offline mode is on (HF_HUB_OFFLINE=1)"
    return None if hub_reachable() else "the hub is unreachable"


def not_cached(kind: str, hub_id: str, why: str, instead: str, download: str = "") -> UserError:
    """The one line for a ``kind`` ('model', 'dataset') named by ``hub_id`` that is not in the
    local cache while the hub cannot be asked (``why``): how to get it, or what to set
    ``instead``."""
    return UserError(f"{kind} '{hub_id}' is not in the local Hugging Face cache and {why}; "
                     f"download it once with network access (hf download {hub_id}{download}) "
                     f"or {instead}")


def is_cached(hub_id: str, repo_type: str = "model") -> bool:
    """Whether a snapshot of ``hub_id`` is in the local Hugging Face cache."""
    from huggingface_hub.constants import HF_HUB_CACHE
    from huggingface_hub.file_download import repo_folder_name

    snapshots = (Path(HF_HUB_CACHE) / repo_folder_name(repo_id=hub_id, repo_type=repo_type)
                 / "snapshots")
    return snapshots.is_dir() and any(snapshots.iterdir())


def check_models_cached(cfg) -> None:
    """In offline mode, before the protocol's imports: every model the config names by hub id
    (``source: hub`` under any top-level key: model, teacher, student, judge, ...) is a local
    folder or in the local cache, else one line names the first that is not."""
    if not hub_is_offline():
        return
    for key, node in cfg.items():
        if not hasattr(node, "get") or node.get("source") != "hub" or not node.get("hub_id"):
            continue
        hub_id = str(node.hub_id)
        if not Path(hub_id).exists() and not is_cached(hub_id):
            raise not_cached("model", hub_id, why_unreachable(),
                             f"set {key}.hub_id to a local folder")
