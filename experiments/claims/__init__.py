"""Claims as data: the condition language (language.py), how seeds combine into a verdict
with its effect (verdicts.py) and the papers' metadata (papers.py). The runner, the sweep
summary and the report all import from here; this package imports none of them."""

from experiments.claims.language import ClaimSyntaxError, evaluate, metric_names, parse
from experiments.claims.papers import all_papers, is_default, paper_claims, paper_info
from experiments.claims.verdicts import (
    CONTRADICTED,
    HOLDS,
    INCONCLUSIVE,
    JUDGED,
    NOT_APPLICABLE,
    NOT_RUN,
    NOT_TESTED,
    PARTIAL,
    RULES,
    Effect,
    Verdict,
    check_claims,
    judge,
    paper_verdict,
    seeds_needed,
)

__all__ = [
    "CONTRADICTED", "HOLDS", "INCONCLUSIVE", "JUDGED", "NOT_APPLICABLE", "NOT_RUN",
    "NOT_TESTED", "PARTIAL", "RULES", "ClaimSyntaxError", "Effect", "Verdict", "all_papers",
    "check_claims", "evaluate", "is_default", "judge", "metric_names", "paper_claims",
    "paper_info", "paper_verdict", "parse", "seeds_needed",
]
