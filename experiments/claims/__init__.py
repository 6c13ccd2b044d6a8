"""Claims as data: the condition language (language.py), how seeds combine into a verdict
with its effect (verdicts.py), where a claim meets its runs (decide.py: every verdict the
report, a sweep summary or a job prints comes from there), the one record of each paper
(papers.py), how many seeds a claim needs (power.py) and the study layer (study.py: the
preregistration, the seed plan, which records are evidence). The runner, the sweep summary
and the report import from here; from the runner this package reads only result files
(runner/results.py) and, for a claim's frozen hash, the composed configuration."""

from experiments.claims.decide import (
    FAILS,
    claim_metrics,
    judge_runs,
    rule_of,
    seed_condition,
)
from experiments.claims.language import ClaimSyntaxError, evaluate, metric_names, parse
from experiments.claims.papers import Paper, composed_claims, find_paper, is_default, papers
from experiments.claims.verdicts import (
    CONTRADICTED,
    EXPLORATORY,
    HOLDS,
    INCONCLUSIVE,
    JUDGED,
    MISSING,
    NOT_APPLICABLE,
    NOT_RUN,
    NOT_TESTED,
    PARTIAL,
    RULES,
    VERDICTS,
    Effect,
    PaperVerdict,
    Verdict,
    check_claims,
    judge,
    paper_verdict,
)

__all__ = [
    "CONTRADICTED", "EXPLORATORY", "FAILS", "HOLDS", "INCONCLUSIVE", "JUDGED", "MISSING",
    "NOT_APPLICABLE", "NOT_RUN", "NOT_TESTED", "PARTIAL", "RULES", "VERDICTS",
    "ClaimSyntaxError", "Effect", "PaperVerdict", "Verdict", "check_claims",
    "claim_metrics", "evaluate", "is_default", "judge", "judge_runs", "metric_names",
    "composed_claims", "find_paper", "papers", "Paper", "paper_verdict", "parse", "rule_of",
    "seed_condition",
]
