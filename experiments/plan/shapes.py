"""Models of a named architecture without its weights: the ``arch`` block of a model file,
the same family shrunk to a test's size, and a randomly initialised model of either shape
(the tiny-architecture tests, the GPU smoke test and the device check build from these)."""

from __future__ import annotations

from pathlib import Path

from common.streams import Streams

ROOT = Path(__file__).resolve().parents[2]


def model_architecture(name: str, folder: str = "conf/model"):
    """The ``arch`` block of ``<folder>/<name>.yaml``, typed (the facts make plan uses)."""
    from omegaconf import OmegaConf

    from experiments.schemas.shared import Architecture

    block = OmegaConf.load(ROOT / folder / f"{name}.yaml").arch
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(Architecture), block))


def shrunk(arch, vocab: int):
    """The same family and embedding tying, two layers of width 64, GQA kept."""
    from experiments.schemas.shared import Architecture

    grouped = (arch.kv_heads or arch.heads) < arch.heads
    return Architecture(family=arch.family, layers=2, hidden=64, heads=4,
                        kv_heads=2 if grouped else None, head_dim=16, intermediate=128,
                        vocab=vocab, tied_embeddings=arch.tied_embeddings,
                        max_positions=2048, source="test")


def random_causal_lm(arch, seed: int = 0, device: str = "cpu", dtype=None, **config):
    """A causal LM of an ``arch`` block's shape, randomly initialised from ``seed`` on
    ``device`` (torch's global generators are left as they were); ``config`` sets further
    fields of its transformers config (e.g. the token ids)."""
    import torch
    import transformers

    from experiments.plan.estimate import hf_config

    hf = hf_config(arch)
    for key, value in config.items():
        setattr(hf, key, value)
    cuda = (torch.device(device),) if torch.device(device).type == "cuda" else ()
    with Streams(seed).torch_default("init", cuda), torch.device(device):
        return transformers.AutoModelForCausalLM.from_config(hf, torch_dtype=dtype)
