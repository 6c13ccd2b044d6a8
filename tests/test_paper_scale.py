"""The ``scale=paper`` presets of the papers that name hub models, run end to end on CPU:
each model replaced by a tiny random-weight model of the same architecture (Qwen3: grouped
query attention, q/k norms, tied or untied embeddings as the real one; Qwen2; GPT-2) with the
packaged SmolLM2 tokenizer; the vision papers' backbones (Wan's pipeline, DINOv2, ViT)
tiny of the same classes; hub datasets and release folders by local folders of the same
layout; sizes shrunk to seconds. The preset's own settings (models, precision, hooks,
generation, training) stay. ``-m gpu``: the real sizes on CUDA (``make gpu-smoke``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from experiments.plan.shapes import model_architecture, random_causal_lm, shrunk
from experiments.runner.cli import scale_override

from .conftest import ROOT, run_paper
from .miniatures import (
    tiny_vit,
    tiny_wan_pipeline,
    write_nsd,
    write_reid_datasets,
)

pytestmark = pytest.mark.slow  # real-model code paths, 10-40 s each: make test-slow


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from models.lm.loader import smollm2_gguf_path

    gguf = smollm2_gguf_path()
    return AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)


@pytest.fixture(scope="module")
def tiny(tokenizer, tmp_path_factory):
    """``tiny(model file[, folder])``: a folder holding the tiny model of that architecture."""
    made: dict[str, Path] = {}

    def build(name: str, folder: str = "conf/model") -> Path:
        if name not in made:
            model = random_causal_lm(shrunk(model_architecture(name, folder), len(tokenizer)),
                                     pad_token_id=tokenizer.eos_token_id,
                                     eos_token_id=tokenizer.eos_token_id)
            made[name] = tmp_path_factory.mktemp(name)
            model.save_pretrained(made[name])
            tokenizer.save_pretrained(made[name])
        return made[name]

    return build


@pytest.fixture(scope="module")
def gsm8k_folder(tmp_path_factory) -> Path:
    """GSM8K's layout (config main, question / answer with '#### n') in a local folder."""
    from experiments.plan.device_check import write_gsm8k_layout

    return write_gsm8k_layout(tmp_path_factory.mktemp("gsm8k"))


def run_preset(key: str, overrides: list[str], tmp_path: Path) -> dict:
    argv = scale_override([f"+paper={key}", "scale=paper", "device=cpu",
                           f"paths.cache_dir={tmp_path / 'cache'}", *overrides], [key])
    return run_paper(argv, tmp_path / "run")


def test_mpopd_preset_distils_a_qwen3_pair(tiny, gsm8k_folder, tmp_path):
    metrics = run_preset("mpopd", [
        f"model.hub_id={tiny('qwen3-8b')}", f"student.hub_id={tiny('qwen3-4b-base')}",
        f"dataset.hub_id={gsm8k_folder}", "dataset.limit=4", "dataset.max_new_tokens=6",
        "method.max_new_tokens=6", "method.prompts_per_step=2", "method.group_size=2",
        "protocol.steps=2", "protocol.eval_prompts=2", "protocol.curve_prompts=2",
        "protocol.eval_every=0", "protocol.variants=[opd,mpopd]"], tmp_path)
    assert {"acc_mpopd", "acc_opd"} <= set(metrics)


def test_prohind_preset_trains_qwen3_with_grpo(tiny, gsm8k_folder, tmp_path):
    metrics = run_preset("prohind", [
        f"model.hub_id={tiny('qwen3-4b')}", f"dataset.hub_id={gsm8k_folder}", "dataset.limit=4",
        "dataset.max_new_tokens=6", "method.prompts_per_step=2", "method.group_size=2",
        "protocol.steps=2", "protocol.eval_prompts=2", "protocol.lambdas=[1.0]"], tmp_path)
    assert metrics


def test_cfbeam_preset_searches_with_qwen3(tiny, tmp_path):
    root = tmp_path / "math500"
    root.mkdir()
    (root / "test.jsonl").write_text("".join(
        json.dumps({"problem": f"What is {a}+1?", "answer": str(a + 1)}) + "\n"
        for a in range(4)))
    metrics = run_preset("cfbeam", [
        f"model.hub_id={tiny('qwen3-4b')}", f"dataset.hub_id={root}", "dataset.limit=2",
        "dataset.max_new_tokens=6", "method.beam_width=2", "method.samples_per_beam=2",
        "protocol.tree.coverages=[4,8]", "protocol.tree.trials=5", "protocol.tree.bootstrap=5",
        "protocol.tree.reward_noise=[0.0]", "protocol.tree.bon_hard_steps=[1,2]"],
        tmp_path)
    assert metrics


def test_gcad_preset_steers_qwen2_with_a_qwen3_judge(tiny, tmp_path):
    metrics = run_preset("gcad", [
        f"model.hub_id={tiny('qwen2.5-7b-instruct')}", f"judge.hub_id={tiny('qwen3-8b')}",
        "protocol.max_new_tokens=4", "protocol.residual_layer=1"], tmp_path)
    assert metrics


def test_directsynth_preset_asks_a_qwen3_for_programs(tiny, tmp_path):
    metrics = run_preset("directsynth", [
        f"model.hub_id={tiny('qwen3-4b')}", f"dataset.root={ROOT / 'data' / 'ipc2023-learning'}",
        "dataset.test_level=easy", "dataset.domains=[blocksworld]", "dataset.test_tasks=1",
        "dataset.training_tasks=2", "dataset.test_set=easy", "method.max_programs=2",
        "method.max_new_tokens=16", "protocol.baseline_programs=2"], tmp_path)
    assert metrics["domains"] == 1


def test_proteinopd_preset_distils_a_gpt2_student(tiny, tmp_path):
    fasta = tmp_path / "proteins.fasta"
    rng = torch.Generator().manual_seed(0)
    letters = "ACDEFGHIKLMNPQRSTVWY"
    fasta.write_text("".join(
        f">p{i}\n" + "".join(letters[j] for j in torch.randint(0, 20, (60,), generator=rng))
        + "\n" for i in range(40)))
    metrics = run_preset("proteinopd", [
        f"model.hub_id={tiny('protgpt2', 'conf/paper/proteinopd/model')}",
        f"dataset.path={fasta}", "protocol.opd_steps=2", "protocol.teacher_steps=2",
        "protocol.rl_steps=2", "protocol.eval_samples=4", "protocol.front_kl_betas=[0.04]",
        "protocol.pareto_weights=[0.5]", "method.sequences_per_step=2",
        "protocol.objectives=[thermostability,stability]"], tmp_path)
    assert metrics


def test_proprio_preset_self_selects_with_a_wan_pipeline(tmp_path):
    """Wan's pipeline classes (UMT5 text encoder, 3D transformer, causal VAE) in bf16."""
    tiny_wan_pipeline().save_pretrained(tmp_path / "wan")
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("a ball falls\na ball bounces\n")
    metrics = run_preset("proprio", [
        f"model.hub_id={tmp_path / 'wan'}", f"dataset.prompts_file={prompts}",
        "protocol.video.samples_per_prompt=2", "protocol.video.num_frames=5",
        "protocol.video.height=32", "protocol.video.width=32",
        "protocol.video.num_inference_steps=2"], tmp_path)
    assert metrics["prompts"] == 2 and metrics["samples_per_prompt"] == 2


def test_protofmri_preset_reads_nsd_through_a_dinov2(tmp_path):
    """A DINOv2 (its processor class, register-free, 14-pixel patches) on the NSD layout."""
    from transformers import BitImageProcessor, Dinov2Config, Dinov2Model

    write_nsd(tmp_path / "nsd")
    torch.manual_seed(0)
    Dinov2Model(Dinov2Config(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                             mlp_ratio=2, patch_size=14, image_size=56)).save_pretrained(
        tmp_path / "dinov2")
    BitImageProcessor(size={"shortest_edge": 64}, crop_size={"height": 56, "width": 56},
                      image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225]
                      ).save_pretrained(tmp_path / "dinov2")
    metrics = run_preset("protofmri", [
        f"dataset.root={tmp_path / 'nsd'}", "dataset.sessions=2", "dataset.image_size=48",
        f"method.backbone={tmp_path / 'dinov2'}", "method.prototypes=8",
        "method.candidates=20"], tmp_path)
    assert metrics["test_images"] == 60 and 0 < metrics["noise_ceiling_mean"] <= 1


def test_viptc_preset_runs_the_three_benchmarks_through_a_vit(tmp_path):
    """A ViT by folder (class token, position embeddings interpolated to the person crop) on
    RegDB, SYSU-MM01 and LLCM in their release layouts."""
    write_reid_datasets(tmp_path / "reid")
    tiny_vit().save_pretrained(tmp_path / "vit")
    metrics = run_preset("viptc", [
        f"dataset.regdb_root={tmp_path / 'reid/RegDB'}",
        f"dataset.sysu_root={tmp_path / 'reid/SYSU'}",
        f"dataset.llcm_root={tmp_path / 'reid/LLCM'}", "dataset.height=32", "dataset.width=16",
        "dataset.max_images_per_id=2", f"method.backbone={tmp_path / 'vit'}",
        "protocol.epochs=1", "protocol.arms=[finetune,sptc]", "protocol.ids_per_batch=2",
        "protocol.per_modality=2"], tmp_path)
    assert metrics["exemplars_stored"] == 0 and torch.isfinite(
        torch.tensor(metrics["forgetting_sptc"]))


# -- on a GPU: the real sizes ------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("name", ["qwen3-0.6b", "qwen3-4b"])
def test_real_size_qwen3_steps_within_the_plan(name):
    """Random-initialised weights of the real shape in bfloat16: three AdamW steps at
    micro-batch 2 x 1024 tokens with checkpointing, then 64 sampled tokens; peak memory and
    tokens/s printed beside make plan's estimate (and memory within 30% of it)."""
    from experiments.plan.device_check import measure_lm_steps

    m = measure_lm_steps(name, model_architecture(name), "cuda")
    print(m)
    assert m["peak_gib"] == pytest.approx(m["plan_gib"], rel=0.3)
