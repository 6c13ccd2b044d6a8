"""A tiny Llama-config causal LM trained with Lightning on scratchpad addition
(data/arithmetic.py), cached under the cache folder by a hash of its configuration."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import numpy as np

log = logging.getLogger("paperlab")
TRAINING_KEYS = ("layers", "hidden", "heads", "train_examples", "steps", "batch_size", "lr",
                 "noise", "horizons", "seed")


class ArithmeticTokenizer:
    """Token ids <-> text for the addition vocabulary (see data/arithmetic.py)."""

    def decode(self, ids) -> str:
        from data.arithmetic import EOS, EQUALS, LEN0, PAD

        names = {EQUALS: "=", EOS: "<eos>", PAD: ""}
        return "".join(names.get(i, f"[L{i - LEN0 + 1}]" if LEN0 <= i < EQUALS else str(i))
                       for i in ids)


def tiny_lm_key(cfg) -> str:
    payload = json.dumps({k: (list(cfg[k]) if k == "horizons" else cfg[k])
                          for k in TRAINING_KEYS}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:12]


def build_model(cfg, vocab_size: int | None = None, pad_id: int | None = None):
    """A Llama-config model (``cfg``: layers, hidden, heads); addition vocabulary by default."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from data.arithmetic import PAD, VOCAB_SIZE

    vocab_size = VOCAB_SIZE if vocab_size is None else vocab_size
    pad_id = PAD if pad_id is None else pad_id
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=cfg.hidden,
                         intermediate_size=2 * cfg.hidden, num_hidden_layers=cfg.layers,
                         num_attention_heads=cfg.heads, num_key_value_heads=cfg.heads,
                         max_position_embeddings=128, pad_token_id=pad_id, bos_token_id=None,
                         eos_token_id=None, tie_word_embeddings=True)
    return LlamaForCausalLM(config)


def train_causal_lm(model, data, steps: int, batch_size: int, lr: float, seed: int,
                    device: str = "cpu"):
    """Train a transformers causal LM with Lightning on a `datasets.Dataset` of
    ``input_ids``/``labels`` (AdamW, one-cycle schedule). Returns the trained model."""
    import lightning as L
    import torch

    from models.trainer import quiet_trainer

    class Module(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def training_step(self, batch, batch_idx):
            return self.model(input_ids=batch["input_ids"], labels=batch["labels"]).loss

        def configure_optimizers(self):
            opt = torch.optim.AdamW(self.parameters(), lr=lr, weight_decay=0.01)
            sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    torch.manual_seed(seed)
    loader = torch.utils.data.DataLoader(data.with_format("torch"), batch_size=batch_size,
                                         shuffle=True,
                                         generator=torch.Generator().manual_seed(seed))
    trainer = quiet_trainer(device, progress_bar=True, max_steps=steps)
    trainer.fit(Module(), loader)
    return model


def train_tiny_lm(cfg, out_dir: Path, device: str = "cpu"):
    """Train the addition model and save it with ``save_pretrained`` to ``out_dir``."""
    from data.arithmetic import training_dataset

    data = training_dataset(int(cfg.train_examples), list(cfg.horizons), float(cfg.noise),
                            np.random.default_rng(int(cfg.seed)))
    model = train_causal_lm(build_model(cfg), data, int(cfg.steps), int(cfg.batch_size),
                            float(cfg.lr), int(cfg.seed), device)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    return model


def load_or_train_tiny_lm(cfg, device: str, cache_dir: Path):
    """(model, tokenizer): trained once per configuration, then loaded from the cache."""
    from transformers import LlamaForCausalLM

    folder = Path(cache_dir) / "tiny-lm" / tiny_lm_key(cfg)
    if not (folder / "config.json").is_file():
        log.info("training tiny-lm (cached at %s)", folder)
        train_tiny_lm(cfg, folder, device)
    model = LlamaForCausalLM.from_pretrained(folder)
    return model.to(device).eval(), ArithmeticTokenizer()
