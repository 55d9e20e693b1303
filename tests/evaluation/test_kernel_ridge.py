"""NystromRidge against a plain NumPy implementation of the same estimator and selection rule."""

import numpy as np
import pytest
import torch
from scipy.spatial.distance import cdist, pdist

from identifiable_cl.evaluation.kernel_ridge import NystromRidge

FACTORS = (0.5, 1.0)
RIDGES = (1e-1, 1e-3, 1e-5)


def data(n=240, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 2))
    noise = 0.1 * rng.normal(size=(n, 3))
    y = np.stack([np.sin(2 * x[:, 0]), x[:, 0] + 0.3 * x[:, 1] ** 2, 2 * x[:, 1] + np.tanh(x[:, 0])], 1) + noise
    return x, y


def affine(x, y, linear):
    if not linear:
        b = np.zeros((x.shape[1] + 1, y.shape[1]))
        b[0] = y.mean(0)
        return b
    x1 = np.hstack([np.ones((len(x), 1)), x])
    return np.linalg.lstsq(x1, y, rcond=None)[0]


def nystrom_fit(x, y, centres, gamma, alpha, b):
    """β of min ‖K_nm β − (y − [1, x] b)‖² + α βᵀ K_mm β."""
    k = np.exp(-gamma * cdist(x, centres, "sqeuclidean"))
    kmm = np.exp(-gamma * cdist(centres, centres, "sqeuclidean"))
    x1 = np.hstack([np.ones((len(x), 1)), x])
    return np.linalg.solve(k.T @ k + alpha * kmm, k.T @ (y - x1 @ b))


def nystrom_predict(x, centres, gamma, beta, b):
    x1 = np.hstack([np.ones((len(x), 1)), x])
    return x1 @ b + np.exp(-gamma * cdist(x, centres, "sqeuclidean")) @ beta


def reference_selection(x, y, seed, m):
    n = len(x)
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).numpy()
    x, y = x[perm], y[perm]
    n_val = round(0.2 * n)
    xv, yv, xt, yt = x[:n_val], y[:n_val], x[n_val:], y[n_val:]
    centres = xt[:m]
    scale = np.median(pdist(xt[:1000]))
    best = {}
    for linear in (False, True):
        b = affine(xt, yt, linear)
        for f in FACTORS:
            gamma = 1 / (2 * (f * scale) ** 2)
            for r in RIDGES:
                beta = nystrom_fit(xt, yt, centres, gamma, r * len(xt), b)
                mse = ((nystrom_predict(xv, centres, gamma, beta, b) - yv) ** 2).mean(0)
                for j, e in enumerate(mse):
                    if j not in best or e < best[j][0]:
                        best[j] = (e, linear, f * scale, r)
    return x, y, centres, [best[j] for j in range(y.shape[1])]


@pytest.mark.parametrize("seed", [0, 1])
def test_selection_and_refit_match_reference(seed):
    x, y = data(seed=seed)
    m = 20  # small enough that K_mm keeps every eigenvalue above the cutoff, so the Nyström solutions coincide
    model = NystromRidge(n_centres=m, bandwidth_factors=FACTORS, ridges=RIDGES, validation_fraction=0.2)
    model.fit(torch.tensor(x), torch.tensor(y), torch.Generator().manual_seed(seed))
    xs, ys, centres, choice = reference_selection(x, y, seed, m)
    np.testing.assert_allclose(model.centres.numpy(), centres)
    assert model.linear_part == [c[1] for c in choice]
    assert model.bandwidth == pytest.approx([c[2] for c in choice], rel=1e-12)
    assert model.ridge == pytest.approx([c[3] for c in choice], rel=1e-12)

    x_new, _ = data(n=50, seed=10 + seed)
    expected = np.zeros((50, y.shape[1]))
    for j, (_, linear, ell, r) in enumerate(choice):
        gamma = 1 / (2 * ell**2)
        b = affine(xs, ys[:, j : j + 1], linear)
        beta = nystrom_fit(xs, ys[:, j : j + 1], centres, gamma, r * len(xs), b)
        expected[:, j] = nystrom_predict(x_new, centres, gamma, beta, b)[:, 0]
    np.testing.assert_allclose(model.predict(torch.tensor(x_new)).numpy(), expected, rtol=0, atol=1e-5)


def test_exactly_linear_target_chooses_linear_part():
    x, _ = data(seed=3)
    w = np.array([[1.0], [-2.0]])
    y = x @ w + 0.5
    model = NystromRidge(n_centres=40, bandwidth_factors=FACTORS, ridges=RIDGES, validation_fraction=0.2)
    model.fit(torch.tensor(x), torch.tensor(y), torch.Generator().manual_seed(0))
    assert model.linear_part == [True]
    x_new, _ = data(n=30, seed=4)
    np.testing.assert_allclose(model.predict(torch.tensor(x_new)).numpy(), x_new @ w + 0.5, atol=1e-6)
