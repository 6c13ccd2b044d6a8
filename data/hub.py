"""Datasets by hub id or local folder through ``datasets.load_dataset``, failing fast offline:
the local cache first, then, only when the hub can be asked (common/hub.py), a download."""

from __future__ import annotations

import contextlib
from pathlib import Path

from common.errors import UserError
from common.hub import not_cached, why_unreachable


@contextlib.contextmanager
def _cache_only():
    import datasets.config

    saved = datasets.config.HF_HUB_OFFLINE, datasets.config.HF_DATASETS_OFFLINE
    datasets.config.HF_HUB_OFFLINE = datasets.config.HF_DATASETS_OFFLINE = True
    try:
        yield
    finally:
        datasets.config.HF_HUB_OFFLINE, datasets.config.HF_DATASETS_OFFLINE = saved


def load_hub_dataset(hub_id: str, *args,
                     instead: str = "set dataset.hub_id to a local folder", **kwargs):
    """``load_dataset(hub_id, *args, **kwargs)`` from a local folder, the local cache or the
    hub; one ``UserError`` line saying what to download (or what to do ``instead``) when the
    name is not cached and the hub cannot be asked."""
    from datasets import load_dataset

    if Path(hub_id).exists():
        try:
            return load_dataset(hub_id, *args, **kwargs)
        except Exception as err:  # noqa: BLE001 - any reading failure is the folder's
            raise UserError(f"cannot read a dataset from folder {hub_id}: "
                            f"{type(err).__name__}: {err}") from None
    try:
        with _cache_only():
            return load_dataset(hub_id, *args, **kwargs)
    except Exception:  # noqa: BLE001 - not cached (or cached incompletely)
        pass
    why = why_unreachable()
    if why is not None:
        raise not_cached("dataset", hub_id, why, instead, " --repo-type dataset")
    try:
        return load_dataset(hub_id, *args, **kwargs)
    except Exception as err:  # noqa: BLE001 - the hub's answer, in one line
        raise UserError(f"could not load dataset '{hub_id}' from the hub: "
                        f"{type(err).__name__}: {err}") from None
