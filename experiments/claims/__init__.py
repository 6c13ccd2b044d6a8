"""Claims as data: the condition language (language.py), how seeds combine into a verdict
with its effect (verdicts.py), where a claim meets its runs (decide.py: every verdict the
report, a sweep summary or a job prints comes from there) and the papers' metadata
(papers.py). The runner, the sweep summary and the report all import from here; this
package imports none of them."""

from experiments.claims.decide import (
    FAILS,
    claim_metrics,
    judge_runs,
    rule_of,
    seed_condition,
)
from experiments.claims.language import ClaimSyntaxError, evaluate, metric_names, parse
from experiments.claims.papers import all_papers, is_default, paper_claims, paper_info
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
    "ClaimSyntaxError", "Effect", "PaperVerdict", "Verdict", "all_papers", "check_claims",
    "claim_metrics", "evaluate", "is_default", "judge", "judge_runs", "metric_names",
    "paper_claims", "paper_info", "paper_verdict", "parse", "rule_of", "seed_condition",
]
