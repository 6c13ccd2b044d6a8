"""Schemas of directsynth."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from omegaconf import MISSING

from experiments.schemas.shared import (
    DatasetConfig,
    MethodConfig,
    any_integer,
    nonnegative,
    positive,
    within,
)


class Sandbox(StrEnum):
    bwrap = "bwrap"  # bubblewrap + seccomp + uid nobody (methods/directsynth/isolation.py)
    unsafe_process = "unsafe_process"  # a plain subprocess: trusted programs only



class Proposer(StrEnum):
    potential = "potential"  # offline: potential heuristics over description-logic features
    grammar = "grammar"  # offline synthesizer over task features
    model = "model"  # a transformers model by name
    endpoint = "endpoint"  # an OpenAI-compatible chat endpoint


class RepairSearch(StrEnum):
    enumerate = "enumerate"  # the next enumerated program no counterexample refutes
    milp = "milp"  # integer weights satisfying every counterexample (HiGHS)



class TestSet(StrEnum):
    easy = "easy"  # the shipped easy test tasks
    larger = "larger"  # generated tasks larger than every training and easy test task
    both = "both"


class TrainingSet(StrEnum):
    ipc = "ipc"  # the shipped training tasks
    generated = "generated"  # generated at dataset.training_size (the cost-scaling sweep)


class Level(StrEnum):
    """IPC 2023 learning track difficulty folders."""

    easy = "easy"
    medium = "medium"
    hard = "hard"


@dataclass
class EndpointConfig:
    base_url: str = MISSING  # an OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1
    model: str = MISSING
    api_key: str = ""


@dataclass
class DirectSynthConfig(MethodConfig):
    proposer: Proposer = MISSING
    sandbox: Sandbox = MISSING  # where the generated programs run
    max_programs: int = within(1, None)  # budget of the counterexample loop per domain
    search: RepairSearch = MISSING  # grammar proposer: how a repair is found
    max_terms: int = MISSING  # grammar: terms of an enumerated weighted sum
    weights: list[int] = any_integer()  # grammar: weights of enumerated terms
    max_weight: int = MISSING  # grammar (milp) and potential: |weight| bound
    max_concept_complexity: int = within(1, None)  # potential: concept size bound
    sample_states: int = within(0, None)  # potential: training states with h* to fit
    max_features: int = within(1, None)  # potential: simplest features kept
    milp_nodes: int = within(1, None)  # potential: branch-and-bound nodes per weight solve
    milp_seconds: float = positive()  # potential: safety time limit of one weight solve
    relaxed_features: bool = MISSING  # potential: also h_add, h_max, h_FF, landmarks
    max_new_tokens: int = MISSING  # language-model proposers
    temperature: float = nonnegative()
    endpoint: EndpointConfig = field(default_factory=EndpointConfig)


@dataclass
class DirectsynthProtocol:
    baseline_programs: int = MISSING
    max_states: int = MISSING
    max_expansions: int = MISSING
    max_steps: int = MISSING
    perfect_max_states: int = MISSING
    larger_max_states: int = MISSING  # improving-closure states per larger test task
    reference_expansions: int = MISSING  # GBFS with h_FF, the reference plan on larger tasks
    timeout: float = positive()
    task_budget: float = positive()  # a program's seconds per task, in units of timeout
    run_budget: float = positive()  # a program's seconds per run (its tasks), in timeouts
    memory_mb: int = within(16, None)
    workers: int = within(1, None)  # processes for the domains (offline proposers only)


@dataclass
class Ipc2023Config(DatasetConfig):
    root: str | None = None  # None: the shipped copy
    domains: list[str] = MISSING
    training_level: Level = MISSING
    training_tasks: int = MISSING
    test_level: Level = MISSING
    test_tasks: int = MISSING
    test_set: TestSet = MISSING
    training_set: TrainingSet = MISSING
    training_size: int = within(1, None)  # generated training tasks: the generator's size


PROTOCOL = DirectsynthProtocol
METHODS = {"directsynth": DirectSynthConfig}
DATASETS = {"ipc2023": Ipc2023Config}
