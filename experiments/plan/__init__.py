"""``make plan``: memory and time of a paper's setting before any weight is fetched
(``estimate.py``; ``python -m experiments.plan`` prints it)."""
