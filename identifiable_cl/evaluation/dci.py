"""DCI: disentanglement, completeness and informativeness (Eastwood & Williams, ICLR 2018).

For each true latent z_j a regressor predicts z_j from the whole representation h (N, d); the
importance R_ij ≥ 0 of representation dimension i for latent j fills an importance matrix
R (d, n). With P_ij = R_ij / Σ_k R_ik (row i as a distribution over the n latents) and
P̃_ij = R_ij / Σ_k R_kj (column j as a distribution over the d dimensions):

* disentanglement D_i = 1 − H_n(P_i·), entropy with logarithm base n, and D = Σ_i ρ_i D_i with
  the weights ρ_i = Σ_j R_ij / Σ_kj R_kj (a dimension that matters for nothing weighs nothing);
* completeness C_j = 1 − H_d(P̃_·j), entropy with logarithm base d, and C the uniform mean over
  the latents, as in the paper;
* informativeness: how well the regressor predicts each latent on held-out data. The paper
  reports the prediction error; here it is the normalised form, R²_j = 1 − MSE_j / Var(z_j) on
  the test pair (the definition of ``linear_r2``), and the uniform mean over the latents.

So D = C = 1 when every latent is captured by its own single representation dimension. The
pure computation from an importance matrix is ``dci_scores``; ``dci`` fits the regressors.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from dgp import checks
from identifiable_cl.evaluation import _inputs
from identifiable_cl.evaluation.records import DCIResult, DCIScores
from identifiable_cl.evaluation.regression import prepare, r2_scores

REGRESSORS = ("lasso", "gbt")
LASSO_ALPHA = 0.01
"""Default L1 strength of the lasso, in units where both h and each z_j have unit variance."""
LASSO_MAX_ITER = 10_000


def _entropy_complement(p: np.ndarray, base: int) -> float:
    """1 − H(p) / log(base) for a probability vector p (0 log 0 = 0), clipped to [0, 1]."""
    nz = p[p > 0.0]
    entropy = float(-(nz * np.log(nz)).sum()) / math.log(base)
    return min(1.0, max(0.0, 1.0 - entropy))


def _importance_matrix(importance: Any) -> np.ndarray:
    """``importance`` as a float64 array (d, n) of finite non-negative numbers."""
    try:
        r = np.asarray(importance.detach().cpu() if isinstance(importance, torch.Tensor) else importance,
                       dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"importance={importance!r} is invalid: expected a (d, n) array of numbers") from None
    if r.ndim != 2 or r.size == 0:
        raise ValueError(
            f"importance has shape {r.shape}: expected a non-empty 2-D array (representation dims, latents)"
        )
    bad = int((~np.isfinite(r)).sum())
    if bad:
        raise ValueError(f"importance contains {bad} NaN or infinite entries: all entries must be finite")
    negative = int((r < 0).sum())
    if negative:
        raise ValueError(f"importance contains {negative} negative entries: importances must be >= 0")
    return r


def dci_scores(importance: Any) -> DCIScores:
    """Disentanglement and completeness of an importance matrix (d, n).

    ``importance[i][j]`` ≥ 0 is the importance of representation dimension i for true latent j
    (any array-like of finite non-negative numbers). Conventions for the degenerate cases:

    * a dimension with zero importance for every latent (a dead dimension) has weight ρ_i = 0 and
      D_i = 0.0, so it does not change D;
    * a latent no dimension is important for has C_j = 0.0;
    * n = 1: every live dimension has D_i = 1 (an entropy of base 1 is undefined, and a dimension
      can only matter for the one latent); d = 1: every latent with non-zero importance has C_j = 1;
    * an all-zero matrix gives D = 0 (all weights 0) and C = 0.
    """
    r = _importance_matrix(importance)
    d, n = r.shape

    row_sums = r.sum(axis=1)
    total = float(row_sums.sum())
    per_dim, weights = [], []
    for i in range(d):
        if row_sums[i] <= 0.0:
            per_dim.append(0.0)
            weights.append(0.0)
            continue
        per_dim.append(1.0 if n == 1 else _entropy_complement(r[i] / row_sums[i], n))
        weights.append(float(row_sums[i]) / total)

    col_sums = r.sum(axis=0)
    per_factor = []
    for j in range(n):
        if col_sums[j] <= 0.0:
            per_factor.append(0.0)
        else:
            per_factor.append(1.0 if d == 1 else _entropy_complement(r[:, j] / col_sums[j], d))

    return DCIScores(
        disentanglement=float(sum(w * s for w, s in zip(weights, per_dim))),
        completeness=float(sum(per_factor) / n),
        disentanglement_per_dim=per_dim,
        dim_weights=weights,
        completeness_per_factor=per_factor,
    )


def _fit_lasso(x: np.ndarray, y: np.ndarray, alpha: float) -> tuple[np.ndarray, Any]:
    from sklearn.linear_model import Lasso  # scikit-learn is imported only when DCI is measured

    model = Lasso(alpha=alpha, max_iter=LASSO_MAX_ITER, selection="cyclic")
    model.fit(x, y)
    return np.abs(model.coef_), model


def _fit_gbt(x: np.ndarray, y: np.ndarray, n_estimators: int, max_depth: int, seed: int) -> tuple[np.ndarray, Any]:
    from sklearn.ensemble import GradientBoostingRegressor

    model = GradientBoostingRegressor(n_estimators=n_estimators, max_depth=max_depth, random_state=seed)
    model.fit(x, y)
    return np.asarray(model.feature_importances_, dtype=np.float64), model


def dci(
    z_fit: Any,
    h_fit: Any,
    z_test: Any = None,
    h_test: Any = None,
    *,
    in_sample: bool = False,
    regressor: str = "lasso",
    alpha: float = LASSO_ALPHA,
    n_estimators: int = 100,
    max_depth: int = 3,
    random_state: int = 0,
) -> DCIResult:
    """DCI scores of a representation h (N, d) for the true latents z (N, n).

    h is standardised with the fit sample's mean and standard deviation (a constant dimension
    becomes 0 and has no importance), and each latent z_j, standardised the same way, is
    regressed on it separately:

    * ``regressor="lasso"`` (default): scikit-learn's ``Lasso`` with the fixed L1 strength
      ``alpha`` (default 0.01) on the objective ‖y − X w‖² / (2N) + alpha ‖w‖₁; the importances are
      |w|. Since both sides have unit variance, alpha means the same for every latent: a
      dimension whose covariance with the residual of z_j (in these units) is at most alpha gets
      exactly zero importance. When one dimension predicts z_j exactly its coefficient shrinks to
      1 − alpha, which lowers that latent's R² by alpha².
    * ``regressor="gbt"``: scikit-learn's ``GradientBoostingRegressor`` with ``n_estimators``
      trees of depth ``max_depth`` (squared error, learning rate 0.1, seeded by ``random_state``);
      the importances are its ``feature_importances_`` (impurity decrease, normalised to sum 1
      for each latent). disentanglement_lib uses gradient-boosted classifiers of discretised
      latents with the same defaults; here the continuous latents are regressed.

    The importance matrix R (d, n) gives D and C as in ``dci_scores``. Informativeness is the R²
    of each latent's prediction on (z_test, h_test), or on the fit pair when ``in_sample=True``,
    and the uniform mean over the latents (the paper reports the prediction error; R² is it
    normalised by the variance of z_j). The regressors run on the CPU with scikit-learn (the
    lasso in float64; the trees split on float32 copies of h, as scikit-learn's trees do).
    """
    regressor = checks.choice("regressor", regressor, REGRESSORS)
    alpha = checks.positive("alpha", alpha)
    n_estimators = checks.integer("n_estimators", n_estimators, minimum=1)
    max_depth = checks.integer("max_depth", max_depth, minimum=1)
    random_state = checks.integer("random_state", random_state, minimum=0)
    zf, hf, zt, ht = prepare(z_fit, h_fit, z_test, h_test, in_sample, minimum_fit=10)

    x_fit, h_mean, h_scale = _inputs.standardise(hf)
    x_test = _inputs.standardise(ht, h_mean, h_scale)[0]
    y_fit, z_mean, z_scale = _inputs.standardise(zf)
    x_fit, x_test, y_fit = (a.cpu().numpy() for a in (x_fit, x_test, y_fit))

    columns, predictions = [], []
    for j in range(zf.shape[1]):
        if regressor == "lasso":
            weights, model = _fit_lasso(x_fit, y_fit[:, j], alpha)
        else:
            weights, model = _fit_gbt(x_fit, y_fit[:, j], n_estimators, max_depth, random_state)
        columns.append(weights)
        predictions.append(model.predict(x_test))
    importance = np.stack(columns, axis=1)

    predicted = torch.as_tensor(np.stack(predictions, axis=1), dtype=torch.float64)
    predicted = predicted.to(zt.device) * z_scale + z_mean
    informative = r2_scores(zt, predicted)
    scores = dci_scores(importance)
    return DCIResult(
        disentanglement=scores.disentanglement,
        completeness=scores.completeness,
        disentanglement_per_dim=scores.disentanglement_per_dim,
        dim_weights=scores.dim_weights,
        completeness_per_factor=scores.completeness_per_factor,
        informativeness=float(informative.mean()),
        informativeness_per_factor=informative.tolist(),
        importance=importance.tolist(),
        regressor=regressor,
    )
