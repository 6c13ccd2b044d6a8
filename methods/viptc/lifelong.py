"""Exemplar-free lifelong training over a stream of VI-ReID tasks and its evaluation.

One shared backbone (a small CNN, or a pretrained vision model by name, with a BN-neck) and
one identity head per task, starting from pretrained weights (``pretrain``) or from scratch.
Each stage trains on the current task only (``joint``: on every task so far, the upper bound
that keeps all data) with cross-entropy + batch-hard triplet and the arm's extra losses
against the frozen model of the previous stage. After a stage the class means of the task's
training identities per modality are appended to the prototype bank (no images are kept).
"""

from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass, field

import lightning as L
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from common.errors import UserError
from data.reid_stream import IR, RGB, ReidSplit, ReidTask
from methods.viptc.losses import (
    ANCHORS,
    DIVERGENCES,
    FORMS,
    batch_hard_triplet,
    cka_kd_loss,
    class_means,
    cmptc_loss,
    feature_kd_loss,
    sptc_loss,
    topology,
)
from methods.viptc.retrieval import evaluate_retrieval
from models.trainer import Compute, make_trainer


@dataclass
class Arm:
    name: str
    sptc: float = 0.0
    cmptc: float = 0.0
    feature_kd: float = 0.0
    cka_kd: float = 0.0
    joint: bool = False


@dataclass
class LossOptions:
    tau: float = 0.1
    divergence: str = "kl"
    anchor: str = "none"
    form: str = "frobenius"
    margin: float = 0.3
    cmptc_topology: str = "batch"  # batch | history (see losses.cmptc_loss)

    def __post_init__(self) -> None:
        choices = {"divergence": DIVERGENCES, "anchor": ANCHORS, "form": FORMS,
                   "cmptc_topology": ("batch", "history")}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise UserError(f"unknown method.{name} '{getattr(self, name)}' "
                                f"({', '.join(allowed)})")


def small_cnn(width: int = 32, dim: int = 128) -> nn.Sequential:
    """Four conv-BN-ReLU blocks and global average pooling: (n, 3, H, W) -> (n, dim)."""

    def block(cin, cout, stride):
        return [nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout),
                nn.ReLU(inplace=True)]

    return nn.Sequential(*block(3, width, 1), *block(width, 2 * width, 2),
                         *block(2 * width, 2 * width, 1), *block(2 * width, dim, 2),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten())


class HubBackbone(nn.Module):
    """A pretrained vision model by hub id or local folder, loaded with transformers'
    AutoModel (e.g. google/vit-base-patch16-224-in21k, the ViT family CKDA builds on, or
    microsoft/resnet-50, AGW's backbone): the class token of a transformer's last hidden
    state, or the global average of a CNN's last feature map. A transformer that can
    interpolate its position embeddings takes the ReID image size (e.g. 256 x 128) as is."""

    def __init__(self, hub_id: str):
        super().__init__()
        from transformers import AutoModel

        from models.lm.loader import load_by_name

        self.model = load_by_name(
            hub_id, lambda local: AutoModel.from_pretrained(hub_id, local_files_only=local),
            kind="backbone", setting="method.backbone").train()  # from_pretrained: eval mode
        config = self.model.config
        self.dim = getattr(config, "hidden_size", None) or config.hidden_sizes[-1]
        self.interpolate = ("interpolate_pos_encoding"
                            in inspect.signature(self.model.forward).parameters)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        extra = {"interpolate_pos_encoding": True} if self.interpolate else {}
        hidden = self.model(pixel_values=images, **extra).last_hidden_state
        return hidden.mean((2, 3)) if hidden.dim() == 4 else hidden[:, 0]


class ReidNet(nn.Module):
    """A backbone, a BN-neck (the retrieval features) and one identity head per task."""

    def __init__(self, backbone: nn.Module, dim: int):
        super().__init__()
        self.backbone = backbone
        self.neck = nn.BatchNorm1d(dim)
        self.heads = nn.ModuleList()
        self.dim = dim

    def add_head(self, classes: int):
        self.heads.append(nn.Linear(self.dim, classes, bias=False))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Retrieval features (after the BN-neck)."""
        return self.neck(self.backbone(x))


@dataclass(frozen=True)
class NetSpec:
    """``small_cnn`` (``width`` channels, ``dim`` features) or a pretrained vision model by
    hub id or local folder (its own feature size)."""

    backbone: str = "small_cnn"
    width: int = 32
    dim: int = 128

    def build(self) -> ReidNet:
        if self.backbone == "small_cnn":
            return ReidNet(small_cnn(self.width, self.dim), self.dim)
        hub = HubBackbone(self.backbone)
        return ReidNet(hub, hub.dim)


@dataclass
class PrototypeBank:
    """Class means per modality of the training identities of finished stages."""

    prototypes: list[torch.Tensor] = field(default_factory=list)

    def add(self, net: ReidNet, split: ReidSplit, batch: int = 256):
        feats = extract(net, split.images, batch)
        for mod in (RGB, IR):
            mask = split.modality == mod
            self.prototypes.append(class_means(feats[mask], split.ids[mask])[1])

    @property
    def matrix(self) -> torch.Tensor | None:
        return torch.cat(self.prototypes) if self.prototypes else None

    @property
    def per_modality(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(RGB prototypes, IR prototypes) of all finished stages, the same classes in the
        same order."""
        if not self.prototypes:
            return None
        return torch.cat(self.prototypes[0::2]), torch.cat(self.prototypes[1::2])


def extract(net: ReidNet, images: torch.Tensor, batch: int = 256) -> torch.Tensor:
    was_training = net.training
    net.eval()
    device = next(net.parameters()).device
    with torch.no_grad():
        out = torch.cat([net(images[i:i + batch].to(device)).cpu()
                         for i in range(0, len(images), batch)])
    net.train(was_training)
    return out


def pk_batches(split: ReidSplit, ids_per_batch: int, per_modality: int,
               rng: np.random.Generator) -> list[np.ndarray]:
    """Batches of P identities x K images per modality, each identity once per epoch."""
    ids = split.ids.numpy()
    modality = split.modality.numpy()
    unique = rng.permutation(np.unique(ids))
    batches = []
    for start in range(0, len(unique) - ids_per_batch + 1, ids_per_batch):
        chosen = []
        for pid in unique[start:start + ids_per_batch]:
            for mod in (RGB, IR):
                pool = np.flatnonzero((ids == pid) & (modality == mod))
                chosen.extend(rng.choice(pool, per_modality, replace=pool.size < per_modality))
        batches.append(np.array(chosen))
    return batches


class StageModule(L.LightningModule):
    def __init__(self, net: ReidNet, old: ReidNet | None, bank: PrototypeBank, arm: Arm,
                 options: LossOptions, label_maps: list[dict], lr: float):
        super().__init__()
        self.net, self.arm, self.options, self.lr = net, arm, options, lr
        self.frozen = [old] if old is not None else []  # a list: not a trained submodule
        self.label_maps = label_maps  # per head: global id -> class index
        # buffers: moved to the training device once, with the module
        self.register_buffer("bank", bank.matrix)
        history = bank.per_modality if options.cmptc_topology == "history" else None
        self.register_buffer("history_rgb", None if history is None else history[0])
        self.register_buffer("history_ir", None if history is None else history[1])
        for frozen in self.frozen:
            frozen.eval()
            for p in frozen.parameters():
                p.requires_grad_(False)

    def training_step(self, batch, _):
        images, ids, modality, head = batch
        feats = self.net(images)
        loss = batch_hard_triplet(feats, ids, self.options.margin)
        for k in torch.unique(head).tolist():
            rows = head == k
            targets = torch.tensor([self.label_maps[k][int(i)] for i in ids[rows]],
                                   device=feats.device)
            loss = loss + F.cross_entropy(self.net.heads[k](feats[rows]), targets)
        arm, opt = self.arm, self.options
        if self.frozen and (arm.sptc or arm.feature_kd or arm.cka_kd):
            with torch.no_grad():
                old_feats = self.frozen[0].to(images.device)(images)
            if arm.sptc and self.bank is not None:
                loss = loss + arm.sptc * sptc_loss(feats, old_feats, self.bank, opt.tau,
                                                   opt.divergence)
            if arm.feature_kd:
                loss = loss + arm.feature_kd * feature_kd_loss(feats, old_feats)
            if arm.cka_kd:
                loss = loss + arm.cka_kd * cka_kd_loss(feats, old_feats)
        history = None if self.history_rgb is None else (self.history_rgb, self.history_ir)
        if arm.cmptc and (opt.cmptc_topology == "batch" or history is not None):
            loss = loss + arm.cmptc * cmptc_loss(feats, ids, modality, opt.anchor, opt.form,
                                                 opt.tau, history)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.net.parameters(), lr=self.lr, weight_decay=5e-4)


def _loader(tasks: list[ReidTask], heads: list[int], epochs: int, ids_per_batch: int,
            per_modality: int, rng: np.random.Generator):
    images = torch.cat([t.train.images for t in tasks])
    ids = torch.cat([t.train.ids for t in tasks])
    modality = torch.cat([t.train.modality for t in tasks])
    head = torch.cat([torch.full((len(t.train.ids),), h) for t, h in zip(tasks, heads,
                                                                        strict=True)])
    batches = []
    for _ in range(epochs):
        offset = 0
        for t in tasks:
            batches += [b + offset for b in pk_batches(t.train, ids_per_batch, per_modality,
                                                       rng)]
            offset += len(t.train.ids)
    order = rng.permutation(len(batches))
    data = _IndexedBatches([batches[i] for i in order], images, ids, modality, head)
    return torch.utils.data.DataLoader(data, batch_size=None)


class _IndexedBatches(torch.utils.data.Dataset):
    """Batches gathered when asked for (index arrays only are kept, not copies of images)."""

    def __init__(self, batches: list[np.ndarray], *tensors: torch.Tensor):
        self.batches, self.tensors = batches, tensors

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, k: int):
        return tuple(t[self.batches[k]] for t in self.tensors)


@dataclass
class StageResult:
    cross: list[float]  # cross-modal mAP (mean of V->I and I->V) per task seen so far
    rgb: list[float]  # RGB->RGB mAP per task
    ir: list[float]  # IR->IR mAP per task
    rank1: list[float]  # cross-modal rank-1 per task
    topology_gap: list[float]  # ||A^V - A^I||_F / C on test prototypes per task


def evaluate(net: ReidNet, tasks: list[ReidTask]) -> StageResult:
    out = StageResult([], [], [], [], [])
    for task in tasks:
        s = task.test
        feats = F.normalize(extract(net, s.images), dim=1)
        ids, mod, cams = s.ids.numpy(), s.modality.numpy(), s.cams.numpy()
        res = {}
        for name, qm, gm in (("v2i", RGB, IR), ("i2v", IR, RGB), ("rgb", RGB, RGB),
                             ("ir", IR, IR)):
            q, g = mod == qm, mod == gm
            dist = 1 - (feats[q] @ feats[g].T).numpy()
            res[name] = evaluate_retrieval(dist, ids[q], ids[g], cams[q], cams[g])
        out.cross.append(0.5 * (res["v2i"]["mAP"] + res["i2v"]["mAP"]))
        out.rank1.append(0.5 * (res["v2i"]["rank1"] + res["i2v"]["rank1"]))
        out.rgb.append(res["rgb"]["mAP"])
        out.ir.append(res["ir"]["mAP"])
        rgb_c, rgb_p = class_means(feats[torch.tensor(mod == RGB)], s.ids[mod == RGB])
        _, ir_p = class_means(feats[torch.tensor(mod == IR)], s.ids[mod == IR])
        gap = (topology(rgb_p) - topology(ir_p)).norm() / rgb_c.numel()
        out.topology_gap.append(float(gap))
    return out


def pretrain(split: ReidSplit, epochs: int, lr: float, ids_per_batch: int, per_modality: int,
             spec: NetSpec, seed: int, compute: Compute | None = None) -> dict[str, torch.Tensor]:
    """The backbone and neck weights after cross-entropy + triplet training on a
    pretraining set (its identity head is dropped): every arm's common start on a stream,
    as a pretrained backbone is on real data."""
    torch.manual_seed(seed)
    net = spec.build()
    labels = {pid: k for k, pid in enumerate(torch.unique(split.ids).tolist())}
    net.add_head(len(labels))
    module = StageModule(net, None, PrototypeBank(), Arm("pretraining"), LossOptions(),
                         [labels], lr)
    make_trainer(compute, max_epochs=1).fit(
        module, _loader([ReidTask("pretraining", split, split)], [0], epochs, ids_per_batch,
                        per_modality, np.random.default_rng(seed)))
    return {k: v for k, v in module.net.cpu().state_dict().items()
            if not k.startswith("heads.")}


def run_stream(tasks: list[ReidTask], arm: Arm, options: LossOptions, epochs: int, lr: float,
               ids_per_batch: int, per_modality: int, spec: NetSpec, seed: int,
               compute: Compute | None = None, initial: dict[str, torch.Tensor] | None = None
               ) -> tuple[list[StageResult], dict]:
    """Train ``arm`` over the stream from ``initial`` backbone and neck weights (e.g.
    ``pretrain``'s; None: from scratch); the evaluation after every stage on the tasks seen
    so far, and the state an exemplar-free method keeps between stages."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    net, bank, old = spec.build(), PrototypeBank(), None
    if initial is not None:
        net.load_state_dict(initial)
    label_maps, results = [], []
    for stage, task in enumerate(tasks):
        uniq = torch.unique(task.train.ids).tolist()
        label_maps.append({pid: k for k, pid in enumerate(uniq)})
        net.add_head(len(uniq))
        seen = tasks[:stage + 1] if arm.joint else [task]
        heads = list(range(stage + 1)) if arm.joint else [stage]
        module = StageModule(net, old, bank, arm, options, label_maps, lr)
        make_trainer(compute, max_epochs=1).fit(
            module, _loader(seen, heads, epochs, ids_per_batch, per_modality, rng))
        net = module.net.cpu()
        bank.add(net, task.train)
        old = copy.deepcopy(net)
        results.append(evaluate(net, tasks[:stage + 1]))
    state = {"prototypes": bank.matrix, "model": net.state_dict()}
    return results, state


def forgetting(matrix: list[list[float]]) -> float:
    """Mean over all but the last task of (best mAP before the last stage - final mAP)."""
    final = matrix[-1]
    drops = [max(matrix[s][t] for s in range(t, len(matrix) - 1)) - final[t]
             for t in range(len(matrix) - 1)]
    return float(np.mean(drops)) if drops else 0.0


def image_shaped_tensors(state, height: int, width: int) -> int:
    """Tensors in a saved state whose last two dimensions are an image's (H, W)."""
    found = 0
    for value in state.values():
        tensors = value.values() if isinstance(value, dict) else [value]
        for t in tensors:
            if isinstance(t, torch.Tensor) and t.dim() >= 2 and tuple(t.shape[-2:]) == (
                    height, width):
                found += 1
    return found


def paired_drops(rows: list[dict], key: str) -> dict[str, float]:
    """Each arm's drop in ``key`` below finetune's on the same stream (seed), averaged over
    the streams, with its standard error (the streams differ far more than the arms)."""
    finetune = {r["seed"]: r[key] for r in rows if r["arm"] == "finetune"}
    out = {}
    for arm in dict.fromkeys(r["arm"] for r in rows if r["arm"] != "finetune"):
        drops = np.array([finetune[r["seed"]] - r[key] for r in rows
                          if r["arm"] == arm and r["seed"] in finetune])
        if len(drops):
            out[f"{key}_drop_vs_finetune_{arm}"] = float(drops.mean())
            if len(drops) > 1:
                out[f"{key}_drop_vs_finetune_se_{arm}"] = float(
                    drops.std(ddof=1) / np.sqrt(len(drops)))
    return out
