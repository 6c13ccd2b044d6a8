"""Tabular datasets for model-explanation games: scikit-learn's bundled sets (offline),
OpenML by name or a CSV file on a user's machine."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from common.errors import UserError
from common.hub import reachable

BUNDLED = ("diabetes", "breast_cancer", "wine")
OPENML = "https://www.openml.org"


def load_tabular(name: str, target: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(X, y) for ``diabetes``/``breast_cancer``/``wine`` (bundled), ``openml:<name>``, or a
    CSV path (numeric columns; ``target`` names the label column, default the last)."""
    if name in BUNDLED:
        from sklearn import datasets

        loader = {"diabetes": datasets.load_diabetes,
                  "breast_cancer": datasets.load_breast_cancer,
                  "wine": datasets.load_wine}[name]
        data = loader()
        return np.asarray(data.data, dtype=float), np.asarray(data.target, dtype=float)
    if name.startswith("openml:"):
        from sklearn.datasets import fetch_openml

        if not reachable(OPENML):  # offline: one line at once, not sklearn's retries
            raise UserError(f"could not load {name}: {OPENML} is unreachable; this needs "
                            "network access, or pass a CSV path")
        try:
            frame = fetch_openml(name.split(":", 1)[1], as_frame=True, parser="auto")
        except Exception as err:  # noqa: BLE001 - network or name errors
            raise UserError(f"could not load {name} from OpenML ({err}); this needs network "
                            "access, or pass a CSV path") from None
        X = frame.data.select_dtypes("number").to_numpy(dtype=float)
        y = np.asarray(frame.target.cat.codes if hasattr(frame.target, "cat")
                       else frame.target, dtype=float)
        return X, y
    path = Path(name)
    if path.suffix == ".csv":
        if not path.is_file():
            raise UserError(f"dataset file {name} does not exist")
        import pandas as pd

        frame = pd.read_csv(path).select_dtypes("number").dropna()
        label = target or frame.columns[-1]
        return frame.drop(columns=[label]).to_numpy(float), frame[label].to_numpy(float)
    raise UserError(f"unknown tabular dataset '{name}'; use one of {', '.join(BUNDLED)}, "
                    "openml:<name> or a .csv path")
