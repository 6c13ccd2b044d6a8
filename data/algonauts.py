"""The Algonauts 2023 challenge layout of the Natural Scenes Dataset (Allen et al. 2022;
Gifford et al. 2023) on a user's machine:

- ``<root>/subjXX/training_split/training_fmri/{lh,rh}_training_fmri.npy``: (images,
  vertices) responses, z-scored per scanning session and averaged over repeats;
- ``<root>/subjXX/training_split/training_images/train-0001_nsd-00013.png``: the 1-based
  number is the fMRI row, the second the NSD image id;
- ``<root>/subjXX/roi_masks/{lh,rh}.<roi_class>_challenge_space.npy``: per-vertex ROI labels
  (0 = outside), e.g. ``prf-visualrois``, ``floc-faces``, ``streams``.

Images are resized to ``image_size`` (bilinear) as (N, 3, S, S) floats in [0, 1].
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from common.errors import UserError

IMAGE_NAME = re.compile(r"^train-(?P<row>\d+)_nsd-(?P<nsd>\d+)\.png$")
HEMISPHERES = ("lh", "rh")


@dataclass
class AlgonautsSubject:
    images: np.ndarray  # (N, 3, S, S) in [0, 1]
    fmri: np.ndarray  # (N, V): the chosen vertices of both hemispheres
    nsd_ids: np.ndarray  # (N,)
    hemisphere: np.ndarray  # (V,) "lh" | "rh"


def _require(path: Path, what: str) -> Path:
    if not path.exists():
        raise UserError(f"Algonauts 2023 layout: {what} not found at {path}")
    return path


def load_algonauts(root: str, subject: int, roi_class: str | None = None,
                   image_size: int = 64, limit: int | None = None) -> AlgonautsSubject:
    """One subject's training split (the challenge's test responses are not public)."""
    from PIL import Image

    folder = _require(Path(root) / f"subj{subject:02d}", f"subject {subject}")
    split = folder / "training_split"
    images_dir = _require(split / "training_images", "the training images")
    named = []
    for path in images_dir.iterdir():
        found = IMAGE_NAME.match(path.name)
        if found:
            named.append((int(found["row"]), int(found["nsd"]), path))
    if not named:
        raise UserError(f"no train-XXXX_nsd-XXXXX.png images in {images_dir}")
    named.sort()
    rows = [row for row, _, _ in named]
    if rows != list(range(1, len(rows) + 1)):
        raise UserError(f"{images_dir}: image numbers must run 1..{len(rows)} without gaps")
    responses, hemisphere = [], []
    for h in HEMISPHERES:
        fmri = np.load(_require(split / "training_fmri" / f"{h}_training_fmri.npy",
                                f"{h} responses"))
        if fmri.shape[0] != len(named):
            raise UserError(f"{h}_training_fmri.npy has {fmri.shape[0]} rows for "
                            f"{len(named)} images")
        if roi_class:
            labels = np.load(_require(folder / "roi_masks" /
                                      f"{h}.{roi_class}_challenge_space.npy",
                                      f"the {h} {roi_class} ROI mask"))
            fmri = fmri[:, labels > 0]
        responses.append(fmri)
        hemisphere += [h] * fmri.shape[1]
    if sum(r.shape[1] for r in responses) == 0:
        raise UserError(f"ROI class '{roi_class}' selects no vertex of subject {subject}")
    keep = named[:limit] if limit else named
    images = np.stack([
        np.asarray(Image.open(path).convert("RGB").resize((image_size, image_size),
                                                          Image.BILINEAR), dtype=np.float32)
        for _, _, path in keep]).transpose(0, 3, 1, 2) / 255.0
    return AlgonautsSubject(images, np.concatenate(responses, 1)[:len(keep)].astype(np.float32),
                            np.array([nsd for _, nsd, _ in keep]), np.array(hemisphere))
