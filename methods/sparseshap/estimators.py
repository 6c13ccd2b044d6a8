"""Kernel SHAP, Leverage SHAP and Sparse Leverage SHAP on a counting value function.

Each estimator spends at most ``budget`` evaluations, two of them on v(empty) and v(full),
and solves the constrained weighted regression with importance weights w(|z|) / p(z).
"""

from __future__ import annotations

import warnings

import numpy as np
from scipy.special import comb
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import OrthogonalMatchingPursuit, lars_path

from methods.sparseshap.games import CountingValueFunction
from methods.sparseshap.leverage import shapley_kernel, sparse_leverage_by_size
from methods.sparseshap.sampling import kernel_with_replacement, paired_without_replacement


def constrained_wls(Z: np.ndarray, y: np.ndarray, weights: np.ndarray, total: float,
                    columns: np.ndarray | None = None, ridge: float = 0.0) -> np.ndarray:
    """argmin sum_z weights_z (z^T phi - y_z)^2 + lam |P_t phi_T|^2 s.t. 1^T phi = total and
    phi = 0 off ``columns`` T (t = |T|, P_t = I - 11^T / t): phi_T = total / t + P_t x, x by
    least squares, minimum norm when under-determined, so small budgets never give NaN.
    lam = ridge * trace(X^T X) / t, X the weighted projected design: ``ridge`` is relative."""
    n = Z.shape[1]
    cols = np.arange(n) if columns is None else np.asarray(columns)
    t = len(cols)
    phi = np.zeros(n)
    if t == 0:
        return phi
    base = np.full(t, total / t)
    if t == 1 or len(y) == 0:
        phi[cols] = base
        return phi
    Zt = Z[:, cols].astype(float)
    sw = np.sqrt(weights)
    X = sw[:, None] * (Zt - Zt.mean(axis=1, keepdims=True))  # sqrt(W) Z_T P_t
    r = sw * (y - Zt @ base)
    if ridge > 0:  # x stays in the row space of X (inside range(P_t)), so |P_t x| = |x|
        lam = ridge * float(np.sum(X**2)) / t
        if len(r) < t:  # the dual form is the cheaper solve when rows are fewer
            x = X.T @ np.linalg.solve(X @ X.T + lam * np.eye(len(r)), r)
        else:
            x = np.linalg.solve(X.T @ X + lam * np.eye(t), X.T @ r)
    else:
        x, *_ = np.linalg.lstsq(X, r, rcond=None)
    phi[cols] = base + x - x.mean()
    return phi


def _endpoints(value: CountingValueFunction) -> tuple[float, float]:
    v = value(np.vstack([np.zeros(value.n), np.ones(value.n)]))
    return float(v[0]), float(v[1])


def kernel_shap(value: CountingValueFunction, budget: int, rng: np.random.Generator
                ) -> np.ndarray:
    """Kernel SHAP (Lundberg and Lee): sizes ~ Shapley kernel, with replacement, uniform
    regression weights (the kernel is in the sampling)."""
    v0, v1 = _endpoints(value)
    Z = kernel_with_replacement(value.n, budget, rng)
    y = value(Z) - v0 if len(Z) else np.zeros(0)
    return constrained_wls(Z, y, np.ones(len(Z)), v1 - v0)


def leverage_shap(value: CountingValueFunction, budget: int, rng: np.random.Generator,
                  size_weight: np.ndarray | None = None) -> np.ndarray:
    """Leverage SHAP (Musco and Witter): sizes uniform (their leverage), without replacement,
    paired with complements; weights w(s) / p(z)."""
    n = value.n
    v0, v1 = _endpoints(value)
    weights = np.ones(n - 1) if size_weight is None else size_weight
    Z, probs = paired_without_replacement(n, budget, weights, rng)
    if len(Z) == 0:
        return np.full(n, (v1 - v0) / n)
    y = value(Z) - v0
    return constrained_wls(Z, y, shapley_kernel(n, Z.sum(axis=1)) / probs, v1 - v0)


def sparse_leverage_shap(value: CountingValueFunction, budget: int, rng: np.random.Generator,
                         sparsity: int = 5, decoder: str = "lasso",
                         size_distribution: str = "sparse", mixture: float = 0.5,
                         ridge_rows_per_column: float = 2.0, penalty: float = 2.0,
                         cv_folds: int = 5) -> np.ndarray:
    """Sparse Leverage SHAP (RECON: the paper's exact rule is not public).

    Sampling: sizes proportional to their total sparse leverage C(n, s) tau_k(s) (k =
    ``sparsity``), ``size_distribution`` = "sparse", "dense" (Leverage SHAP's uniform) or
    "mixture" (``mixture`` sparse + rest dense); without replacement, paired.
    Decoding on the weighted system sqrt(w/p) (Z phi - y):

    - ``lasso``: refit the constrained least squares on supports along the LASSO (LARS) path
      (up to 16 sizes) and keep the one minimizing m log(RSS / m) + ``penalty`` |support|
      (AIC by default); then ``cv_folds``-fold cross-validation over complement pairs decides
      between that sparse fit and the dense fit on all players. Held-out weighted squared
      error estimates the regression objective, whose excess is the error in phi, so games
      that are only approximately sparse fall back to the dense fit when the data say so.
    - ``omp``: refit on ``sparsity`` OMP atoms.
    - ``none``: refit on all players (a sampling change only).

    Ridge is added when a support has fewer than ``ridge_rows_per_column`` rows per column.
    """
    n = value.n
    v0, v1 = _endpoints(value)
    k = min(max(1, sparsity), n - 1)
    sizes = np.arange(1, n)
    sparse_w = comb(n, sizes) * sparse_leverage_by_size(n, k)
    sparse_w = sparse_w / sparse_w.sum()
    dense_w = np.full(n - 1, 1.0 / (n - 1))
    weights = {"sparse": sparse_w, "dense": dense_w,
               "mixture": mixture * sparse_w + (1 - mixture) * dense_w}[size_distribution]
    Z, probs = paired_without_replacement(n, budget, weights, rng)
    if len(Z) == 0:
        return np.full(n, (v1 - v0) / n)
    y = value(Z) - v0
    w = shapley_kernel(n, Z.sum(axis=1)) / probs
    total = v1 - v0

    def refit(support: np.ndarray, rows: np.ndarray | slice = slice(None)) -> np.ndarray:
        m = len(y[rows])
        ridge = 1e-3 if m < ridge_rows_per_column * len(support) else 0.0
        return constrained_wls(Z[rows], y[rows], w[rows], total, support, ridge)

    everyone = np.arange(n)
    if decoder == "none":
        return refit(everyone)
    sw = np.sqrt(w / w.max())
    X, r = sw[:, None] * Z, sw * y
    if decoder == "omp":
        coef = OrthogonalMatchingPursuit(n_nonzero_coefs=min(k, len(y), n),
                                         fit_intercept=False).fit(X, r).coef_
        return refit(np.nonzero(np.abs(coef) > 1e-12)[0])
    if decoder != "lasso":
        raise ValueError(f"unknown decoder '{decoder}'; known: lasso, omp, none")
    with warnings.catch_warnings():  # paired complements make LARS warn on ties; harmless
        warnings.simplefilter("ignore", ConvergenceWarning)
        _, _, path = lars_path(X, r, method="lasso", max_iter=min(n, len(y)))
    by_size = {}
    for c in path.T:
        support = np.nonzero(np.abs(c) > 1e-12)[0]
        if 0 < len(support) <= len(y) // 2:
            by_size.setdefault(len(support), support)
    path_sizes = sorted(by_size)
    keep = sorted({path_sizes[int(i)] for i in
                   np.unique(np.geomspace(1, len(path_sizes), 16).astype(int) - 1)}
                  ) if path_sizes else []
    candidates = [by_size[t] for t in keep] + [everyone]
    fits = [refit(support) for support in candidates]

    def information_criterion(support: np.ndarray, phi: np.ndarray) -> float:
        rss = float(np.sum(w / w.max() * (Z @ phi - y) ** 2))
        return len(y) * np.log(max(rss, 1e-300) / len(y)) + penalty * len(support)

    best = int(np.argmin([information_criterion(support, phi)
                          for support, phi in zip(candidates, fits, strict=True)]))
    if len(candidates[best]) < n and cv_folds >= 2 and len(y) >= 2 * cv_folds:
        fold = rng.permutation(len(y) // 2) % cv_folds
        fold = np.repeat(fold, 2)  # rows 2i and 2i + 1 are complements: keep pairs together
        held_out = np.zeros(2)
        for f in range(cv_folds):
            train, test = fold != f, fold == f
            for j, support in enumerate((candidates[best], everyone)):
                residual = Z[test] @ refit(support, train) - y[test]
                held_out[j] += float(np.sum(w[test] * residual**2))
        if held_out[1] < held_out[0]:
            best = len(candidates) - 1
    return fits[best]


ESTIMATORS = {"kernel_shap": kernel_shap, "leverage_shap": leverage_shap,
              "sparse_leverage_shap": sparse_leverage_shap}

