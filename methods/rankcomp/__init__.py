"""Proportional compression of a collection of rankings (abstract 15).

A profile is an int array (n, m): row i lists voter i's candidates from best to worst. A
compression is k rankings (k, m) in the same format, each standing for n/k voters.
"""

from methods.rankcomp.algorithms import ALGORITHMS, BASELINES, compress
from methods.rankcomp.checkers import pairwise_ok, positional_ok, psc_ok

__all__ = ["ALGORITHMS", "BASELINES", "compress", "pairwise_ok", "positional_ok", "psc_ok"]
