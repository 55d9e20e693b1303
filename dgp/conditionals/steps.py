"""Density and information of additive steps z+ = z + δ, the coordinates of δ independent with densities
∝ exp(-|δ_i/λ_i|^p) (normal: λ_i = σ_i√2, p = 2; Laplace: p = 1), put into the space as the isotropic and
anisotropic conditionals put them: truncated per coordinate on the box, as they are on R^n, projected onto the
sphere (normal steps only)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from dgp.base import Marginal, Space
from dgp.information import (
    Information, box_step_information, gaussian_covariance, gaussian_information, log_gennorm, log_projected_normal,
)
from dgp.spaces import Box, Euclidean, Sphere


def log_step_density(space: Space, z_pos: Tensor, z: Tensor, scale: Tensor, p: float, centre: Tensor) -> Tensor:
    """log p(z+ | z), float64, for ``(..., n)`` inputs that broadcast; ``scale`` λ is ``(n,)`` float64.

    Box: the sum of the coordinates' truncated log-densities; R^n: the plain ones; sphere of radius r (p = 2
    only): the projected normal N(centre, diag(λ²/2)) on the unit sphere (``centre``: the point the conditional
    displaces before projecting, z or z/r) minus (n-1) log r, a density for the surface measure of that sphere.
    """
    if isinstance(space, Sphere):
        precision = (2.0 / scale**2).to(z.device)
        return log_projected_normal(z_pos, centre, precision) - (space.dim - 1) * math.log(space.radius)
    bounds = (space.low, space.high) if isinstance(space, Box) else ()
    return log_gennorm(z_pos, z.to(torch.float64), scale.to(z.device), p, *bounds).sum(-1)


def step_information(space: Space, marginal: Marginal, scale: Tensor, p: float) -> Information | None:
    """I(z; z+) where a closed form or quadrature exists, else None. ``scale`` λ: ``(n,)`` float64 on the CPU.

    Box with i.i.d. marginal coordinates (uniform or location-scale): Σ_i I₁(λ_i), one quadrature per distinct
    λ (:func:`dgp.information.box_step_information`). R^n with normal steps (p = 2) and a Gaussian marginal
    N(μ, Σ_z): ½ log det(I + Σ_z Σ_ε⁻¹), Σ_ε = diag(λ²/2).
    """
    if isinstance(space, Box):
        values, counts = torch.unique(scale, return_counts=True)
        ones = [box_step_information(marginal, space.low, space.high, v, p) for v in values.tolist()]
        if None not in ones:
            each = ", ".join(f"{c} × {one:.6g}" for c, one in zip(counts.tolist(), ones))
            note = f"Σ_i I₁ over the {space.dim} independent coordinates ({each}), each I₁ by Gauss–Legendre quadrature"
            return Information(sum(c * one for c, one in zip(counts.tolist(), ones)), None, "quadrature", note)
    if isinstance(space, Euclidean) and p == 2.0:
        cov = gaussian_covariance(marginal)
        if cov is not None:
            note = "½ log det(I + Σ_z Σ_ε⁻¹) for the Gaussian marginal N(μ, Σ_z) and steps N(0, Σ_ε)"
            return Information(gaussian_information(cov, torch.diag(0.5 * scale**2)), None, "closed form", note)
    return None
