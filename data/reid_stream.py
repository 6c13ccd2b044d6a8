"""Visible-infrared person re-identification task streams.

``synthetic_stream``: tasks with disjoint identities. An identity has a colour code (upper
and lower garment colours) and a shape/heat code (silhouette widths along the body and a
heat pattern). RGB images show the silhouette in the garment colours on a task-specific
background; IR images show only the silhouette's heat pattern (colour is invisible) with a
task-specific thermal gain. The two modalities' class-similarity structures therefore differ
by construction: RGB neighbours share colours, IR neighbours share shapes. Images vary by
horizontal shift, brightness and noise. Each task has training identities and disjoint test
identities (query and gallery images in both modalities). ``reid_pretraining``: identities of
one more domain to pretrain the backbone on before the stream.

``regdb_stream`` / ``sysu_stream`` / ``llcm_stream``: the real datasets on a user's machine,
one task each (RegDB: ``idx/{train,test}_{visible,thermal}_{trial}.txt`` with "path label"
lines; SYSU-MM01: ``cam{1..6}/{pid:04d}/*.jpg`` with ``exp/{train,test}_id.txt``; RGB
cameras 1, 2, 4, 5 and IR cameras 3, 6; LLCM: ``idx/{train,test}_{vis,nir}.txt`` with "path
label" lines, files named ``<pid>_c<cam>_s..._{vis,nir}.jpg``, the camera number shared by
the two modalities), resized in plain torch. In a stream of real datasets each task's
identities are offset by 100000 x its position, so no two datasets share a label.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from common.errors import UserError

RGB, IR = 0, 1


@dataclass
class ReidSplit:
    images: torch.Tensor  # (n, 3, H, W); IR replicated to three channels
    ids: torch.Tensor  # (n,) identity labels, global across tasks
    modality: torch.Tensor  # (n,) RGB = 0, IR = 1
    cams: torch.Tensor  # (n,) camera ids


@dataclass
class ReidTask:
    name: str
    train: ReidSplit
    test: ReidSplit


def _render(shape_code, heat_code, colours, background, shift, brightness, noise, rng,
            height, width, infrared: bool, gain: float, mixing: np.ndarray,
            gamma: float) -> np.ndarray:
    rows = np.linspace(0, 1, height)
    half_width = np.interp(rows, np.linspace(0, 1, shape_code.size), shape_code) * width / 2
    cols = np.arange(width) - (width - 1) / 2 - shift
    body = np.abs(cols)[None, :] <= half_width[:, None]
    if infrared:
        heat = np.interp(rows, np.linspace(0, 1, heat_code.size), heat_code) ** gamma
        img = np.where(body, gain * heat[:, None], 0.1 * gain)[None]
        img = np.repeat(img, 3, 0)
    else:
        upper = rows[:, None] < 0.5
        seen = np.clip(colours @ mixing.T, 0, 1)  # the task's camera colour response
        colour = np.where(upper[None], seen[0][:, None, None], seen[1][:, None, None])
        img = np.where(body[None], colour, background[:, None, None])
    img = brightness * img + noise * rng.standard_normal(img.shape)
    return img.astype(np.float32)


def synthetic_stream(tasks: int, train_ids: int, test_ids: int, images_per_id: int,
                     height: int, width: int, noise: float,
                     rng: np.random.Generator) -> list[ReidTask]:
    out, next_id = [], 0
    for t in range(tasks):
        # task domains: background, a camera colour response (a channel permutation mixed
        # with a random matrix), thermal gain and gamma
        background = rng.uniform(0.0, 0.6, 3)
        mixing = 0.5 * np.eye(3)[rng.permutation(3)] + 0.5 * rng.uniform(0, 1, (3, 3))
        gain, gamma = rng.uniform(0.6, 1.4), rng.uniform(0.5, 2.0)
        splits = {}
        for split, count in (("train", train_ids), ("test", test_ids)):
            images, ids, modality, cams = [], [], [], []
            for _ in range(count):
                shape_code = rng.uniform(0.25, 0.9, 6)
                heat_code = rng.uniform(0.3, 1.0, 5)
                colours = rng.uniform(0, 1, (2, 3))
                for k in range(images_per_id):
                    for mod in (RGB, IR):
                        images.append(_render(
                            shape_code, heat_code, colours, background,
                            rng.uniform(-1.5, 1.5), rng.uniform(0.8, 1.2), noise, rng,
                            height, width, mod == IR, gain, mixing, gamma))
                        ids.append(next_id)
                        modality.append(mod)
                        cams.append(2 * mod + k % 2)  # two cameras per modality
                next_id += 1
            pixels = (np.stack(images) if images
                      else np.zeros((0, 3, height, width), dtype=np.float32))
            splits[split] = ReidSplit(torch.tensor(pixels), torch.tensor(ids, dtype=torch.long),
                                      torch.tensor(modality, dtype=torch.long),
                                      torch.tensor(cams, dtype=torch.long))
        out.append(ReidTask(f"task{t + 1}", splits["train"], splits["test"]))
    return out


# ---------------------------------------------------------------------------- real data
def _load_images(paths: list[Path], height: int, width: int) -> torch.Tensor:
    from PIL import Image

    mean = torch.tensor([0.485, 0.456, 0.406])[:, None, None]
    std = torch.tensor([0.229, 0.224, 0.225])[:, None, None]
    out = []
    for p in paths:
        img = Image.open(p).convert("RGB").resize((width, height), Image.BILINEAR)
        x = torch.tensor(np.asarray(img), dtype=torch.float32).permute(2, 0, 1) / 255
        out.append((x - mean) / std)
    return torch.stack(out)


def regdb_stream(root: str, trial: int, height: int, width: int) -> list[ReidTask]:
    base = Path(root)
    if not (base / "idx").is_dir():
        raise UserError(f"RegDB not found at {base} (expected idx/train_visible_{trial}.txt, "
                        "...; the dataset is distributed on request by its authors)")
    splits = {}
    for split in ("train", "test"):
        paths, ids, modality = [], [], []
        for mod, name in ((RGB, "visible"), (IR, "thermal")):
            for line in (base / "idx" / f"{split}_{name}_{trial}.txt").read_text().split("\n"):
                if line.strip():
                    path, label = line.split()
                    paths.append(base / path)
                    ids.append(int(label) + (10000 if split == "test" else 0))
                    modality.append(mod)
        modality_t = torch.tensor(modality)
        splits[split] = ReidSplit(_load_images(paths, height, width), torch.tensor(ids),
                                  modality_t, modality_t * 2)
    return [ReidTask("regdb", splits["train"], splits["test"])]


def sysu_stream(root: str, height: int, width: int, max_images_per_id: int) -> list[ReidTask]:
    base = Path(root)
    if not (base / "exp" / "train_id.txt").exists():
        raise UserError(f"SYSU-MM01 not found at {base} (expected exp/train_id.txt and "
                        "cam1..cam6/<pid>/*.jpg; the dataset is distributed on request)")
    camera_modality = {1: RGB, 2: RGB, 3: IR, 4: RGB, 5: RGB, 6: IR}
    splits = {}
    for split in ("train", "test"):
        text = (base / "exp" / f"{split}_id.txt").read_text()
        pids = [int(v) for v in text.replace("\n", ",").split(",") if v.strip()]
        paths, ids, modality, cams = [], [], [], []
        for pid in pids:
            for cam, mod in camera_modality.items():
                files = sorted((base / f"cam{cam}" / f"{pid:04d}").glob("*.jpg"))
                for f in files[:max_images_per_id]:
                    paths.append(f)
                    ids.append(pid)
                    modality.append(mod)
                    cams.append(cam)
        splits[split] = ReidSplit(_load_images(paths, height, width), torch.tensor(ids),
                                  torch.tensor(modality), torch.tensor(cams))
    return [ReidTask("sysu", splits["train"], splits["test"])]


LLCM_CAMERA = re.compile(r"_c(\d+)_")


def llcm_stream(root: str, height: int, width: int, max_images_per_id: int) -> list[ReidTask]:
    base = Path(root)
    if not (base / "idx" / "train_vis.txt").exists():
        raise UserError(f"LLCM not found at {base} (expected idx/train_vis.txt, "
                        "idx/train_nir.txt, ...; the dataset is distributed on request)")
    splits = {}
    for split in ("train", "test"):
        paths, ids, modality, cams = [], [], [], []
        for mod, name in ((RGB, "vis"), (IR, "nir")):
            taken: dict[int, int] = {}
            for line in (base / "idx" / f"{split}_{name}.txt").read_text().split("\n"):
                if not line.strip():
                    continue
                path, label = line.split()
                camera = LLCM_CAMERA.search(Path(path).name)
                if camera is None:
                    raise UserError(f"LLCM: no camera (_c<number>_) in the file name {path}")
                pid = int(label) + (10000 if split == "test" else 0)
                if taken.get(pid, 0) < max_images_per_id:
                    taken[pid] = taken.get(pid, 0) + 1
                    paths.append(base / path)
                    ids.append(pid)
                    modality.append(mod)
                    cams.append(int(camera.group(1)))
        splits[split] = ReidSplit(_load_images(paths, height, width), torch.tensor(ids),
                                  torch.tensor(modality), torch.tensor(cams))
    return [ReidTask("llcm", splits["train"], splits["test"])]


def _offset_ids(task: ReidTask, offset: int) -> ReidTask:
    return ReidTask(task.name, *(ReidSplit(s.images, s.ids + offset, s.modality, s.cams)
                                 for s in (task.train, task.test)))


def reid_pretraining(cfg, rng: np.random.Generator) -> ReidSplit | None:
    """The synthetic stream's pretraining set: ``pretrain_ids`` identities of one more
    domain, disjoint from the stream and never evaluated; None when there is none (real
    data starts from a pretrained backbone instead)."""
    if cfg.name != "synthetic" or not getattr(cfg, "pretrain_ids", 0):
        return None
    return synthetic_stream(1, cfg.pretrain_ids, 0, cfg.images_per_id, cfg.height, cfg.width,
                            cfg.noise, rng)[0].train


def reid_stream(cfg, rng: np.random.Generator) -> list[ReidTask]:
    """The task stream of a dataset config: ``synthetic``, or real tasks in ``order``."""
    if cfg.name == "synthetic":
        return synthetic_stream(cfg.tasks, cfg.train_ids, cfg.test_ids, cfg.images_per_id,
                                cfg.height, cfg.width, cfg.noise, rng)
    if cfg.name == "vi_reid":
        loaders = {"regdb": lambda: regdb_stream(cfg.regdb_root, cfg.trial, cfg.height,
                                                 cfg.width),
                   "sysu": lambda: sysu_stream(cfg.sysu_root, cfg.height, cfg.width,
                                               cfg.max_images_per_id),
                   "llcm": lambda: llcm_stream(cfg.llcm_root, cfg.height, cfg.width,
                                               cfg.max_images_per_id)}
        for name in cfg.order:
            if getattr(cfg, f"{name}_root") is None:
                raise UserError(f"dataset.order has {name}: add dataset.{name}_root=<folder>")
        tasks = [task for name in cfg.order for task in loaders[name]()]
        return [_offset_ids(task, 100000 * k) for k, task in enumerate(tasks)]
    raise UserError(f"unknown ReID dataset '{cfg.name}' (synthetic, vi_reid)")
