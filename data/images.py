"""Image classification data as flat float vectors in [0, 1]: scikit-learn's bundled 8x8
digits (offline), MNIST or CIFAR-10 by name through `datasets.load_dataset`; and a
BadNets-style patch trigger."""

from __future__ import annotations

import numpy as np

from common.errors import UserError

HUB_IDS = {"mnist": ("ylecun/mnist", "image", "label"),
           "cifar10": ("uoft-cs/cifar10", "img", "label")}


def load_images(name: str, max_train: int | None, max_test: int | None, seed: int
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, tuple[int, ...]]:
    """(x_train, y_train, x_test, y_test, image shape), pixels scaled to [0, 1]."""
    rng = np.random.default_rng(seed)
    if name == "digits":
        from sklearn.datasets import load_digits

        data = load_digits()
        x, y = data.data / 16.0, data.target
        order = rng.permutation(len(y))
        cut = int(0.75 * len(y))
        train, test = order[:cut], order[cut:]
        x_tr, y_tr, x_te, y_te, shape = x[train], y[train], x[test], y[test], (8, 8)
    elif name in HUB_IDS:
        from data.hub import load_hub_dataset

        hub_id, image_key, label_key = HUB_IDS[name]
        ds = load_hub_dataset(hub_id, instead="use dataset=digits (bundled with scikit-learn)")

        def to_arrays(split):
            imgs = np.stack([np.asarray(im, dtype=np.float32) / 255.0 for im in split[image_key]])
            return imgs.reshape(len(imgs), -1), np.asarray(split[label_key]), imgs.shape[1:]

        x_tr, y_tr, shape = to_arrays(ds["train"])
        x_te, y_te, _ = to_arrays(ds["test"])
    else:
        raise UserError(f"unknown image dataset '{name}'; known: digits, mnist, cifar10")
    if max_train:
        keep = rng.permutation(len(y_tr))[:max_train]
        x_tr, y_tr = x_tr[keep], y_tr[keep]
    if max_test:
        keep = rng.permutation(len(y_te))[:max_test]
        x_te, y_te = x_te[keep], y_te[keep]
    return (x_tr.astype(np.float32), y_tr.astype(np.int64), x_te.astype(np.float32),
            y_te.astype(np.int64), tuple(shape))


def patch_trigger(shape: tuple[int, ...], size: int, l2_norm: float) -> np.ndarray:
    """A BadNets-style square patch in the bottom-right corner, as an additive perturbation
    of the given l2 norm (flattened like the images)."""
    trigger = np.zeros(shape, dtype=np.float32)
    trigger[-size:, -size:, ...] = 1.0
    trigger = trigger.reshape(-1)
    return trigger * (l2_norm / np.linalg.norm(trigger))
