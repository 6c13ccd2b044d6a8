"""``make plan``: the memory and time a paper's setting needs, before any weight is fetched.

    python -m experiments.plan +paper=mpopd scale=paper --gpu h100-80gb [overrides]
    python -m experiments.plan --all --gpu h100-80gb --markdown docs/paper_scale.md

Per model of the preset's ``paper.plan`` (its role, batch, sequence length, precision,
checkpointing and sharding):

- **parameters**: the model built from its ``arch`` facts (``conf/model/*.yaml``) on the
  meta device (no memory, no download); family ``other`` takes the model card's count;
- **memory per GPU**: weights, gradients and AdamW moments at the precision's bytes per
  value (LoRA: only the adapters train), activations of one micro-batch, the logits of one
  micro-batch and the KV cache of its rollouts, divided over the GPUs where sharded; a
  model with several workloads counts each part at its largest;
- **time**: training 6 FLOPs per parameter and token (8 with checkpointing: the forward
  runs twice; LoRA 4: no weight gradients of the base), forward passes 2, plus attention
  over the sequence (2 L s q per token forward, causal; 4 L s q for a diffusion model), at
  ``TRAIN_UTILISATION`` of the GPU's dense bf16 peak; sampling is bound by reading the
  weights and the cache once per token, at ``BANDWIDTH_UTILISATION`` of the memory
  bandwidth.

Activations follow Korthikanti et al. (2022, "Reducing activation recomputation in large
transformer models"), per layer and token in 16-bit values: the inputs every matrix
product keeps for its backward pass, the attention's q, k, v and output (memory-efficient
attention: no score matrix) and the MLP's hidden values; ``activation_values`` says which.
A plan that does not fit the GPU is refused with the first change that would make it fit.
"""

from __future__ import annotations

import dataclasses
import math

from common.errors import UserError, did_you_mean

GIB = 2**30
HEADROOM = 0.9  # of a GPU's memory a plan may use (the CUDA context and fragmentation)
TRAIN_UTILISATION = 0.4  # model FLOPs utilisation of training and scoring passes
BANDWIDTH_UTILISATION = 0.6  # of the memory bandwidth while sampling one token at a time


@dataclasses.dataclass(frozen=True)
class Gpu:
    memory_gib: float
    bf16_tflops: float  # dense, without sparsity
    bandwidth_tbs: float
    source: str


GPUS = {
    "h200-141gb": Gpu(141, 989, 4.8, "NVIDIA H200 datasheet (SXM)"),
    "h100-80gb": Gpu(80, 989, 3.35, "NVIDIA H100 datasheet (SXM)"),
    "a100-80gb": Gpu(80, 312, 2.04, "NVIDIA A100 datasheet (SXM, 80 GB)"),
    "a100-40gb": Gpu(40, 312, 1.56, "NVIDIA A100 datasheet (SXM, 40 GB)"),
    "l40s-48gb": Gpu(48, 362, 0.864, "NVIDIA L40S datasheet"),
    "rtx4090-24gb": Gpu(24, 165, 1.01, "NVIDIA Ada architecture whitepaper (RTX 4090)"),
}

# bytes per value: (trainable weight, gradient, both AdamW moments) and the frozen weight
PRECISION_BYTES = {"bf16_true": (2, 2, 4, 2), "bf16_mixed": (4, 4, 8, 2),
                   "fp32": (4, 4, 8, 4)}
ACTIVATION_BYTES = {"bf16_true": 2, "bf16_mixed": 2, "fp32": 4}


# -- architecture ---------------------------------------------------------------------------

def hf_config(arch):
    """The transformers config of an ``arch`` block (families qwen3, qwen2, llama, gpt2)."""
    import transformers

    family = str(arch.family)
    if family == "gpt2":
        return transformers.GPT2Config(
            n_layer=arch.layers, n_embd=arch.hidden, n_head=arch.heads,
            n_inner=arch.intermediate, vocab_size=arch.vocab, n_positions=arch.max_positions,
            tie_word_embeddings=arch.tied_embeddings)
    config_class = {"qwen3": transformers.Qwen3Config, "qwen2": transformers.Qwen2Config,
                    "llama": transformers.LlamaConfig}[family]
    return config_class(
        num_hidden_layers=arch.layers, hidden_size=arch.hidden,
        num_attention_heads=arch.heads, num_key_value_heads=arch.kv_heads or arch.heads,
        head_dim=arch.head_dim or arch.hidden // arch.heads,
        intermediate_size=arch.intermediate, vocab_size=arch.vocab,
        max_position_embeddings=arch.max_positions,
        tie_word_embeddings=arch.tied_embeddings)


def parameter_count(arch) -> int:
    """Parameters of the architecture, counted on the meta device (no memory used); once
    per shape (a plan's remedies re-estimate the same models)."""
    if str(arch.family) == "other":
        return int(arch.parameters)
    shape = dataclasses.astuple(arch)
    if shape not in _COUNTS:
        import torch
        import transformers

        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(hf_config(arch))
        _COUNTS[shape] = sum(p.numel() for p in model.parameters())
    return _COUNTS[shape]


_COUNTS: dict[tuple, int] = {}


def attention_widths(arch) -> tuple[int, int]:
    """(q, kv): the widths of the query and of each of the key and value projections."""
    head_dim = arch.head_dim or arch.hidden // arch.heads
    return arch.heads * head_dim, (arch.kv_heads or arch.heads) * head_dim


def lora_parameters(arch, rank: int) -> int:
    """Adapter parameters of rank ``rank`` on every attention and MLP matrix of every layer:
    ``rank * (inputs + outputs)`` per matrix."""
    h, (q, kv) = arch.hidden, attention_widths(arch)
    matrices = [(h, q), (h, kv), (h, kv), (q, h)]
    matrices += ([(h, arch.intermediate), (arch.intermediate, h)] if str(arch.family) == "gpt2"
                 else [(h, arch.intermediate)] * 2 + [(arch.intermediate, h)])
    return arch.layers * rank * sum(i + o for i, o in matrices)


def activation_values(arch) -> int:
    """Values one layer keeps per token for its backward pass (memory-efficient attention):
    the two norms' inputs (2h), the attention's shared input (h), q, k, v and its output and
    the output projection's input (3q + 2kv), the MLP's input (h) and hidden values (gate,
    up, their product and the activation: 4i; GELU MLPs 2i)."""
    h, (q, kv) = arch.hidden, attention_widths(arch)
    mlp = 2 * arch.intermediate if str(arch.family) == "gpt2" else 4 * arch.intermediate
    return 4 * h + 3 * q + 2 * kv + mlp


# -- memory and time ---------------------------------------------------------------------

@dataclasses.dataclass
class Estimate:
    model: str
    role: str
    parameters: int
    trainable: int
    memory: dict[str, float]  # bytes per GPU by part
    seconds: float

    @property
    def total(self) -> float:
        return sum(self.memory.values())


@dataclasses.dataclass(frozen=True)
class Setup:
    """Where a run's workloads run: the GPU, how many, the precision and the sharding."""

    gpu: Gpu
    gpus: int
    precision: str
    sharding: str


def estimate(name: str, arch, work, setup: Setup) -> Estimate:
    """Memory per GPU and time of one workload."""
    params = parameter_count(arch)
    role, precision = str(work.role), setup.precision
    weight_b, grad_b, adam_b, frozen_b = PRECISION_BYTES[precision]
    act_b = ACTIVATION_BYTES[precision]
    shards = setup.gpus if setup.sharding == "fsdp" else 1
    trainable = (params if role == "train" else
                 lora_parameters(arch, work.lora_rank) if role == "lora" else 0)
    frozen = params - trainable if role != "lora" else params
    memory = {"weights": (trainable * weight_b + frozen * frozen_b) / shards,
              "gradients": trainable * grad_b / shards,
              "optimizer": trainable * adam_b / shards}
    tokens = work.micro_batch * work.seq_len
    if role in ("train", "lora"):
        per_layer = (arch.hidden if work.checkpointing else activation_values(arch)) * act_b
        one_layer = activation_values(arch) * act_b if work.checkpointing else 0
        memory["activations"] = tokens * (arch.layers * per_layer + one_layer)
    if arch.vocab and role != "generate":  # logits, and their fp32 log-softmax
        memory["logits"] = tokens * arch.vocab * (act_b + 4)
    q, kv = attention_widths(arch)
    if work.new_tokens and arch.vocab:
        memory["kv_cache"] = (work.micro_batch * (work.seq_len + work.new_tokens)
                              * 2 * arch.layers * kv * act_b)
    gpu = setup.gpu
    flops_per_token = {"train": 8 if work.checkpointing else 6, "lora": 4}.get(role, 2)
    compute = gpu.bf16_tflops * 1e12 * TRAIN_UTILISATION * setup.gpus
    seconds = 0.0
    if role != "generate":  # weights, and attention over the sequence (causal: half of it)
        attention = (2 if arch.vocab else 4) * arch.layers * work.seq_len * q
        seconds += (work.steps * flops_per_token / 2 * (2 * params + attention)
                    * work.batch * work.seq_len / compute)
    if work.new_tokens:  # one token per sequence per pass, reading weights and cache
        read = (params * (weight_b if role == "train" else frozen_b) / shards
                + memory.get("kv_cache", 0.0))
        per_token = max(read / (gpu.bandwidth_tbs * 1e12 * BANDWIDTH_UTILISATION),
                        2 * params * work.micro_batch
                        / (gpu.bf16_tflops * 1e12 * TRAIN_UTILISATION))
        passes = math.ceil(work.batch / (work.micro_batch * setup.gpus))
        seconds += work.steps * passes * work.new_tokens * per_token
    return Estimate(name, role, params, trainable, memory, seconds)


@dataclasses.dataclass
class Plan:
    paper: str
    gpu_name: str
    setup: Setup
    estimates: list[Estimate]
    note: str

    @property
    def peak_gib(self) -> float:
        """Every model of the run resident at once (the runs keep them loaded); a model with
        several workloads (trained, then sampled) counts each part at its largest."""
        parts: dict[str, dict[str, float]] = {}
        for e in self.estimates:
            model = parts.setdefault(e.model, {})
            for part, value in e.memory.items():
                model[part] = max(model.get(part, 0.0), value)
        return sum(sum(m.values()) for m in parts.values()) / GIB

    @property
    def hours(self) -> float:
        return sum(e.seconds for e in self.estimates) / 3600

    @property
    def fits(self) -> bool:
        return self.peak_gib <= HEADROOM * self.setup.gpu.memory_gib


def _models(cfg):
    """(label, arch) per workload of ``cfg.paper.plan``."""
    out = []
    for work in cfg.paper.plan.workloads:
        if work.arch is not None:
            out.append((work.model, work.arch))
            continue
        model = getattr(cfg, work.model, None)
        if model is None or getattr(model, "arch", None) is None:
            raise UserError(f"{cfg.paper.key}: paper.plan names {work.model}, which has no "
                            "arch block in its conf/model file")
        out.append((f"{work.model}: {model.name}", model.arch))
    return out


def make_plan(cfg, gpu_name: str, workloads=None, setup: Setup | None = None) -> Plan:
    """The plan of a composed config on ``gpu_name`` GPUs (``cfg.paper.plan`` sizes it;
    ``workloads`` and ``setup`` replace the preset's, to try a change)."""
    if gpu_name not in GPUS:
        raise did_you_mean("gpu", gpu_name, list(GPUS))
    spec = cfg.paper.plan
    if spec is None:
        raise UserError(f"{cfg.paper.key} scale={cfg.paper.scale} has no paper.plan: "
                        "add scale=paper")
    setup = setup or Setup(GPUS[gpu_name], spec.gpus, str(spec.precision), str(spec.sharding))
    workloads = spec.workloads if workloads is None else workloads
    estimates = [estimate(label, arch, work, setup)
                 for (label, arch), work in zip(_models(cfg), workloads, strict=True)]
    return Plan(cfg.paper.key, gpu_name, setup, estimates, spec.note)


def remedy(cfg, plan: Plan) -> str:
    """The first change, in order of what costs least, that makes ``plan`` fit: gradient
    checkpointing, a smaller micro-batch, sharding over more GPUs, LoRA."""
    works = list(cfg.paper.plan.workloads)
    trials = []
    if any(str(w.role) == "train" and not w.checkpointing for w in works):
        trials.append(("gradient checkpointing on (paper.plan.workloads[*].checkpointing=true)",
                       [dataclasses.replace(w, checkpointing=True) for w in works], plan.setup))
    for micro in (8, 4, 2, 1):
        if any(w.micro_batch > micro for w in works):
            trials.append((f"micro_batch at most {micro}", [
                dataclasses.replace(w, micro_batch=min(w.micro_batch, micro),
                                    checkpointing=w.checkpointing or str(w.role) == "train")
                for w in works], plan.setup))
    for gpus in (2, 4, 8, 16, 32, 64):
        if gpus > plan.setup.gpus:
            trials.append((f"fsdp over {gpus} GPUs", works,
                           dataclasses.replace(plan.setup, gpus=gpus, sharding="fsdp")))
    trials.append(("LoRA rank 64 instead of full fine-tuning", [
        dataclasses.replace(w, role="lora", lora_rank=64) if str(w.role) == "train" else w
        for w in works], plan.setup))
    for label, trial_works, setup in trials:
        trial = make_plan(cfg, plan.gpu_name, trial_works, setup)
        if trial.fits:
            return f"{label} ({trial.peak_gib:.0f} GiB)"
    return "a larger GPU (no single change above fits)"


def describe(plan: Plan) -> str:
    """The plan as the lines ``make plan`` prints."""
    s = plan.setup
    lines = [f"{plan.paper}: {s.gpus} x {plan.gpu_name}, {s.precision}, sharding {s.sharding}"]
    for e in plan.estimates:
        parts = ", ".join(f"{k} {v / GIB:.1f}" for k, v in e.memory.items() if v)
        trains = f", {e.trainable / 1e6:.1f}M trained" if e.trainable else ""
        lines.append(f"  {e.model} ({e.role}): {e.parameters / 1e9:.3f}B parameters{trains}; "
                     f"GiB per GPU: {parts} = {e.total / GIB:.1f}; {e.seconds / 3600:.2f} h")
    lines.append(f"  total: {plan.peak_gib:.1f} of {s.gpu.memory_gib:.0f} GiB per GPU "
                 f"(at most {HEADROOM:.0%} used); about {plan.hours:.1f} h on {s.gpus} GPUs "
                 f"({plan.hours * s.gpus:.1f} GPU-hours) at {TRAIN_UTILISATION:.0%} of peak "
                 f"FLOPs and {BANDWIDTH_UTILISATION:.0%} of memory bandwidth")
    if plan.note:
        lines.append(f"  note: {plan.note}")
    return "\n".join(lines)
