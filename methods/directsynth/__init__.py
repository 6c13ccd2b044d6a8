"""Property-guided synthesis of direct planning heuristics (abstract 16): a typed STRIPS
grounder with negative preconditions, search (GBFS, hill climbing, h*), the directness
check with first-counterexample extraction, a counterexample-guided repair loop and the
sample-and-select baseline over one proposer interface (potential heuristics over
description-logic features, grammar synthesizer, transformers model, OpenAI-compatible
endpoint), and a sandbox for the generated programs."""

from methods.directsynth.evaluation import (
    direct_or_climbs,
    evaluate_on_test,
    perfect_is_direct,
    reference_plan_length,
)
from methods.directsynth.hostile import HOSTILE, run_hostile_suite
from methods.directsynth.potential import PotentialProposer
from methods.directsynth.proposers import (
    GOAL_COUNT,
    GrammarProposer,
    LanguageModelProposer,
    extract_program,
    format_counterexample,
    http_generator,
    transformers_generator,
)
from methods.directsynth.sandbox import ProgramError, SandboxedHeuristic, check_sandbox
from methods.directsynth.search import (
    Counterexample,
    check_direct,
    gbfs,
    hill_climb,
    perfect_heuristic,
    state_space,
    table_heuristic,
)
from methods.directsynth.strips import Task, ground, read_plan, validate_plan
from methods.directsynth.synthesis import (
    Limits,
    baseline_at_equal_quality,
    check_program,
    run_over_tasks,
    sample_and_select,
    synthesize_direct,
)

__all__ = [
    "Counterexample", "GOAL_COUNT", "GrammarProposer", "HOSTILE", "LanguageModelProposer",
    "Limits", "PotentialProposer", "ProgramError", "SandboxedHeuristic", "Task",
    "baseline_at_equal_quality", "check_direct", "check_program", "check_sandbox",
    "direct_or_climbs", "evaluate_on_test", "extract_program", "format_counterexample", "gbfs",
    "ground", "hill_climb", "http_generator", "perfect_heuristic", "perfect_is_direct",
    "read_plan", "reference_plan_length", "run_hostile_suite", "run_over_tasks",
    "sample_and_select", "state_space", "synthesize_direct", "table_heuristic",
    "transformers_generator", "validate_plan",
]
