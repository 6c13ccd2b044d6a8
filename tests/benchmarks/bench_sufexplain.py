"""sufexplain: the verifier's MILP with HiGHS's presolve on (as before) and off (as now), side
by side in one process on the default's own queries: the NA2M and the plain MLP of the
default's planted task (seed 0; trained with the default's settings from a fixed seed), and
every sufficiency query the verifier baseline asks while explaining the first POINTS test
points. Both settings must give the same verdict on every query; the minima may differ only
in the last bits."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from scipy.optimize import milp as scipy_milp

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

POINTS = 12


def default_models():
    """The default's task at seed 0, and an NA2M and an MLP trained on it with the default's
    settings, exported for the verifier."""
    from conftest import compose_config

    from common.streams import Streams
    from data.binary_tabular import binary_task, select_edges
    from methods.sufexplain import AdditiveNet, MLPNet, train_classifier

    cfg = compose_config(["+paper=sufexplain"])
    protocol, method = cfg.protocol, cfg.method
    task = binary_task(cfg.dataset, Streams(0).numpy("task"))
    edges = select_edges(task.x_train, task.y_train, method.edges, method.max_component)
    n = task.x_train.shape[1]
    with Streams(0).torch_default("models"):  # the same models at every run of the benchmark
        nets = {"NA2M": AdditiveNet(n, edges, list(method.hidden)),
                "MLP": MLPNet(n, list(protocol.mlp_hidden))}
        for net in nets.values():
            train_classifier(net, task.x_train, task.y_train, protocol.epochs,
                             protocol.batch_size, protocol.lr, protocol.weight_decay,
                             protocol.output_penalty)
    return task, protocol.eps, {name: net.export() for name, net in nets.items()}


def baseline_queries(model, task, eps) -> list[tuple]:
    """(x, lo, hi, free set) of every query the verifier baseline asks on the first points,
    recorded while ``verix_explanation`` itself runs."""
    from methods.sufexplain import explain

    queries, worst_case = [], explain.worst_case

    def recording(model, x, free, lo, hi):
        queries.append((x, lo, hi, frozenset(free)))
        return worst_case(model, x, free, lo, hi)

    explain.worst_case = recording
    try:
        for x in task.x_test[:POINTS]:
            lo, hi = explain.perturbation_box(x, eps, task.domain_lo, task.domain_hi)
            explain.verix_explanation(model, x, lo, hi,
                                      explain.sensitivity_order(model, x, lo, hi))
    finally:
        explain.worst_case = worst_case
    return queries


def solve_all(model, queries, presolve: bool) -> tuple[float, list[float]]:
    """Seconds and minima of every query with HiGHS's presolve on or off."""
    from methods.sufexplain import verify
    from methods.sufexplain.explain import worst_case

    def milp(*args, options, **kwargs):
        return scipy_milp(*args, options={**options, "presolve": presolve}, **kwargs)

    verify.milp = milp
    try:
        start = time.perf_counter()
        values = [worst_case(model, x, set(free), lo, hi) for x, lo, hi, free in queries]
        return time.perf_counter() - start, values
    finally:
        verify.milp = scipy_milp


def main() -> None:
    task, eps, models = default_models()
    for name, model in models.items():
        queries = baseline_queries(model, task, eps)
        on, with_presolve = solve_all(model, queries, presolve=True)
        off, without = solve_all(model, queries, presolve=False)
        same = sum((a > 0) == (b > 0) for a, b in zip(with_presolve, without, strict=True))
        gap = max(abs(a - b) for a, b in zip(with_presolve, without, strict=True))
        print(f"{name} verifier baseline, {len(queries)} queries of the first {POINTS} points: "
              f"presolve on {on:.2f} s, off {off:.2f} s ({on / off:.2f}x); same verdict "
              f"{same} of {len(queries)}, largest difference of a minimum {gap:.1e}")
        if same != len(queries):
            raise SystemExit("a verdict differs between the two settings")


if __name__ == "__main__":
    main()
