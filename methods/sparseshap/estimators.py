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
                    columns: np.ndarray | None = None, ridge: float = 0.0,
                    absolute_ridge: float = 0.0) -> np.ndarray:
    """argmin sum_z weights_z (z^T phi - y_z)^2 + lam |P_t phi_T|^2 s.t. 1^T phi = total and
    phi = 0 off ``columns`` T (t = |T|, P_t = I - 11^T / t): phi_T = total / t + P_t x, x by
    least squares, minimum norm when under-determined, so small budgets never give NaN.
    lam = ridge * trace(X^T X) / t + absolute_ridge, X the weighted projected design."""
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
    Zt = np.asarray(Z if t == n else Z[:, cols], dtype=float)  # no copy when all, float
    sw = np.sqrt(weights)
    X = sw[:, None] * (Zt - Zt.mean(axis=1, keepdims=True))  # sqrt(W) Z_T P_t
    r = sw * (y - Zt @ base)
    if ridge > 0 or absolute_ridge > 0:  # x stays in range(P_t), so |P_t x| = |x|
        lam = ridge * float(np.sum(X**2)) / t + absolute_ridge
        if len(r) < t:  # the dual form is the cheaper solve when rows are fewer
            x = X.T @ np.linalg.solve(X @ X.T + lam * np.eye(len(r)), r)
        else:
            x = np.linalg.solve(X.T @ X + lam * np.eye(t), X.T @ r)
    else:
        x, *_ = np.linalg.lstsq(X, r, rcond=None)
    phi[cols] = base + x - x.mean()
    return phi


def leverage_ridge(n: int) -> float:
    """The ridge of the official Leverage SHAP code (rtealwitter/leverageshap), 1e-3 on its
    normal equations, which it adds whenever rows <= 3 n; our kernel carries an extra factor
    (n - 1), so the same ridge here is 1e-3 (n - 1)."""
    return 1e-3 * (n - 1)


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
    system = WeightedSystem(Z, y, shapley_kernel(n, Z.sum(axis=1)) / probs, v1 - v0)
    return system.dense_fit()


def size_distribution_weights(n: int, sparsity: int, size_distribution: str,
                              mixture: float) -> np.ndarray:
    """Probability of each coalition size 1..n-1: "sparse" (proportional to the total
    sparse leverage C(n, s) tau_k(s)), "dense" (Leverage SHAP's uniform) or "mixture"."""
    sizes = np.arange(1, n)
    sparse_w = comb(n, sizes) * sparse_leverage_by_size(n, sparsity)
    sparse_w = sparse_w / sparse_w.sum()
    dense_w = np.full(n - 1, 1.0 / (n - 1))
    options = {"sparse": sparse_w, "dense": dense_w,
               "mixture": mixture * sparse_w + (1 - mixture) * dense_w}
    if size_distribution not in options:
        raise ValueError(f"unknown size distribution '{size_distribution}'; known: "
                         + ", ".join(options))
    return options[size_distribution]


MAX_SPARSE_SUPPORT = 64  # the LASSO path is followed up to this many players


def lasso_path_supports(X: np.ndarray, r: np.ndarray, max_sizes: int = 16) -> list[np.ndarray]:
    """Supports along the LASSO (LARS) path of r ~ X: the first of each size up to half the
    rows and ``MAX_SPARSE_SUPPORT``, at most ``max_sizes`` sizes spread geometrically. The
    path's cost grows with its length (at n = 1000 and 2000 rows the whole path took 2.4 s
    of 3.3); a game with a larger support is not sparse in the sense of the method, and the
    dense fit serves it."""
    steps = min(X.shape[1], len(r), 2 * MAX_SPARSE_SUPPORT)  # LASSO steps may also drop
    with warnings.catch_warnings():  # paired complements make LARS warn on ties; harmless
        warnings.simplefilter("ignore", ConvergenceWarning)
        try:
            _, _, path = lars_path(X, r, method="lasso", max_iter=steps)
        except ValueError:
            # scikit-learn's LASSO modification fails on some rank-deficient paired designs
            # (after a drop, its active set and coefficients fall out of step; one seed of
            # the default hit it); the LAR path never drops and gives nested supports
            _, _, path = lars_path(X, r, method="lar", max_iter=steps)
    by_size: dict[int, np.ndarray] = {}
    for c in path.T:
        support = np.nonzero(np.abs(c) > 1e-12)[0]
        if 0 < len(support) <= min(len(r) // 2, MAX_SPARSE_SUPPORT):
            by_size.setdefault(len(support), support)
    sizes = sorted(by_size)
    if not sizes:
        return []
    picks = np.unique(np.geomspace(1, len(sizes), max_sizes).astype(int) - 1)
    return [by_size[sizes[int(i)]] for i in sorted(set(picks))]


class WeightedSystem:
    """The sampled regression: rows Z (coalitions, complement pairs in rows 2i, 2i + 1),
    targets y = v(z) - v(empty), weights w = kernel / p(z), and the efficiency total
    v(full) - v(empty)."""

    def __init__(self, Z: np.ndarray, y: np.ndarray, w: np.ndarray, total: float,
                 ridge_rows_per_column: float = 2.0) -> None:
        self.Z, self.y, self.w, self.total = np.asarray(Z, dtype=float), y, w, total
        self.ridge_rows_per_column = ridge_rows_per_column
        self.dense_ridge = 0.0  # set by dense_fit

    def refit(self, support: np.ndarray, rows: np.ndarray | slice = slice(None)
              ) -> np.ndarray:
        """Constrained least squares on ``support``: a relative ridge when rows per column
        are few; on all players the ridge ``dense_fit`` chose."""
        m = len(self.y[rows])
        if len(support) == self.Z.shape[1]:
            return constrained_wls(self.Z[rows], self.y[rows], self.w[rows], self.total,
                                   support, absolute_ridge=self.dense_ridge)
        ridge = 1e-3 if m < self.ridge_rows_per_column * len(support) else 0.0
        return constrained_wls(self.Z[rows], self.y[rows], self.w[rows], self.total, support,
                               ridge)

    def dense_fit(self) -> np.ndarray:
        """The fit on all players (Leverage SHAP). Where the official code adds its ridge
        (rows <= 3 n), generalized cross-validation (Golub, Heath and Wahba) chooses between
        that ridge and none: near m = 2n the paired design has about as many distinct
        directions as unknowns, the interpolation peak where the unregularised solve blows
        up (median relative error 8.4 at m = 2n, n = 200), while at m = 3n the ridge costs
        3x. GCV sees the peak on the full sample, where K-fold cross-validation, fitting on
        fewer rows, does not."""
        n = self.Z.shape[1]
        pairs = len(self.y) // 2
        if pairs < n:  # the unregularised fit interpolates the pairs: GCV(0) is infinite
            self.dense_ridge = leverage_ridge(n)
        elif len(self.y) <= 3 * n:
            options = [0.0, leverage_ridge(n)]
            self.dense_ridge = options[int(np.argmin([self.gcv(lam) for lam in options]))]
        return self.refit(np.arange(n))

    def gcv(self, lam: float) -> float:
        """GCV(lam) = RSS / (1 - df / p)^2 of the ridge fit on all players, over the p
        complement pairs (a pair's two rows are one direction: P(1 - z) = -P z, equal
        weights), df = sum of eigenvalue / (eigenvalue + lam) of the Gram matrix."""
        n = self.Z.shape[1]
        base = np.full(n, self.total / n)
        sw = np.sqrt(self.w)
        X = sw[:, None] * (self.Z - self.Z.mean(axis=1, keepdims=True))
        r = sw * (self.y - self.Z @ base)
        eigenvalues, vectors = np.linalg.eigh(X.T @ X)
        keep = eigenvalues > 1e-10 * max(eigenvalues.max(), 1e-300)
        eigenvalues, vectors = eigenvalues[keep], vectors[:, keep]
        x = vectors @ ((vectors.T @ (X.T @ r)) / (eigenvalues + lam))
        pairs = len(self.y) // 2
        difference = (r[0::2] - r[1::2]) / 2 - X[0::2] @ x  # the part a fit can explain
        df = float(np.sum(eigenvalues / (eigenvalues + lam)))
        if df >= pairs:
            return float("inf")
        return float(np.sum(difference**2)) / (1 - df / pairs) ** 2

    def information_criterion(self, support: np.ndarray, phi: np.ndarray,
                              penalty: float) -> float:
        """m log(RSS / m) + penalty |support| (AIC for penalty 2)."""
        rss = float(np.sum(self.w / self.w.max() * (self.Z @ phi - self.y) ** 2))
        return len(self.y) * np.log(max(rss, 1e-300) / len(self.y)) + penalty * len(support)

    def held_out_errors(self, supports: list[np.ndarray], folds: int,
                        rng: np.random.Generator) -> np.ndarray:
        """(supports, pairs) ``folds``-fold cross-validated weighted squared error of each
        support's refit on each complement pair (rows 2i and 2i + 1 stay in one fold)."""
        pairs = len(self.y) // 2
        fold = rng.permutation(pairs) % folds
        errors = np.zeros((len(supports), pairs))
        for f in range(folds):
            train, test = np.repeat(fold != f, 2), np.repeat(fold == f, 2)
            for j, support in enumerate(supports):
                residual = self.Z[test] @ self.refit(support, train) - self.y[test]
                errors[j, fold == f] = (self.w[test] * residual**2).reshape(-1, 2).sum(1)
        return errors


MIN_PAIRS_TO_CHOOSE = 12
CHOICE_T = 2.0  # above the one-sided 5% point of a paired t-test with 12 pairs (1.80)


def sparse_leverage_shap(value: CountingValueFunction, budget: int, rng: np.random.Generator,
                         sparsity: int = 5, decoder: str = "lasso",
                         size_distribution: str = "dense", mixture: float = 0.5,
                         ridge_rows_per_column: float = 2.0, penalty: float = 2.0,
                         cv_folds: int = 5) -> np.ndarray:
    """Sparse Leverage SHAP (RECON: the paper's exact rule is not public).

    Sampling: sizes from ``size_distribution_weights`` (k = ``sparsity``), without
    replacement, paired; the default "dense" draws exactly Leverage SHAP's sample, so that
    its fallback below is Leverage SHAP itself. Decoding on the weighted system
    sqrt(w/p) (Z phi - y):

    - ``lasso``: refit the constrained least squares on supports along the LASSO (LARS) path
      and keep the one minimizing m log(RSS / m) + ``penalty`` |support| (AIC by default);
      the sparse fit replaces the dense fit on all players only when ``cv_folds``-fold
      cross-validation over complement pairs shows it clearly better (a paired t statistic
      over the pairs' held-out errors above ``CHOICE_T``, with at least
      ``MIN_PAIRS_TO_CHOOSE`` pairs). Held-out weighted squared error estimates the
      regression objective, whose excess is the error in phi; requiring clear evidence keeps
      the estimator within a few percent of Leverage SHAP on games that are not sparse
      (a plain "lower held-out error" rule was up to 2.7x worse at m = n .. 2n), while sparse
      games keep their 10-100x gain.
    - ``omp``: refit on ``sparsity`` OMP atoms.
    - ``none``: refit on all players (a sampling change only).

    Ridge is added when a support has fewer than ``ridge_rows_per_column`` rows per column.
    """
    n = value.n
    v0, v1 = _endpoints(value)
    k = min(max(1, sparsity), n - 1)
    weights = size_distribution_weights(n, k, size_distribution, mixture)
    Z, probs = paired_without_replacement(n, budget, weights, rng)
    if len(Z) == 0:
        return np.full(n, (v1 - v0) / n)
    y = value(Z) - v0
    system = WeightedSystem(Z, y, shapley_kernel(n, Z.sum(axis=1)) / probs, v1 - v0,
                            ridge_rows_per_column)
    everyone = np.arange(n)
    if decoder == "none":
        return system.dense_fit()
    sw = np.sqrt(system.w / system.w.max())
    X, r = sw[:, None] * Z, sw * y
    if decoder == "omp":
        coef = OrthogonalMatchingPursuit(n_nonzero_coefs=min(k, len(y), n),
                                         fit_intercept=False).fit(X, r).coef_
        return system.refit(np.nonzero(np.abs(coef) > 1e-12)[0])
    if decoder != "lasso":
        raise ValueError(f"unknown decoder '{decoder}'; known: lasso, omp, none")
    if cv_folds < 2 or len(y) // 2 < MIN_PAIRS_TO_CHOOSE:
        return system.dense_fit()  # too few pairs for the sparse fit to earn its place
    candidates = [*lasso_path_supports(X, r), everyone]
    fits = [system.refit(support) for support in candidates[:-1]] + [system.dense_fit()]
    best = int(np.argmin([system.information_criterion(support, phi, penalty)
                          for support, phi in zip(candidates, fits, strict=True)]))
    if len(candidates[best]) == n:
        return fits[best]
    errors = system.held_out_errors([candidates[best], everyone], cv_folds, rng)
    return fits[best] if clearly_better(errors[0], errors[1]) else fits[-1]


def clearly_better(sparse: np.ndarray, dense: np.ndarray) -> bool:
    """Whether the sparse fit's held-out errors per complement pair are lower than the dense
    fit's by a paired t statistic above ``CHOICE_T``: the sparse fit has to earn its place,
    so that a game that is not sparse keeps the dense (Leverage SHAP) fit."""
    difference = dense - sparse
    spread = difference.std(ddof=1)
    if spread == 0:
        return bool(difference.mean() > 0)
    return bool(difference.mean() / (spread / np.sqrt(len(difference))) > CHOICE_T)


ESTIMATORS = {"kernel_shap": kernel_shap, "leverage_shap": leverage_shap,
              "sparse_leverage_shap": sparse_leverage_shap}

