"""Causal-LM training through the one Lightning trainer factory.

``train_causal_lm`` fits any transformers causal LM on a ``datasets.Dataset`` of
``input_ids`` / ``labels`` (-100 = not scored) with AdamW, a linear warm-up and a cosine
decay, for a fixed number of optimizer steps. ``compute`` (the ``trainer`` config) scales it
to a GPU, DDP or FSDP; under DDP every rank ends with the same weights.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import lightning as L
import torch

from models.trainer import Compute, make_trainer


@dataclass(frozen=True)
class Optimization:
    steps: int
    batch_size: int
    lr: float
    warmup_fraction: float = 0.05
    weight_decay: float = 0.01


def warmup_cosine(step: int, total: int, warmup: int) -> float:
    """Learning-rate multiplier: linear 0 -> 1 over ``warmup`` steps, cosine 1 -> 0.1."""
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return 0.1 + 0.45 * (1 + math.cos(math.pi * progress))


class CausalLMModule(L.LightningModule):
    """Next-token cross-entropy on the ``labels`` of each batch."""

    def __init__(self, model, optimization: Optimization) -> None:
        super().__init__()
        self.model, self.optimization = model, optimization

    def training_step(self, batch, batch_idx):
        loss = self.model(input_ids=batch["input_ids"], labels=batch["labels"],
                          attention_mask=batch.get("attention_mask")).loss
        return loss

    def configure_optimizers(self):
        opt = self.optimization
        optimizer = torch.optim.AdamW(self.parameters(), lr=opt.lr,
                                      weight_decay=opt.weight_decay)
        warmup = max(1, int(opt.warmup_fraction * opt.steps))
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: warmup_cosine(step, opt.steps, warmup))
        return {"optimizer": optimizer,
                "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


def train_causal_lm(model, data, optimization: Optimization, seed: int,
                    compute: Compute | None = None, progress_bar: bool = True):
    """Train ``model`` on ``data`` (a ``datasets.Dataset``); returns it in eval mode on the
    first training device. Batches are drawn with a generator seeded by ``seed``."""
    loader = torch.utils.data.DataLoader(
        data.with_format("torch"), batch_size=optimization.batch_size, shuffle=True,
        drop_last=len(data) > optimization.batch_size,
        generator=torch.Generator().manual_seed(seed))
    trainer = make_trainer(compute, progress_bar=progress_bar, max_steps=optimization.steps)
    model.train()  # a loaded or copied model arrives in eval mode
    trainer.fit(CausalLMModule(model, optimization), loader)
    return model.to((compute or Compute()).device).eval()


def weights_checksum(model) -> float:
    """A float that differs between models with different weights."""
    with torch.no_grad():
        return float(sum(p.double().sum() * (i + 1) for i, p in
                         enumerate(model.parameters())))


def replica_checksums(model) -> list[float]:
    """``weights_checksum`` of every process of a multi-process launch (one entry when
    there is one process); raises when the replicas disagree (DDP went wrong)."""
    import torch.distributed as dist

    checksums = [weights_checksum(model)]
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        checksums = [None] * dist.get_world_size()
        dist.all_gather_object(checksums, weights_checksum(model))
        if max(checksums) - min(checksums) > 1e-9 * max(1.0, abs(checksums[0])):
            raise RuntimeError(f"the DDP replicas ended with different weights: {checksums}")
    return checksums


def sft_examples(prompts: list[list[int]], responses: list[list[int]], pad_id: int):
    """A ``datasets.Dataset`` for supervised fine-tuning on prompt/response pairs: the
    concatenation, right-padded, with labels -100 on the prompt and the padding (only the
    response is learned) and an attention mask."""
    from datasets import Dataset

    width = max(len(p) + len(r) for p, r in zip(prompts, responses, strict=True))
    ids, labels, mask = [], [], []
    for prompt, response in zip(prompts, responses, strict=True):
        pad = width - len(prompt) - len(response)
        ids.append(list(prompt) + list(response) + [pad_id] * pad)
        labels.append([-100] * len(prompt) + list(response) + [-100] * pad)
        mask.append([1] * (len(prompt) + len(response)) + [0] * pad)
    return Dataset.from_dict({"input_ids": ids, "labels": labels, "attention_mask": mask})
