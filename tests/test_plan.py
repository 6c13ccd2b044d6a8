"""make plan: parameter counts against published figures, memory against the tensors a
small model really holds on CPU, the paper-scale presets, and the refusal of a plan that
cannot fit."""

from __future__ import annotations

import functools

import pytest
import torch

from experiments.claims.papers import papers
from experiments.plan.__main__ import compose, main, table
from experiments.plan.estimate import (
    GIB,
    GPUS,
    Setup,
    activation_values,
    estimate,
    lora_parameters,
    parameter_count,
)
from experiments.plan.shapes import model_architecture, random_causal_lm
from experiments.schemas.shared import Architecture, Workload

from .conftest import ROOT

# (model file, published count, embeddings excluded?) from the Qwen3 technical report
# (Table 1: 0.44B, 1.4B, 3.6B, 6.95B non-embedding), the Qwen2.5 report (7.61B), the Llama
# 3.1 model card (8.03B) and SmolLM2-135M as loaded here (134.5M)
PUBLISHED = [("qwen3-0.6b", 0.44e9, True), ("qwen3-1.7b", 1.4e9, True),
             ("qwen3-4b", 3.6e9, True), ("qwen3-8b", 6.95e9, True),
             ("qwen2.5-7b-instruct", 7.61e9, False), ("llama-3.1-8b-instruct", 8.03e9, False),
             ("smollm2-135m", 134.5e6, False)]


@pytest.mark.parametrize("name,published,non_embedding", PUBLISHED)
def test_parameter_counts_match_the_published_figures(name, published, non_embedding):
    arch = model_architecture(name)
    count = parameter_count(arch)
    if non_embedding:
        count -= arch.vocab * arch.hidden * (1 if arch.tied_embeddings else 2)
    assert count == pytest.approx(published, rel=0.015)


TINY = Architecture(family="qwen3", layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16,
                    intermediate=128, vocab=300, tied_embeddings=True, max_positions=256,
                    source="test")


def _setup(precision: str) -> Setup:
    return Setup(GPUS["h100-80gb"], 1, precision, "none")


def _work(role="train", micro_batch=2, seq_len=48, **kw) -> Workload:
    return Workload(model="model", role=role, steps=1, batch=micro_batch,
                    micro_batch=micro_batch, seq_len=seq_len, **kw)


@pytest.mark.parametrize("family", ["qwen3", "llama", "gpt2"])
def test_meta_device_count_equals_a_built_model(family):
    arch = Architecture(**{**vars(TINY), "family": family})
    assert parameter_count(arch) == sum(p.numel() for p in random_causal_lm(arch).parameters())


@pytest.mark.parametrize("precision,dtype", [("bf16_true", torch.bfloat16),
                                             ("fp32", torch.float32)])
def test_weights_gradients_and_adam_state_equal_the_tensors_after_a_step(precision, dtype):
    model = random_causal_lm(TINY).to(dtype)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, TINY.vocab, (2, 16))
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    held = {"weights": sum(p.nbytes for p in model.parameters()),
            "gradients": sum(p.grad.nbytes for p in model.parameters()),
            "optimizer": sum(t.nbytes for state in optimizer.state.values()
                             for name, t in state.items() if name != "step")}
    planned = estimate("model", TINY, _work(), _setup(precision)).memory
    assert {k: planned[k] for k in held} == held


def test_lora_trainable_parameters_equal_peft():
    import peft

    model = random_causal_lm(TINY)
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    wrapped = peft.get_peft_model(model, peft.LoraConfig(r=8, target_modules=targets))
    trainable = sum(p.numel() for p in wrapped.parameters() if p.requires_grad)
    assert lora_parameters(TINY, 8) == trainable


def _saved_bytes(model, ids) -> int:
    """Bytes of the distinct non-parameter tensors autograd keeps after one forward pass
    (what the backward pass will read; a checkpointed layer keeps only its input)."""
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    storages = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in weights:
            storages[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    return sum(storages.values())


def test_activation_estimate_is_within_a_factor_of_two_of_what_autograd_keeps():
    """Without checkpointing: every layer's saved tensors and the logits. With it: the layer
    inputs, the logits and, at the backward pass, one recomputed layer."""
    arch = Architecture(**{**vars(TINY), "layers": 4, "hidden": 128, "intermediate": 384,
                           "heads": 8, "kv_heads": 4})
    ids = torch.randint(0, arch.vocab, (2, 96))
    measured = {}
    for checkpointing in (False, True):
        model = random_causal_lm(arch).to(torch.bfloat16)
        model.config.use_cache = False
        if checkpointing:
            model.gradient_checkpointing_enable()
        model.train()
        measured[checkpointing] = _saved_bytes(model, ids)
    one_layer = (measured[False] - measured[True]) / arch.layers  # recomputed at backward
    for checkpointing, held in ((False, measured[False]), (True, measured[True] + one_layer)):
        memory = estimate("model", arch, _work(seq_len=96, checkpointing=checkpointing),
                          _setup("bf16_true")).memory
        planned = memory["activations"] + memory["logits"]
        assert 0.5 < planned / held < 2.0, (checkpointing, planned, held)
    assert measured[True] < measured[False]


def test_activation_values_follow_the_layer_shapes():
    """4h + 3q + 2kv + 4i for a gated MLP (Korthikanti et al. with memory-efficient
    attention), 2i for GPT-2's."""
    assert activation_values(TINY) == 4 * 64 + 3 * 64 + 2 * 32 + 4 * 128
    gpt2 = Architecture(**{**vars(TINY), "family": "gpt2", "kv_heads": None})
    assert activation_values(gpt2) == 4 * 64 + 3 * 64 + 2 * 64 + 2 * 128


@functools.cache
def h100_table() -> str:
    return table("h100-80gb")


@pytest.mark.slow  # over 5 s: make test-slow
def test_every_paper_has_a_paper_scale_preset_and_a_plan():
    text = h100_table()
    for key in list(papers()):
        assert (ROOT / "conf" / "paper" / key / "scale" / "cpu.yaml").is_file()
        assert f"| {key} |" in text
    assert "| mpopd | 8 x h100-80gb |" in text and "qwen3-4b-base (train, 4.02B)" in text


@pytest.mark.slow  # over 5 s: make test-slow
def test_the_scale_table_in_the_docs_is_generated():
    doc = (ROOT / "docs" / "paper_scale.md").read_text()
    assert h100_table() in doc, "regenerate it: make plan-docs"


def test_a_preset_changes_models_and_sizes_and_the_command_line_still_wins():
    cfg = compose(["+paper=mpopd", "scale=paper", "protocol.steps=3"])
    assert (cfg.model.name, cfg.student.name, cfg.paper.scale) == (
        "qwen3-8b", "qwen3-4b-base", "paper")
    assert cfg.protocol.steps == 3 and cfg.paper.plan.workloads[0].steps == 3
    assert compose(["+paper=mpopd"]).paper.scale == "cpu"


def test_a_preset_without_its_data_is_one_line(capsys):
    assert main(["+paper=protofmri", "scale=paper"]) == 1
    assert capsys.readouterr().err.strip() == (
        "error: set dataset.root=<path>: this setting reads data that cannot be fetched by "
        "name")


def test_a_plan_that_cannot_fit_is_refused_with_a_remedy(capsys):
    assert main(["+paper=prohind", "scale=paper", "paper.plan.gpus=1",
                 "paper.plan.sharding=none", "--gpu", "a100-40gb"]) == 1
    err = capsys.readouterr().err
    assert "prohind does not fit 1 x a100-40gb" in err and "try " in err
    assert main(["+paper=prohind", "scale=paper"]) == 0
    assert "GiB per GPU" in capsys.readouterr().out


def test_an_unknown_gpu_or_scale_is_one_line(capsys):
    assert main(["+paper=mpopd", "scale=paper", "--gpu", "h100"]) == 1
    assert "unknown gpu 'h100'" in capsys.readouterr().err
    assert main(["+paper=mpopd", "scale=papr"]) == 1
    assert "did you mean paper" in capsys.readouterr().err


def test_memory_scales_down_with_sharding():
    arch = model_architecture("qwen3-4b")
    work = _work(micro_batch=1, seq_len=1024, checkpointing=True)
    one = estimate("m", arch, work, Setup(GPUS["h100-80gb"], 1, "bf16_true", "none"))
    eight = estimate("m", arch, work, Setup(GPUS["h100-80gb"], 8, "bf16_true", "fsdp"))
    assert eight.memory["optimizer"] == pytest.approx(one.memory["optimizer"] / 8)
    assert one.memory["weights"] / GIB == pytest.approx(4.022e9 * 2 / GIB, rel=0.01)


@pytest.mark.parametrize("argv,keys,message", [
    (["+paper=mpopd,gcad", "scale=paper"], ["mpopd", "gcad"], "give one paper"),
    (["+paper=mpopd", "scale=cpu,paper"], ["mpopd"], "one scale per command"),
    (["+paper=mpopd", "scale=gpu"], ["mpopd"], "unknown mpopd scale 'gpu'"),
])
def test_scale_mistakes_are_one_line(argv, keys, message):
    from common.errors import UserError
    from experiments.runner.cli import scale_override

    with pytest.raises(UserError, match=message):
        scale_override(argv, keys)
