"""The raw Natural Scenes Dataset (Allen et al. 2022) on a user's machine: single-trial
betas, the experimental design and the stimuli, in the release's layout under ``root``:

- ``nsddata/experiments/nsd/nsd_expdesign.mat``: ``masterordering`` (30000 trials, 1-based
  positions in the subject's 10000 images), ``subjectim`` (8 x 10000, 1-based 73k ids),
  ``sharedix`` (the shared 1000, 1-based 73k ids);
- ``nsddata_betas/ppdata/subjXX/func1pt8mm/betas_fithrf_GLMdenoise_RR/
  betas_sessionNN.nii.gz`` (X, Y, Z, 750 trials), or ``betas_sessionNN.hdf5`` whose ``betas``
  holds the same array transposed, (750, Z, Y, X);
- ``nsddata/ppdata/subjXX/func1pt8mm/roi/<roi>.nii.gz`` (X, Y, Z; > 0 inside, e.g.
  ``nsdgeneral``);
- ``nsddata_stimuli/stimuli/nsd/nsd_stimuli.hdf5``: ``imgBrick`` (73000, 425, 425, 3) uint8.

Trial t of session s (1-based) is ``masterordering[(s - 1) * 750 + t]``. Each voxel's betas
are z-scored within each session (the usual correction for session drifts; it also removes
the int16 files' scale of 300), then grouped by image: up to three repeats per image.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from common.errors import UserError

TRIALS_PER_SESSION = 750


@dataclass
class NSDSubject:
    images: np.ndarray  # (N, 3, S, S) in [0, 1]
    repeats: np.ndarray  # (3, N, V) z-scored betas per repeat, NaN where an image has fewer
    nsd_ids: np.ndarray  # (N,) 0-based 73k ids, in order of first presentation
    shared: np.ndarray  # (N,) bool: one of the shared 1000 images (the usual test set)

    @property
    def responses(self) -> np.ndarray:
        """(N, V) the mean over each image's repeats."""
        return np.nanmean(self.repeats, axis=0)


def _require(path: Path, what: str) -> Path:
    if not path.exists():
        raise UserError(f"NSD layout: {what} not found at {path}")
    return path


def _session_betas(folder: Path, session: int, mask: np.ndarray) -> np.ndarray:
    """(750, V) betas of the masked voxels, z-scored per voxel over the session's trials."""
    nifti = folder / f"betas_session{session:02d}.nii.gz"
    if nifti.exists():
        import nibabel

        betas = np.asarray(nibabel.load(str(nifti)).dataobj)[mask].T  # (750, V)
    else:
        import h5py

        with h5py.File(_require(folder / f"betas_session{session:02d}.hdf5",
                                f"session {session} betas (.nii.gz or .hdf5)"), "r") as f:
            betas = f["betas"][:].transpose(0, 3, 2, 1)[:, mask]  # as (750, X, Y, Z)
    betas = betas.astype(np.float32)
    if betas.shape[0] != TRIALS_PER_SESSION:
        raise UserError(f"session {session} betas hold {betas.shape[0]} trials, expected "
                        f"{TRIALS_PER_SESSION}")
    return (betas - betas.mean(0)) / (betas.std(0) + 1e-6)


def load_nsd(root: str, subject: int, sessions: int, roi: str, image_size: int = 64,
             limit: int | None = None, progress=iter) -> NSDSubject:
    """One subject's first ``sessions`` sessions: stimuli, repeats and shared-1000 flags."""
    import nibabel
    from scipy.io import loadmat

    base = Path(root)
    design = loadmat(str(_require(base / "nsddata/experiments/nsd/nsd_expdesign.mat",
                                  "the experimental design")))
    order = np.asarray(design["masterordering"]).ravel().astype(int) - 1
    if sessions * TRIALS_PER_SESSION > len(order):
        raise UserError(f"{sessions} sessions ask for {sessions * TRIALS_PER_SESSION} trials; "
                        f"the design lists {len(order)}")
    ids = np.asarray(design["subjectim"])[subject - 1, order[:sessions * TRIALS_PER_SESSION]]
    ids = ids.astype(int) - 1  # 0-based 73k id of every trial
    shared_ids = set((np.asarray(design["sharedix"]).ravel().astype(int) - 1).tolist())
    subj = f"subj{subject:02d}"
    roi_path = _require(base / "nsddata/ppdata" / subj / "func1pt8mm/roi" / f"{roi}.nii.gz",
                        f"the {roi} ROI of {subj}")
    mask = np.asarray(nibabel.load(str(roi_path)).dataobj) > 0
    if not mask.any():
        raise UserError(f"ROI {roi} of {subj} selects no voxel")
    folder = _require(base / "nsddata_betas/ppdata" / subj /
                      "func1pt8mm/betas_fithrf_GLMdenoise_RR", f"the betas of {subj}")
    betas = np.concatenate([_session_betas(folder, s, mask)
                            for s in progress(range(1, sessions + 1))])
    unique, first = np.unique(ids, return_index=True)
    images_ids = unique[np.argsort(first)][:limit]
    slot = {int(i): n for n, i in enumerate(images_ids)}
    repeats = np.full((3, len(images_ids), betas.shape[1]), np.nan, dtype=np.float32)
    seen = np.zeros(len(images_ids), dtype=int)
    for trial, image in enumerate(ids):
        n = slot.get(int(image))
        if n is not None and seen[n] < 3:
            repeats[seen[n], n] = betas[trial]
            seen[n] += 1
    return NSDSubject(_stimuli(base, images_ids, image_size), repeats, images_ids,
                      np.array([int(i) in shared_ids for i in images_ids]))


def _stimuli(base: Path, ids: np.ndarray, image_size: int, chunk: int = 256) -> np.ndarray:
    """(N, 3, S, S) in [0, 1]: the 425 x 425 stimuli of ``ids``, resized (antialiased
    bilinear), read in chunks of increasing ids as h5py requires."""
    import h5py
    import torch

    out = np.empty((len(ids), 3, image_size, image_size), dtype=np.float32)
    by_id = np.argsort(ids)
    with h5py.File(_require(base / "nsddata_stimuli/stimuli/nsd/nsd_stimuli.hdf5",
                            "the stimuli"), "r") as f:
        for start in range(0, len(ids), chunk):
            rows = by_id[start:start + chunk]
            pixels = torch.as_tensor(f["imgBrick"][ids[rows]]).permute(0, 3, 1, 2)
            out[rows] = torch.nn.functional.interpolate(
                pixels.float() / 255.0, size=(image_size, image_size), mode="bilinear",
                antialias=True).clamp(0, 1).numpy()
    return out
