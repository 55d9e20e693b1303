"""MCC after a linear unmixing: how the nonlinear-ICA papers score a representation.

TCL (Hyvärinen & Morioka 2016) and PCL (Hyvärinen & Morioka 2017) prove that the learnt features h recover the
sources s up to element-wise transforms *after a linear map*: TCL's features are a linear mixture of q(s_i)
(|s_i| or s_i² for its Laplace sources), PCL's score form gives h_i = f_i(s_i) and a general score a linear
mixture of them. The official TCL code therefore applies FastICA to the features before it matches them to the
sources (Hungarian matching of mean absolute Pearson correlations with |s|). This module does the same:

1. whiten the fit sample h_fit (N, d): μ = mean(h_fit), C = cov(h_fit) = V diag(λ) Vᵀ, keeping the k directions
   with λ > 1e-12 · max λ (:data:`identifiable_cl.evaluation.lstsq.GRAM_CUTOFF`, as the least-squares fits),
   w = diag(λ)^(-1/2) Vᵀ (h − μ), shape (N, k);
2. FastICA (scikit-learn's, the parallel algorithm with the log cosh contrast, as the TCL code's default) on
   the whitened fit sample, an orthogonal W (k, k); the unmixed components are u = W w, shape (N, k);
3. the MCC (:func:`identifiable_cl.evaluation.mcc.mcc`, Pearson or Spearman, Hungarian matching on −|corr|)
   between the target t(z) of the scoring sample and its unmixed components, t(z) = z (``target='sources'``)
   or t(z) = |z| (``target='abs'``, the absolute values about the latent space's origin, the centre of the
   zero-mean sources of TCL and PCL).

Why FastICA and not a least-squares map from h to t(z): the unmixing is fitted without the sources, as in the
papers, so a score near 1 needs h to be a linear mixture of independent components, each a function of one
source. A least-squares map fitted to t(z) would score 1 for any h from which t(z) is linearly decodable,
entangled or not: that is the linear R² of t(z), not an MCC. The price: FastICA separates non-Gaussian
components only, so latents that are Gaussian (the failure case of PCL's theorem) stay rotated among themselves,
as the theorem says they must. For the same reason a representation whose coordinates are each a monotone
function of one source but nearly Gaussian scores low even where the plain MCC is near 1: an encoder may
Gaussianize its marginals (in the smoke runs of the hyvarinen2017 experiment, InfoNCE behind 2 and 3 mixing layers
reaches a plain MCC of 0.985 and 0.967 with coordinates of excess kurtosis near −0.2, against the sources' 1.0,
and FastICA rotates them to 0.60 and 0.53), so read these scores beside the plain MCC. The FastICA start is
drawn from ``seed``, so a score is reproducible.

With ``in_sample=True`` the unmixing is fitted and scored on the fit sample. When h has more non-null
directions than z has dimensions (k > n), the matching takes the best n of the k components.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from identifiable_cl.evaluation import _inputs
from identifiable_cl.evaluation.lstsq import GRAM_CUTOFF, symmetric_eig
from identifiable_cl.evaluation.mcc import METHODS, mcc

TARGETS = ("sources", "abs")
"""What the unmixed components are matched to: the latents z themselves, or |z|."""
MAX_ITER = 1000
TOL = 1e-4


@dataclass(frozen=True)
class Unmixing:
    """A linear unmixing u = ``matrix`` (h − ``mean``), ``matrix`` (k, d), fitted by :func:`fit_unmixing`;
    ``iterations``: FastICA's iterations, ``converged``: whether it stopped below its tolerance."""

    mean: Tensor
    matrix: Tensor
    iterations: int
    converged: bool

    def __call__(self, h: Tensor) -> Tensor:
        """The unmixed components (N, k) of h (N, d)."""
        return (h - self.mean) @ self.matrix.T


@dataclass(frozen=True)
class UnmixedMCC:
    """MCC of t(z) and the unmixed components: ``mean`` over the n latents, ``per_dim`` (n,), ``matching`` as
    (latent dim, component) pairs, and whether the FastICA of the unmixing converged."""

    mean: float
    per_dim: list[float]
    matching: list[tuple[int, int]]
    converged: bool


def fit_unmixing(h_fit: Any, *, seed: int = 0, max_iter: int = MAX_ITER, tol: float = TOL) -> Unmixing:
    """Whitening then FastICA fitted on h_fit (N, d) (the module's steps 1 and 2); float64 on h's device.

    A representation without any varying direction (k = 0) gets an empty (0, d) unmixing.
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed={seed!r} is invalid: expected an integer >= 0")
    h = _inputs.matrix("h_fit", h_fit, _inputs.device_of(h_fit))
    _inputs.enough_samples("h_fit", h, h.shape[1] + 1, "whitening needs more samples than dimensions")
    mean = h.mean(dim=0)
    centred = h - mean
    eigenvalues, eigenvectors = symmetric_eig(centred.T @ centred / h.shape[0])
    top = float(eigenvalues.max())
    keep = eigenvalues > GRAM_CUTOFF * top if top > 0.0 else torch.zeros_like(eigenvalues, dtype=torch.bool)
    whiten = (eigenvectors[:, keep] / eigenvalues[keep].sqrt()).T  # (k, d)
    if whiten.shape[0] == 0:
        return Unmixing(mean, whiten, 0, True)
    from sklearn.decomposition import FastICA  # scikit-learn is imported only when these metrics are measured
    from sklearn.exceptions import ConvergenceWarning

    ica = FastICA(whiten=False, fun="logcosh", algorithm="parallel", max_iter=max_iter, tol=tol, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # reported as ``converged`` instead
        ica.fit((centred @ whiten.T).cpu().numpy())
    rotation = torch.as_tensor(np.asarray(ica.components_), dtype=torch.float64, device=h.device)
    return Unmixing(mean, rotation @ whiten, int(ica.n_iter_), int(ica.n_iter_) < max_iter)


def target_of(z: Tensor, target: str) -> Tensor:
    """t(z): z for ``'sources'``, |z| for ``'abs'``."""
    if target not in TARGETS:
        raise ValueError(f"target={target!r} is invalid: allowed {', '.join(map(repr, TARGETS))}")
    return z.abs() if target == "abs" else z


def unmixed_mcc(
    z_fit: Any,
    h_fit: Any,
    z_test: Any = None,
    h_test: Any = None,
    *,
    target: str = "sources",
    method: str = "pearson",
    in_sample: bool = False,
    seed: int = 0,
    unmixing: Unmixing | None = None,
) -> UnmixedMCC:
    """MCC between t(z) and the components of h unmixed by FastICA (the module's docstring), z (N, n), h (N, d).

    The unmixing is fitted on h_fit (or taken from ``unmixing``, one :func:`fit_unmixing` of h_fit) and scored
    on (z_test, h_test), or on the fit pair with ``in_sample=True``. ``target``: ``'sources'`` or ``'abs'``;
    ``method``: ``'pearson'`` or ``'spearman'``.
    """
    target_of(torch.zeros(1, 1), target)
    if method not in METHODS:
        raise ValueError(f"method={method!r} is invalid: allowed {', '.join(map(repr, METHODS))}")
    device = _inputs.device_of(h_fit, z_fit)
    zf, hf = _inputs.matrix("z_fit", z_fit, device), _inputs.matrix("h_fit", h_fit, device)
    _inputs.paired("z_fit", zf, "h_fit", hf)
    if in_sample:
        zs, hs = zf, hf
    else:
        if z_test is None or h_test is None:
            raise ValueError("z_test and h_test are missing: give the held-out pair, or in_sample=True")
        zs, hs = _inputs.matrix("z_test", z_test, device), _inputs.matrix("h_test", h_test, device)
        _inputs.paired("z_test", zs, "h_test", hs)
        _inputs.same_dims("z_fit", zf, "z_test", zs)
        _inputs.same_dims("h_fit", hf, "h_test", hs)
    unmixing = fit_unmixing(hf, seed=seed) if unmixing is None else unmixing
    if unmixing.matrix.shape[0] == 0:
        return UnmixedMCC(0.0, [0.0] * zs.shape[1], [], unmixing.converged)
    result = mcc(target_of(zs, target), unmixing(hs), method=method)
    return UnmixedMCC(result.mean, result.per_dim, result.matching, unmixing.converged)
