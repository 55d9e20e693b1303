"""Nyström kernel ridge regression with an RBF kernel and per-output hyper-parameter selection.

For each output the model is f(x) = [1, x] B + Σ_c β_c k(x, x_c), k(a, b) = exp(-‖a − b‖²/(2ℓ²)),
over m centres x_c drawn from the training rows. The affine part B is either the mean alone
(plain kernel ridge, as in vK21) or the least-squares affine fit (the kernel part then models the
residual of linear regression); the coefficients β minimise the Nyström form of the kernel-ridge
objective ‖K_nm β − (y − [1, x] B)‖² + α βᵀ K_mm β. With K_mm = V W Vᵀ (eigenvalues below
1e-10 · max dropped) and T = V W^{-1/2} this is ridge regression on the features F = K_nm T:
β = T w, w = (FᵀF + αI)⁻¹ Fᵀ(y − [1, x] B).

Selection (per ``fit``, on the rows given to it only): the rows are shuffled with the caller's
generator and a fraction ``validation_fraction`` is held out; the centres are the first
m = min(n_centres, n_train) remaining rows; ℓ₀ is the median pairwise distance of up to 1000
remaining rows. For every length-scale ℓ = factor · ℓ₀, ridge α = ridge · n_train and affine part
(mean or linear, fitted on the training rows) the validation mean squared error of every output is
computed from one eigendecomposition of the training FᵀF per ℓ. Each output keeps its best triple,
and the model is refitted on all rows with the same centres and α = ridge · N.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from torch import Tensor

from identifiable_cl.evaluation.lstsq import affine_fit, constant_fit, symmetric_eig, with_intercept

CHUNK_ROWS = 4096
EIGEN_CUTOFF = 1e-10
MEDIAN_ROWS = 1000


def squared_distances(a: Tensor, b: Tensor) -> Tensor:
    """Pairwise squared Euclidean distances (N, M) between rows of a (N, d) and b (M, d)."""
    d = a.pow(2).sum(1)[:, None] + b.pow(2).sum(1)[None, :] - 2.0 * (a @ b.T)
    return d.clamp_min_(0.0)


def rbf_from_distances(d2: Tensor, gamma: float) -> Tensor:
    """exp(-γ d²) for a matrix of squared distances."""
    return torch.mul(d2, -gamma).exp_()


def median_distance(x: Tensor) -> float:
    """Median pairwise distance between distinct rows of x (N, d); 1.0 when it is 0."""
    iu = torch.triu_indices(x.shape[0], x.shape[0], offset=1, device=x.device)
    if iu.shape[1] == 0:
        return 1.0
    med = float(torch.quantile(squared_distances(x, x)[iu[0], iu[1]].sqrt(), 0.5))
    return med if med > 0.0 else 1.0


def inverse_root(kmm: Tensor) -> Tensor:
    """T = V W^{-1/2} over the eigenpairs of K_mm above EIGEN_CUTOFF · max eigenvalue, shape (m, r)."""
    w, v = symmetric_eig(kmm)
    keep = w > EIGEN_CUTOFF * w.max()
    return v[:, keep] / w[keep].sqrt()


def validation_rows(n: int, fraction: float) -> int:
    """How many of ``n`` rows the selection holds out: ``fraction`` of them, at least 1, leaving at least 2."""
    return min(n - 2, max(1, round(fraction * n)))


@dataclass
class _Moments:
    """FᵀF (r, r), Fᵀy (r, q) and Fᵀ[1, x] (r, 1 + d) of the Nyström features F over a set of rows.

    F = K(x, centres) T is formed explicitly, not through K_nmᵀK_nm: projecting the kernel's Gram
    matrix onto eigenvectors of K_mm with tiny eigenvalues would lose all precision there.
    """

    ftf: Tensor
    fty: Tensor
    ftx: Tensor

    @classmethod
    def of(cls, f: Tensor, y: Tensor, x1: Tensor) -> "_Moments":
        return cls(f.T @ f, f.T @ y, f.T @ x1)

    def __add__(self, other: "_Moments") -> "_Moments":
        return _Moments(self.ftf + other.ftf, self.fty + other.fty, self.ftx + other.ftx)


@dataclass
class _Component:
    gamma: float
    beta: Tensor
    outputs: Tensor


class NystromRidge:
    """Per-output RBF Nyström ridge regression; see the module docstring for the selection rule.

    After ``fit``: ``bandwidth`` (length-scale ℓ), ``ridge`` and ``linear_part`` (whether the
    affine part is the linear fit rather than the mean) hold the choice made for every output.
    """

    def __init__(
        self,
        *,
        n_centres: int,
        bandwidth_factors: Sequence[float],
        ridges: Sequence[float],
        validation_fraction: float,
    ):
        self.n_centres = n_centres
        self.bandwidth_factors = [float(f) for f in bandwidth_factors]
        self.ridges = [float(r) for r in ridges]
        self.validation_fraction = validation_fraction
        self.centres = torch.empty(0)
        self.affine = torch.empty(0)
        self.components: list[_Component] = []
        self.bandwidth: list[float] = []
        self.ridge: list[float] = []
        self.linear_part: list[bool] = []

    def fit(self, x: Tensor, y: Tensor, generator: torch.Generator) -> "NystromRidge":
        """Fit on standardised inputs x (N, d) and targets y (N, p), both float64 on one device."""
        n, p = x.shape[0], y.shape[1]
        perm = torch.randperm(n, generator=generator, device=generator.device).to(x.device)
        x, y = x[perm], y[perm]
        x1 = with_intercept(x)
        n_val = validation_rows(n, self.validation_fraction)
        n_train = n - n_val
        val, train = slice(0, n_val), slice(n_val, n)
        self.centres = x[train][: self.n_centres]
        scale = median_distance(x[train][:MEDIAN_ROWS])
        gammas = [1.0 / (2.0 * (f * scale) ** 2) for f in self.bandwidth_factors]
        roots = [inverse_root(rbf_from_distances(squared_distances(self.centres, self.centres), g)) for g in gammas]

        # candidate affine parts fitted on the training rows: columns [mean only (p) | linear (p)]
        b_train = torch.cat([constant_fit(x[train], y[train]), affine_fit(x[train], y[train])], dim=1)
        y2 = torch.cat([y, y], dim=1)
        target_val = y2[val] - x1[val] @ b_train
        moments = self._train_moments(x1[train], y2[train], gammas, roots)

        ridges = torch.tensor(self.ridges, dtype=x.dtype, device=x.device)
        best = torch.full((2 * p,), float("inf"), dtype=x.dtype, device=x.device)
        best_factor = torch.zeros(2 * p, dtype=torch.long, device=x.device)
        best_ridge = torch.zeros(2 * p, dtype=x.dtype, device=x.device)
        d_val = squared_distances(x[val], self.centres)
        for index, (gamma, t) in enumerate(zip(gammas, roots)):
            f_val = rbf_from_distances(d_val, gamma) @ t
            s, u = symmetric_eig(moments[index].ftf)
            b = u.T @ (moments[index].fty - moments[index].ftx @ b_train)
            shrink = 1.0 / (s.clamp_min(0.0)[None, :, None] + ridges[:, None, None] * n_train)
            pred = torch.einsum("vr,arq->avq", f_val @ u, b[None] * shrink)
            mse_min, arg = (pred - target_val[None]).pow(2).mean(dim=1).min(dim=0)
            better = mse_min < best
            best = torch.where(better, mse_min, best)
            best_factor = torch.where(better, torch.full_like(best_factor, index), best_factor)
            best_ridge = torch.where(better, ridges[arg], best_ridge)
            moments[index] = moments[index] + _Moments.of(f_val, y2[val], x1[val])

        outputs = torch.arange(p, device=x.device)
        linear = best[p:] < best[:p]
        choice = torch.where(linear, outputs + p, outputs)
        factor_of, ridge_of = best_factor[choice], best_ridge[choice]
        self.affine = torch.where(linear[None, :], affine_fit(x, y), constant_fit(x, y))
        self.components = []
        for index in factor_of.unique().tolist():
            mom, t = moments[index], roots[index]
            mine = (factor_of == index).nonzero().flatten()
            rhs = mom.fty[:, mine] - mom.ftx @ self.affine[:, mine]
            coef = torch.empty_like(rhs)
            eye = torch.eye(mom.ftf.shape[0], dtype=x.dtype, device=x.device)
            for ridge in ridge_of[mine].unique().tolist():
                cols = (ridge_of[mine] == ridge).nonzero().flatten()
                coef[:, cols] = torch.linalg.solve(mom.ftf + ridge * n * eye, rhs[:, cols])
            self.components.append(_Component(gammas[index], t @ coef, mine))
        self.bandwidth = [self.bandwidth_factors[i] * scale for i in factor_of.tolist()]
        self.ridge = ridge_of.tolist()
        self.linear_part = linear.tolist()
        return self

    def _train_moments(self, x1: Tensor, y: Tensor, gammas: list[float], roots: list[Tensor]) -> list[_Moments]:
        """Feature moments of every length-scale, accumulated over row chunks (distances computed once per chunk)."""
        out = [_Moments.of(y.new_zeros(0, t.shape[1]), y[:0], x1[:0]) for t in roots]  # zeros, of the right shapes
        for start in range(0, x1.shape[0], CHUNK_ROWS):
            rows = slice(start, start + CHUNK_ROWS)
            d2 = squared_distances(x1[rows, 1:], self.centres)
            for index, (gamma, t) in enumerate(zip(gammas, roots)):
                out[index] = out[index] + _Moments.of(rbf_from_distances(d2, gamma) @ t, y[rows], x1[rows])
        return out

    def predict(self, x: Tensor) -> Tensor:
        """Predictions (N, p) for standardised inputs x (N, d)."""
        out = with_intercept(x) @ self.affine
        for start in range(0, x.shape[0], CHUNK_ROWS):
            rows = slice(start, start + CHUNK_ROWS)
            d2 = squared_distances(x[rows], self.centres)
            for c in self.components:
                out[rows, c.outputs] += rbf_from_distances(d2, c.gamma) @ c.beta
        return out
