"""Symmetric eigendecomposition and least squares with an intercept, on the device of the data."""

from __future__ import annotations

import torch
from torch import Tensor

GRAM_CUTOFF = 1e-12


def symmetric_eig(a: Tensor) -> tuple[Tensor, Tensor]:
    """Eigenvalues (ascending) and eigenvectors of the symmetric matrix a, as torch.linalg.eigh.

    On the CPU the decomposition runs on one thread: LAPACK's multithreaded symmetric eigensolver
    slows down by orders of magnitude when other processes share the cores, and gains little when
    they do not.
    """
    if a.device.type != "cpu":
        return torch.linalg.eigh(a)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return torch.linalg.eigh(a)
    finally:
        torch.set_num_threads(threads)


def least_squares(x: Tensor, y: Tensor) -> Tensor:
    """Minimum-norm least-squares coefficients (d, p) for column-centred x (N, d) and y (N, p).

    Solved through the eigendecomposition of xᵀx; directions with eigenvalue below
    GRAM_CUTOFF · max are treated as null, so duplicated or constant columns get no weight.
    """
    w, v = symmetric_eig(x.T @ x)
    if float(w.max()) <= 0.0:
        return torch.zeros(x.shape[1], y.shape[1], dtype=x.dtype, device=x.device)
    keep = w > GRAM_CUTOFF * w.max()
    v = v[:, keep]
    return v @ ((v.T @ (x.T @ y)) / w[keep][:, None])


def affine_fit(x: Tensor, y: Tensor) -> Tensor:
    """Coefficients B (1 + d, p) of y ≈ [1, x] B by least squares; row 0 is the intercept."""
    x_mean, y_mean = x.mean(dim=0), y.mean(dim=0)
    coef = least_squares(x - x_mean, y - y_mean)
    return torch.cat([(y_mean - x_mean @ coef)[None], coef], dim=0)


def constant_fit(x: Tensor, y: Tensor) -> Tensor:
    """Coefficients B (1 + d, p) of the intercept-only model y ≈ mean(y)."""
    b = torch.zeros(1 + x.shape[1], y.shape[1], dtype=y.dtype, device=y.device)
    b[0] = y.mean(dim=0)
    return b


def with_intercept(x: Tensor) -> Tensor:
    """[1, x] of shape (N, 1 + d)."""
    return torch.cat([torch.ones(x.shape[0], 1, dtype=x.dtype, device=x.device), x], dim=1)
