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
from dataclasses import dataclass, field

import lightning as L
import numpy as np
import torch
import torch.nn.functional as F

from common.errors import UserError
from common.streams import Streams
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
from methods.viptc.networks import NetSpec, ReidNet, extract
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
    streams = Streams(seed)
    with streams.torch_default("pretraining"):
        net = spec.build()
        labels = {pid: k for k, pid in enumerate(torch.unique(split.ids).tolist())}
        net.add_head(len(labels))
        module = StageModule(net, None, PrototypeBank(), Arm("pretraining"), LossOptions(),
                             [labels], lr)
        make_trainer(compute, max_epochs=1).fit(
            module, _loader([ReidTask("pretraining", split, split)], [0], epochs,
                            ids_per_batch, per_modality, streams.numpy("pretraining batches")))
    return {k: v for k, v in module.net.cpu().state_dict().items()
            if not k.startswith("heads.")}


@dataclass
class StreamCheckpoint:
    """A stream after its first stages: every weight (heads included), the prototype bank,
    the label maps, the evaluations so far and the states of the stream's torch and numpy
    generators, so that the next stage continues it bit for bit in another process."""

    weights: dict[str, torch.Tensor]
    head_sizes: list[int]
    bank: PrototypeBank
    label_maps: list[dict]
    results: list[StageResult]
    torch_generator: torch.Tensor
    batches_generator: dict


def first_stage_is_shared(arm: Arm, options: LossOptions) -> bool:
    """Whether the arm's first stage is the plain one (cross-entropy and triplet): with no
    previous model and an empty prototype bank every other loss is off, but CM-PTC on the
    batch's topology (``joint`` has one task so far, as every arm)."""
    return not (arm.cmptc and options.cmptc_topology == "batch")


def run_stream(tasks: list[ReidTask], arm: Arm, options: LossOptions, epochs: int, lr: float,
               ids_per_batch: int, per_modality: int, spec: NetSpec, seed: int,
               compute: Compute | None = None, initial: dict[str, torch.Tensor] | None = None,
               after: StreamCheckpoint | None = None) -> tuple[list[StageResult], dict]:
    """Train ``arm`` over the stream from ``initial`` backbone and neck weights (e.g.
    ``pretrain``'s; None: from scratch), or from ``after`` (``first_stage``'s checkpoint of
    the same stream, for an arm whose first stage is the same computation); the evaluation
    after every stage on the tasks seen so far, and the state an exemplar-free method keeps
    between stages."""
    net, bank, _, results, _ = _train(tasks, arm, options, epochs, lr, ids_per_batch,
                                      per_modality, spec, seed, compute, initial, after)
    return results, {"prototypes": bank.matrix, "model": net.state_dict()}


def first_stage(tasks: list[ReidTask], arm: Arm, options: LossOptions, epochs: int, lr: float,
                ids_per_batch: int, per_modality: int, spec: NetSpec, seed: int,
                compute: Compute | None = None,
                initial: dict[str, torch.Tensor] | None = None) -> StreamCheckpoint:
    """``run_stream``'s first stage alone, as the checkpoint its later stages start from."""
    net, bank, label_maps, results, generators = _train(
        tasks, arm, options, epochs, lr, ids_per_batch, per_modality, spec, seed, compute,
        initial, None, stages=1)
    return StreamCheckpoint(net.state_dict(), [head.out_features for head in net.heads], bank,
                            label_maps, results, *generators)


def _train(tasks, arm, options, epochs, lr, ids_per_batch, per_modality, spec, seed, compute,
           initial, after, stages=None):
    streams = Streams(seed)
    with streams.torch_default("training"):
        rng = streams.numpy("batches")
        net = spec.build()
        if after is None:
            bank, label_maps, results = PrototypeBank(), [], []
            if initial is not None:
                net.load_state_dict(initial)
        else:  # a copy: a checkpoint shared by the arms of one process stays as it was
            after = copy.deepcopy(after)
            for size in after.head_sizes:
                net.add_head(size)
            net.load_state_dict(after.weights)
            bank, label_maps, results = after.bank, after.label_maps, after.results
            torch.set_rng_state(after.torch_generator)
            rng.bit_generator.state = after.batches_generator
        for stage in range(len(results), len(tasks) if stages is None else stages):
            task = tasks[stage]
            old = copy.deepcopy(net) if stage else None  # the previous stage's model, frozen
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
            results.append(evaluate(net, tasks[:stage + 1]))
        return net, bank, label_maps, results, (torch.get_rng_state(), rng.bit_generator.state)
