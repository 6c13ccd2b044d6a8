"""Binary classification tasks for sufficient explanations, standardized, with each
feature's training range as its domain.

- ``planted``: Gaussian features whose label depends on products of feature pairs (XOR-like,
  invisible to an additive model) plus a weak linear part (written for this project);
- ``digits_3_8`` (or any ``digits_a_b``): scikit-learn's bundled 8x8 digits, two classes,
  constant pixels dropped;
- ``breast_cancer``, ``openml:<name>`` or a CSV path through ``data.tabular.load_tabular``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from common.errors import UserError
from data.tabular import load_tabular


@dataclass
class BinaryTask:
    name: str  # the source as a metric-key suffix (planted, breast_cancer, openml_adult)
    x_train: np.ndarray
    y_train: np.ndarray  # 0/1
    x_test: np.ndarray
    y_test: np.ndarray
    domain_lo: np.ndarray  # per feature, standardized units
    domain_hi: np.ndarray


def planted_interactions(samples: int, features: int, pairs: int, noise: float,
                         rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """x ~ N(0, I); logit = 2 sum_k s_k x_{2k} x_{2k+1} + 0.5 x_{2 pairs} + noise, signs
    s_k alternating: the products carry the label, so a NAM stays near chance."""
    if features < 2 * pairs + 1:
        raise UserError(f"planted interactions need features >= 2 * pairs + 1 = {2 * pairs + 1}")
    x = rng.standard_normal((samples, features))
    logit = sum((-1) ** k * 2.0 * x[:, 2 * k] * x[:, 2 * k + 1] for k in range(pairs))
    logit = logit + 0.5 * x[:, 2 * pairs] + noise * rng.standard_normal(samples)
    return x, (logit > 0).astype(float)


def _digits(name: str) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    try:
        a, b = (int(d) for d in name.split("_")[1:3])
    except ValueError:
        raise UserError(f"digits datasets are named digits_<a>_<b>, got '{name}'") from None
    data = load_digits()
    keep = np.isin(data.target, [a, b])
    return data.data[keep].astype(float), (data.target[keep] == b).astype(float)


def binary_task(cfg, rng: np.random.Generator) -> BinaryTask:
    """The configured task (``cfg.source``), split into train/test and standardized."""
    source = cfg.source
    if source == "planted":
        x, y = planted_interactions(cfg.samples, cfg.features, cfg.pairs, cfg.noise, rng)
    elif source.startswith("digits_"):
        x, y = _digits(source)
    else:
        x, y = load_tabular(source)
    classes = np.unique(y)
    if len(classes) != 2:
        raise UserError(f"dataset {source} has {len(classes)} classes; sufficient "
                        "explanations here are for binary tasks")
    y = (y == classes[1]).astype(float)
    x = x[:, x.std(0) > 0]  # constant columns carry nothing
    order = rng.permutation(len(x))
    n_test = int(round(cfg.test_fraction * len(x)))
    test, train = order[:n_test], order[n_test:]
    mean, std = x[train].mean(0), x[train].std(0) + 1e-12
    z = (x - mean) / std
    key = re.sub(r"[^0-9a-zA-Z]+", "_", Path(source).stem if source.endswith(".csv")
                 else source).strip("_")
    return BinaryTask(key, z[train], y[train], z[test], y[test], z[train].min(0),
                      z[train].max(0))


def select_edges(x: np.ndarray, y: np.ndarray, count: int, max_component: int
                 ) -> list[tuple[int, int]]:
    """The ``count`` pairs whose product correlates most with the label, taken greedily so
    that no connected component of the graph exceeds ``max_component`` features."""
    n = x.shape[1]
    centred = y - y.mean()
    scores = []
    for i in range(n):
        for j in range(i + 1, n):
            product = x[:, i] * x[:, j]
            sd = product.std()
            scores.append((abs(float(((product - product.mean()) * centred).mean())) / (sd + 1e-12),
                           i, j))
    component = list(range(n))
    members = {i: {i} for i in range(n)}
    edges = []
    for _, i, j in sorted(scores, reverse=True):
        if len(edges) == count:
            break
        a, b = component[i], component[j]
        if a != b and len(members[a]) + len(members[b]) > max_component:
            continue
        edges.append((i, j))
        if a != b:
            for k in members[b]:
                component[k] = a
            members[a] |= members.pop(b)
    return edges
