"""sparseshap: our Leverage SHAP vs shap's KernelExplainer at equal budget, same model and
explicands: wall time and relative error side by side (exact values from TreeSHAP)."""

from __future__ import annotations

import time

import numpy as np
import shap
from sklearn.ensemble import GradientBoostingRegressor

from data.tabular import load_tabular
from methods.sparseshap import CountingValueFunction, leverage_shap
from methods.sparseshap.games import explanation_game


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
