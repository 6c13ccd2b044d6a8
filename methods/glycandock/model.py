"""A small docking model that predicts a glycan's rigid pose in a pocket and its glycosidic
torsions, trained with Lightning, with and without the two finetuning techniques.

Pose: the model scores pocket residues for the stacking aromatic and, given it, for the
hydrogen-bond anchor; the two define a local frame (origin at the aromatic ring's centre,
z along its face normal turned toward the anchor, x toward the anchor) in which an MLP
predicts the reducing-end ring's centre and orientation (6D rotation). Torsions: two rounds
of message passing over the glycan tree (plus, with the ``distance`` feature group, an
attention over all residues biased by tree distance) and a per-linkage head giving
(cos, sin) of phi and psi. The glycan's atoms are then built from internal coordinates
(``data.glycans.GlycanBuilder``), so every loss is on coordinates.

Loss: mean squared atom error (a structure predictor's coordinate loss; no torsion labels)
+ cross-entropy of the two residue pointers (labels read off the reference poses) +
``lambda_energy`` x the glycan energy loss (technique 2): the mean CHI energy of phi and psi
measured from the predicted coordinates with the torsion formula. Gradients are clipped at
norm 1 (the CHI walls are steep).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import lightning as L
import numpy as np
import torch
from torch import nn

from common.streams import Streams
from data.glycan_complexes import AMINO_ACIDS, ANCHORS, AROMATIC, Complex
from data.glycans import GlycanBuilder, chi_energy
from methods.glycandock.features import (
    binding_labels,
    glycan_features,
    pocket_inputs,
    tree_distances,
)
from models.trainer import Compute, make_trainer


@dataclass
class Technique:
    topology: tuple[str, ...] = ()  # topological feature groups; () = base inputs
    lambda_energy: float = 0.0


@dataclass
class TopologyBatch:
    """Complexes of one glycan topology, padded to the largest pocket."""

    builder: GlycanBuilder
    glycan_x: torch.Tensor  # (R, F)
    adjacency: torch.Tensor  # (R, R) row-normalised tree adjacency
    distances: torch.Tensor  # (R, R) tree distances
    kinds: list[tuple[str, str]]
    pocket_x: torch.Tensor  # (B, M, 22)
    centres: torch.Tensor  # (B, M, 3)
    normals: torch.Tensor  # (B, M, 3)
    aromatic: torch.Tensor  # (B, M) bool
    anchor: torch.Tensor  # (B, M) bool
    stack_label: torch.Tensor  # (B,)
    anchor_label: torch.Tensor  # (B,)
    ligand: torch.Tensor  # (B, N, 3) reference coordinates
    indices: list[int]  # positions of these complexes in the input list


def make_batches(complexes: list[Complex], groups: tuple[str, ...],
                 batch_size: int) -> list[TopologyBatch]:
    by_topology: dict[str, list[int]] = {}
    for k, cx in enumerate(complexes):
        by_topology.setdefault(cx.topology, []).append(k)
    batches = []
    for members in by_topology.values():
        glycan = complexes[members[0]].glycan
        builder = GlycanBuilder(glycan)
        n = len(glycan)
        adj = np.zeros((n, n), dtype=np.float32)
        for j in glycan.links:
            adj[j, glycan.parents[j]] = adj[glycan.parents[j], j] = 1
        adj /= np.maximum(adj.sum(1, keepdims=True), 1)
        shared = dict(builder=builder,
                      glycan_x=torch.tensor(glycan_features(glycan, groups)),
                      adjacency=torch.tensor(adj),
                      distances=torch.tensor(tree_distances(glycan), dtype=torch.float32),
                      kinds=glycan.chi_kinds())
        for start in range(0, len(members), batch_size):
            chunk = members[start:start + batch_size]
            batches.append(TopologyBatch(**shared, **_pocket_tensors(
                [complexes[k] for k in chunk]), indices=chunk))
    return batches


def _pocket_tensors(chunk: list[Complex]) -> dict:
    pockets = [pocket_inputs(cx) for cx in chunk]
    m = max(len(p.aa) for p in pockets)

    def pad(arrays, dim, fill=0.0):
        out = np.full((len(arrays), m) + dim, fill, dtype=np.float32)
        for k, a in enumerate(arrays):
            out[k, :len(a)] = a
        return torch.tensor(out)

    labels = [binding_labels(cx, p) for cx, p in zip(chunk, pockets, strict=True)]
    return dict(pocket_x=pad([p.features for p in pockets], (22,)),
                centres=pad([p.centres for p in pockets], (3,)),
                normals=pad([p.normals for p in pockets], (3,)),
                aromatic=pad([p.is_aromatic for p in pockets], ()).bool(),
                anchor=pad([p.is_anchor for p in pockets], ()).bool(),
                stack_label=torch.tensor([s for s, _ in labels]),
                anchor_label=torch.tensor([a for _, a in labels]),
                ligand=torch.tensor(np.stack([cx.ligand_xyz for cx in chunk]),
                                    dtype=torch.float32))


def _mlp(n_in, hidden, n_out):
    return nn.Sequential(nn.Linear(n_in, hidden), nn.SiLU(), nn.Linear(hidden, hidden),
                         nn.SiLU(), nn.Linear(hidden, n_out))


def rotation_6d(x: torch.Tensor) -> torch.Tensor:
    """Gram-Schmidt of two 3-vectors (..., 6) into a rotation matrix (..., 3, 3) whose columns
    are the orthonormal frame."""
    a, b = x[..., :3], x[..., 3:]
    e1 = a / a.norm(dim=-1, keepdim=True)
    b = b - (e1 * b).sum(-1, keepdim=True) * e1
    e2 = b / b.norm(dim=-1, keepdim=True)
    return torch.stack([e1, e2, torch.linalg.cross(e1, e2)], dim=-1)


def pocket_frame(centres, normals, stack, anchor) -> tuple[torch.Tensor, torch.Tensor]:
    """(origin (B, 3), rotation (B, 3, 3)) of the stacking/anchor frame."""
    rows = torch.arange(len(stack))
    origin = centres[rows, stack]
    toward = centres[rows, anchor] - origin
    z = normals[rows, stack]
    z = z * torch.sign((z * toward).sum(-1, keepdim=True) + 1e-9)
    x = toward - (toward * z).sum(-1, keepdim=True) * z
    x = x / x.norm(dim=-1, keepdim=True)
    return origin, torch.stack([x, torch.linalg.cross(z, x), z], dim=-1)


class DockingNet(nn.Module):
    def __init__(self, glycan_dim: int, hidden: int, use_distance: bool):
        super().__init__()
        self.use_distance = use_distance
        self.stack_score = _mlp(22, hidden, 1)
        self.anchor_score = _mlp(23, hidden, 1)
        self.embed = nn.Linear(glycan_dim, hidden)
        self.rounds = nn.ModuleList(_mlp((3 if use_distance else 2) * hidden, hidden, hidden)
                                    for _ in range(2))
        self.distance_scale = nn.Parameter(torch.tensor(1.0))
        self.torsion_head = _mlp(2 * hidden, hidden, 4)
        self.pose_head = _mlp(2 * hidden + len(AROMATIC) + len(ANCHORS), hidden, 9)
        with torch.no_grad():  # start from the stacked pose: 3.8 A up, no turn
            self.pose_head[-1].bias.copy_(torch.tensor([0, 0, 3.8, 1, 0, 0, 0, 1, 0.0]))

    def pointers(self, b: TopologyBatch, stack=None):
        """Stacking and anchor logits; the anchor's are conditioned on ``stack`` (the label in
        training, the argmax otherwise)."""
        stack_logits = self.stack_score(b.pocket_x).squeeze(-1).masked_fill(~b.aromatic, -1e4)
        if stack is None:
            stack = stack_logits.argmax(-1)
        origin = b.centres[torch.arange(len(stack)), stack]
        dist = (b.centres - origin[:, None]).norm(dim=-1, keepdim=True) / 10
        anchor_logits = self.anchor_score(torch.cat([b.pocket_x, dist], -1)).squeeze(-1)
        return stack_logits, anchor_logits.masked_fill(~b.anchor, -1e4), stack

    def forward(self, b: TopologyBatch, stack=None, anchor=None, torsions=None):
        """Coordinates and pointer logits; ``torsions`` (links, 2) replace the predicted
        ones (the CHI-minimum baseline)."""
        stack_logits, anchor_logits, stack = self.pointers(b, stack)
        if anchor is None:
            anchor = anchor_logits.argmax(-1)
        h = self.embed(b.glycan_x)
        for layer in self.rounds:
            parts = [h, b.adjacency @ h]
            if self.use_distance:
                parts.append(torch.softmax(-self.distance_scale * b.distances, -1) @ h)
            h = h + layer(torch.cat(parts, -1))
        links = b.builder.glycan.links
        parents = [b.builder.glycan.parents[j] for j in links]
        if torsions is None:
            raw = self.torsion_head(torch.cat([h[links], h[parents]], -1)) if links else \
                h.new_zeros(0, 4)
            torsions = torch.rad2deg(torch.stack([torch.atan2(raw[:, 1], raw[:, 0]),
                                                  torch.atan2(raw[:, 3], raw[:, 2])], -1))
        batch = len(stack)
        rows = torch.arange(batch)
        aa_stack = b.pocket_x[rows, stack][:, [AMINO_ACIDS.index(a) for a in AROMATIC]]
        aa_anchor = b.pocket_x[rows, anchor][:, [AMINO_ACIDS.index(a) for a in ANCHORS]]
        glycan_summary = torch.cat([h[0], h.mean(0)]).expand(batch, -1)
        pose = self.pose_head(torch.cat([glycan_summary, aa_stack, aa_anchor], -1))
        origin, frame = pocket_frame(b.centres, b.normals, stack, anchor)
        rotation = frame @ rotation_6d(pose[:, 3:])
        translation = origin + (frame @ pose[:, :3, None]).squeeze(-1)
        coords = b.builder.build(rotation, translation, torsions.expand(batch, -1, -1))
        return coords, stack_logits, anchor_logits


def glycan_energy(builder: GlycanBuilder, coords: torch.Tensor,
                  kinds: list[tuple[str, str]]) -> torch.Tensor:
    """(B,) mean CHI energy of the linkages, phi and psi measured from ``coords``."""
    if not kinds:
        return coords.new_zeros(coords.shape[0])
    angles = builder.measure_torsions(coords)  # (B, L, 2)
    energies = [chi_energy(angles[:, k, t], kind)
                for k, pair in enumerate(kinds) for t, kind in enumerate(pair)]
    return torch.stack(energies, -1).mean(-1).to(coords.dtype)


class DockingModule(L.LightningModule):
    def __init__(self, net: DockingNet, technique: Technique, lr: float):
        super().__init__()
        self.net, self.technique, self.lr = net, technique, lr

    def training_step(self, b: TopologyBatch, _):
        coords, stack_logits, anchor_logits = self.net(b, b.stack_label, b.anchor_label)
        loss = ((coords - b.ligand) ** 2).sum(-1).mean()
        loss = loss + nn.functional.cross_entropy(stack_logits, b.stack_label)
        loss = loss + nn.functional.cross_entropy(anchor_logits, b.anchor_label)
        if b.kinds and self.technique.lambda_energy:
            energy = glycan_energy(b.builder, coords, b.kinds).mean()
            loss = loss + self.technique.lambda_energy * energy
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.lr)

    def transfer_batch_to_device(self, b: TopologyBatch, device, dataloader_idx):
        return replace(b, **{f.name: getattr(b, f.name).to(device) for f in fields(b)
                             if isinstance(getattr(b, f.name), torch.Tensor)})


def train_docking(train: list[Complex], technique: Technique, epochs: int, batch_size: int,
                  hidden: int, lr: float, seed: int,
                  compute: Compute | None = None) -> DockingNet:
    streams = Streams(seed)
    batches = make_batches(train, technique.topology, batch_size)
    with streams.torch_default("initialisation"):
        net = DockingNet(batches[0].glycan_x.shape[1], hidden, "distance" in technique.topology)
    module = DockingModule(net, technique, lr)
    loader = torch.utils.data.DataLoader(batches, batch_size=None, shuffle=True,
                                         collate_fn=lambda b: b,
                                         generator=streams.torch("batch order"))
    with streams.torch_default("training"):
        make_trainer(compute, max_epochs=epochs, gradient_clip_val=1.0).fit(module, loader)
    return net.cpu().eval()


def chi_minima(kinds: list[tuple[str, str]]) -> torch.Tensor:
    """(links, 2) the global minimum of each linkage's phi and psi CHI functions (1-degree
    grid): the physics-only torsion prediction."""
    grid = torch.arange(-180.0, 180.0, dtype=torch.float64)
    return torch.tensor([[float(grid[chi_energy(grid, kind).argmin()]) for kind in pair]
                         for pair in kinds], dtype=torch.float32).reshape(len(kinds), 2)


@torch.no_grad()
def predict(net: DockingNet, complexes: list[Complex], technique: Technique,
            batch_size: int = 256, chi_minimum: bool = False) -> list[dict]:
    """Per complex: predicted ligand coordinates, measured torsions, CHI energy, and whether
    the pointers found the labelled residues; ``chi_minimum`` keeps the net's pose but sets
    every linkage to its CHI minimum."""
    out: list[dict] = [{} for _ in complexes]
    for b in make_batches(complexes, technique.topology, batch_size):
        fixed = chi_minima(b.kinds) if chi_minimum else None
        coords, stack_logits, anchor_logits = net(b, torsions=fixed)
        energy = glycan_energy(b.builder, coords, b.kinds)
        torsions = b.builder.measure_torsions(coords)
        stack_ok = stack_logits.argmax(-1) == b.stack_label
        for k, idx in enumerate(b.indices):
            out[idx] = {"ligand": coords[k].double().numpy(), "chi_energy": float(energy[k]),
                        "torsions": torsions[k].numpy(), "pointer_ok": bool(stack_ok[k]),
                        "links": len(b.kinds)}
    return out
