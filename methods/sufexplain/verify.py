"""Sound and exact minimisation of y * (sum of ReLU nets) over a box.

``interval_bounds`` propagates a box through a net (sound pre-activation bounds).
``milp_minimum`` encodes the nets exactly as a mixed-integer linear program (the big-M
encoding of every ReLU whose bounds straddle 0, from the interval bounds; stable ReLUs are
linear) and solves it with HiGHS through ``scipy.optimize.milp``. It returns the solver's
dual bound (a certified lower bound, equal to the minimum up to the gap ``mip_rel_gap``)
and the minimising input. HiGHS's presolve is off: on these programs (a few hundred rows,
every big-M already from the interval bounds) it costs time and removes little; the verdicts
are the same, the minima equal up to the solver's tolerances (docs/bench/sufexplain.txt).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import sparse
from scipy.optimize import Bounds, LinearConstraint, milp

from methods.sufexplain.networks import ReluNet


def interval_bounds(net: ReluNet, lo: np.ndarray, hi: np.ndarray
                    ) -> list[tuple[np.ndarray, np.ndarray]]:
    """Pre-activation bounds (l, u) of every hidden layer, for inputs in [lo, hi] (given for
    the net's own inputs)."""
    out, l_in, u_in = [], lo, hi
    for w, b in zip(net.weights[:-1], net.biases[:-1], strict=True):
        pos, neg = np.maximum(w, 0), np.minimum(w, 0)
        l_pre, u_pre = pos @ l_in + neg @ u_in + b, pos @ u_in + neg @ l_in + b
        out.append((l_pre, u_pre))
        l_in, u_in = np.maximum(l_pre, 0), np.maximum(u_pre, 0)
    return out


def interval_minimum(nets: list[ReluNet], sign: float, lo: np.ndarray, hi: np.ndarray) -> float:
    """A sound (loose) lower bound of sign * sum of nets over the box [lo, hi]."""
    total = 0.0
    for net in nets:
        idx = list(net.inputs)
        bounds = interval_bounds(net, lo[idx], hi[idx])
        l_in, u_in = ((np.maximum(bounds[-1][0], 0), np.maximum(bounds[-1][1], 0)) if bounds
                      else (lo[idx], hi[idx]))
        w, b = sign * net.weights[-1][0], sign * net.biases[-1][0]
        total += float(np.maximum(w, 0) @ l_in + np.minimum(w, 0) @ u_in + b)
    return total


@dataclass
class _Program:
    """Variables (cost, bounds, integrality) and constraint rows, built incrementally."""

    def __post_init__(self) -> None:
        self.cost, self.lo, self.hi, self.integer = [], [], [], []
        self.rows, self.cols, self.vals, self.row_lo, self.row_hi = [], [], [], [], []

    def variable(self, lo: float, hi: float, integer: bool = False) -> int:
        self.cost.append(0.0)
        self.lo.append(lo)
        self.hi.append(hi)
        self.integer.append(int(integer))
        return len(self.cost) - 1

    def constraint(self, coefficients: dict[int, float], lo: float, hi: float) -> None:
        row = len(self.row_lo)
        for col, val in coefficients.items():
            self.rows.append(row)
            self.cols.append(col)
            self.vals.append(val)
        self.row_lo.append(lo)
        self.row_hi.append(hi)


def milp_minimum(nets: list[ReluNet], sign: float, lo: np.ndarray, hi: np.ndarray,
                 mip_rel_gap: float = 1e-9, time_limit: float | None = None
                 ) -> tuple[float, np.ndarray]:
    """(certified lower bound of min sign * sum of nets over [lo, hi], a minimiser).

    ``lo``/``hi`` cover every model input (fixed inputs: lo = hi); the nets read them by
    index. The constant parts are added outside the program."""
    program = _Program()
    inputs = [program.variable(float(a), float(b)) for a, b in zip(lo, hi, strict=True)]
    constant = 0.0
    for net in nets:
        idx = list(net.inputs)
        previous = [inputs[i] for i in idx]
        for (w, b), (l_pre, u_pre) in zip(zip(net.weights[:-1], net.biases[:-1], strict=True),
                                          interval_bounds(net, lo[idx], hi[idx]), strict=True):
            layer = []
            for unit in range(w.shape[0]):
                pre = {v: float(c) for v, c in zip(previous, w[unit], strict=True)
                       if v is not None and c != 0}
                l, u = float(l_pre[unit]), float(u_pre[unit])
                if u <= 0:  # always off
                    layer.append(None)
                    continue
                y = program.variable(0.0, u)
                minus_pre = {v: -c for v, c in pre.items()}
                if l >= 0:  # always on: y = pre
                    program.constraint({y: 1.0, **minus_pre}, float(b[unit]), float(b[unit]))
                else:  # y >= pre, y <= pre - l (1 - a), y <= u a
                    a = program.variable(0.0, 1.0, integer=True)
                    program.constraint({y: 1.0, **minus_pre}, float(b[unit]), np.inf)
                    program.constraint({y: 1.0, **minus_pre, a: -l}, -np.inf, float(b[unit]) - l)
                    program.constraint({y: 1.0, a: -u}, -np.inf, 0.0)
                layer.append(y)
            previous = layer
        w_out, b_out = net.weights[-1][0], float(net.biases[-1][0])
        constant += sign * b_out
        for v, c in zip(previous, w_out, strict=True):
            if v is not None:
                program.cost[v] += sign * float(c)
    n = len(program.cost)
    constraints = []
    if program.row_lo:
        matrix = sparse.csr_array((program.vals, (program.rows, program.cols)),
                                  shape=(len(program.row_lo), n))
        constraints.append(LinearConstraint(matrix, program.row_lo, program.row_hi))
    options = {"mip_rel_gap": mip_rel_gap, "disp": False, "presolve": False}
    if time_limit is not None:
        options["time_limit"] = time_limit
    result = milp(np.array(program.cost), constraints=constraints,
                  integrality=np.array(program.integer), bounds=Bounds(program.lo, program.hi),
                  options=options)
    if result.x is None:
        raise RuntimeError(f"the verifier's MILP failed: {result.message}")
    bound = getattr(result, "mip_dual_bound", None)
    value = result.fun if bound is None or not np.isfinite(bound) else min(bound, result.fun)
    return float(value) + constant, np.asarray(result.x[:len(inputs)])
