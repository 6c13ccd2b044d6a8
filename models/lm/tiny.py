"""tiny-lm: a small Llama-config causal LM trained locally on a task, cached by its config,
the task's training settings and the source of the code that trains it.

A task (``data/lm_tasks.py``: ``TrainingTask``) supplies the vocabulary, the training split
and held-out examples. After training, the teacher-forced accuracy on held-out examples of
every horizon must reach ``min_held_out_accuracy``, else the build fails with one line (and
nothing is cached) instead of an experiment running on a broken model.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from common.cache import load_or_build
from common.errors import UserError
from common.streams import Streams

log = logging.getLogger("paperlab")
ARCHITECTURE_KEYS = ("layers", "hidden", "heads")
TRAINING_KEYS = ("steps", "batch_size", "lr", "warmup_fraction", "weight_decay", "seed")


def build_tiny_llama(model_cfg, vocab_size: int, pad_id: int, max_positions: int,
                     seed: int | None = None):
    """A fresh Llama-config model whose initial weights depend on ``seed`` only (default
    ``model_cfg.seed``), not on the global random state."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=vocab_size, hidden_size=model_cfg.hidden,
                         intermediate_size=2 * model_cfg.hidden,
                         num_hidden_layers=model_cfg.layers,
                         num_attention_heads=model_cfg.heads,
                         num_key_value_heads=model_cfg.heads,
                         max_position_embeddings=max_positions, pad_token_id=pad_id,
                         bos_token_id=None, eos_token_id=None, tie_word_embeddings=True)
    with Streams(int(model_cfg.seed if seed is None else seed)).torch_default("init"):
        return LlamaForCausalLM(config)


def build_tiny_gpt2(model_cfg, vocab_size: int, pad_id: int, eos_id: int, max_positions: int,
                    seed: int | None = None):
    """A fresh GPT-2-config model (ProtGPT2's architecture, scaled down, no dropout, as
    tiny-lm) with the same size fields as ``build_tiny_llama``; initial weights depend on
    ``seed`` only."""
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=vocab_size, n_positions=max_positions,
                        n_embd=model_cfg.hidden, n_layer=model_cfg.layers,
                        n_head=model_cfg.heads, bos_token_id=eos_id, eos_token_id=eos_id,
                        pad_token_id=pad_id, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    with Streams(int(model_cfg.seed if seed is None else seed)).torch_default("init"):
        return GPT2LMHeadModel(config)


def optimization_of(model_cfg):
    from models.lm.training import Optimization

    return Optimization(steps=int(model_cfg.steps), batch_size=int(model_cfg.batch_size),
                        lr=float(model_cfg.lr), warmup_fraction=float(model_cfg.warmup_fraction),
                        weight_decay=float(model_cfg.weight_decay))


def train_tiny_lm(model_cfg, task, compute=None):
    """Build and train tiny-lm on ``task``; returns the model and a report: held-out accuracy
    per horizon, and the weights checksum of every process (equal under DDP)."""
    import torch

    from models.lm.rollout import completion_logits, given_completions
    from models.lm.training import replica_checksums, train_causal_lm

    streams = Streams(int(model_cfg.seed))  # the model's own: the same at every run seed
    model = build_tiny_llama(model_cfg, task.vocab_size, task.pad_id, task.max_length)
    data = task.training_data(streams.numpy("training data"))
    model = train_causal_lm(model, data, optimization_of(model_cfg), streams.seed("batches"),
                            compute)
    accuracy = {}
    held_out = task.held_out(streams.numpy("held out"))
    for horizon, (prompts, targets) in held_out.items():
        forced = given_completions(prompts, targets, task.pad_id)
        with torch.no_grad():
            right = completion_logits(model, forced).argmax(-1).cpu() == forced.completion_ids
        mask = forced.completion_mask.bool()  # per example: the fraction of right tokens
        accuracy[horizon] = float(((right & mask).sum(1) / mask.sum(1)).mean())
    return model, {"held_out_accuracy": accuracy, "replica_checksums": replica_checksums(model)}


def load_or_train_tiny_lm(model_cfg, task, cache_dir: Path, compute=None):
    """(model, tokenizer): trained once per (config, task settings, code), then loaded."""
    from transformers import LlamaForCausalLM
    from transformers.utils import logging as hf_logging

    from models.lm import rollout, training

    config = {"model": {k: getattr(model_cfg, k) for k in ARCHITECTURE_KEYS + TRAINING_KEYS},
              "task": task.config}
    modules = [__name__, training, rollout, task.code_module]
    floor = getattr(model_cfg, "min_held_out_accuracy", None)

    def build(folder: Path):
        model, report = train_tiny_lm(model_cfg, task, compute)
        accuracy = report["held_out_accuracy"]
        summary = ", ".join(f"L={h}: {a:.3f}" for h, a in accuracy.items())
        log.info("tiny-lm held-out teacher-forced accuracy: %s", summary)
        if floor is not None and min(accuracy.values()) < floor:
            raise UserError(f"tiny-lm trained to held-out accuracy {summary}, below the floor "
                            f"{floor} (model.min_held_out_accuracy): more model.steps or a "
                            "larger model is needed; nothing was cached")
        model.save_pretrained(folder)
        (folder / "training_report.json").write_text(json.dumps(report, indent=2) + "\n")
        return model

    def load(folder: Path):
        return LlamaForCausalLM.from_pretrained(folder).eval()

    hf_logging.disable_progress_bar()
    model = load_or_build(cache_dir, "tiny-lm", config, modules, build, load)
    device = compute.device if compute is not None else "cpu"
    return model.to(device), task.tokenizer
