"""sparseshap, side by side in one process at equal budget: our Leverage SHAP vs shap's
KernelExplainer on a real model (wall time and relative error, exact values from TreeSHAP),
and Sparse Leverage SHAP vs Leverage SHAP on sparse games at n = 200 .. 1000 (wall time of
the estimator on a game that costs nothing to evaluate, and relative error)."""

from __future__ import annotations

import time

import numpy as np
import shap
from sklearn.ensemble import GradientBoostingRegressor

from data.tabular import load_tabular
from methods.sparseshap import CountingValueFunction, leverage_shap, sparse_leverage_shap
from methods.sparseshap.games import explanation_game, random_sparse_game


def sparse_vs_leverage() -> None:
    print("sparse game (s = 5), estimator time per call (median of 3) and median relative error")
    print(f"{'n':>6} {'m':>6} | {'Leverage s':>10} {'Sparse s':>9} {'time x':>7} | "
          f"{'Leverage err':>12} {'Sparse err':>10}")
    for n, m in ((200, 400), (1000, 1000), (1000, 2000)):
        times = {"leverage": [], "sparse": []}
        errors = {"leverage": [], "sparse": []}
        for rep in range(3):
            game = random_sparse_game(n, 5, np.random.default_rng([n, rep]))
            phi = game.shapley()
            for name, estimator in (("leverage", leverage_shap), ("sparse", sparse_leverage_shap)):
                start = time.perf_counter()
                est = estimator(CountingValueFunction(game, n), m, np.random.default_rng(rep))
                times[name].append(time.perf_counter() - start)
                errors[name].append(np.sum((est - phi) ** 2) / np.sum(phi**2))
        t_lev, t_sparse = np.median(times["leverage"]), np.median(times["sparse"])
        print(f"{n:>6} {m:>6} | {t_lev:>10.2f} {t_sparse:>9.2f} {t_sparse / t_lev:>6.1f}x | "
              f"{np.median(errors['leverage']):>12.2e} {np.median(errors['sparse']):>10.2e}")


def main() -> None:
    X, y = load_tabular("breast_cancer")
    n = X.shape[1]
    model = GradientBoostingRegressor(n_estimators=100, max_depth=4, random_state=0).fit(X, y)
    base = X.mean(axis=0)
    exact = shap.TreeExplainer(model, data=base[None, :])
    kernel = shap.KernelExplainer(model.predict, base[None, :])
    rng = np.random.default_rng(0)
    budget = 10 * n
    ours_t, theirs_t, ours_e, theirs_e = 0.0, 0.0, [], []
    for row in rng.choice(len(X), 10, replace=False):
        phi = exact.shap_values(X[row][None])[0]
        start = time.perf_counter()
        est = leverage_shap(CountingValueFunction(explanation_game(model.predict, X[row], base),
                                                  n), budget, rng)
        ours_t += time.perf_counter() - start
        start = time.perf_counter()
        theirs = kernel.shap_values(X[row][None], nsamples=budget, l1_reg=False, silent=True)[0]
        theirs_t += time.perf_counter() - start
        ours_e.append(np.sum((est - phi) ** 2) / np.sum(phi**2))
        theirs_e.append(np.sum((theirs - phi) ** 2) / np.sum(phi**2))
    print(f"breast_cancer (n={n}), budget {budget}, 10 explicands")
    print(f"  time   ours {ours_t:.3f}s  shap.KernelExplainer {theirs_t:.3f}s  "
          f"ratio {theirs_t / ours_t:.1f}x")
    print(f"  median relative error ours {np.median(ours_e):.2e}  shap {np.median(theirs_e):.2e}"
          f"  ratio {np.median(theirs_e) / np.median(ours_e):.1f}x")


if __name__ == "__main__":
    main()
    sparse_vs_leverage()
