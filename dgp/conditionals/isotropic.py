"""Isotropic positives z+ = z + δ with i.i.d. coordinates of δ (Z21's normal, Laplace and generalized normal).

How the space is respected:
- R^n: z+ = z + δ as is;
- sphere of radius r: z+ = r·(z + δ)/‖z + δ‖ (drawn in R^n and projected back);
- box [low, high]^n: each coordinate z+_i is drawn from the 1-D law centred at z_i truncated exactly to
  [low, high] (:mod:`dgp.truncation`).

Z21's default conditional parameter is 0.05, the default of every scale here.

Each step law has density ∝ exp(-|δ_i/λ|^p) per coordinate (the normal: λ = σ√2, p = 2; Laplace: p = 1), which
gives p(z+ | z) in closed form on the box and on R^n, and, for the normal only, on the sphere (a projected
normal); :meth:`_Isotropic.mutual_information` uses quadrature on the box and the Gaussian closed form on R^n.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from dgp import checks, truncation
from dgp.base import Conditional, Marginal
from dgp.conditionals import CONDITIONALS
from dgp.conditionals.steps import log_step_density, step_information
from dgp.information import Information
from dgp.spaces import Box, Sphere

DEFAULT_SCALE = 0.05


class _Isotropic(Conditional):
    """Shared sampling and densities; subclasses define the plain draw ``_around(z, generator)``, the truncated
    one ``_truncated(z, low, high, generator)`` and the step law ``_step()``."""

    def __init__(self, space):
        super().__init__()
        self.space = space

    def sample(self, z: Tensor, generator: torch.Generator) -> Tensor:
        """``(B, n)`` positives around the anchors ``z`` ``(B, n)``, in the space."""
        if isinstance(self.space, Box):
            return self._truncated(z, self.space.low, self.space.high, generator)
        return self.space.project(self._around(z, generator))

    def _step(self) -> tuple[float, float]:
        """``(λ, p)``: each coordinate of the step has density ∝ exp(-|δ_i/λ|^p)."""
        raise NotImplementedError

    def _no_density(self) -> str | None:
        """Why p(z+ | z) has no tractable form here, or None where it has one."""
        if isinstance(self.space, Sphere) and self._step()[1] != 2.0:
            return "this step projected onto the sphere has no tractable density p(z+|z) (only the normal's is known)"
        return None

    def _scales(self) -> Tensor:
        """λ of every coordinate, ``(n,)`` float64 on the CPU."""
        return torch.full((self.space.dim,), self._step()[0], dtype=torch.float64)

    def log_density(self, z_pos: Tensor, z: Tensor) -> Tensor:
        """log p(z+ | z), float64, for ``(..., n)`` inputs that broadcast (:func:`dgp.conditionals.steps.
        log_step_density`; on the sphere the projected normal of z + δ); a ValueError where it is intractable."""
        reason = self._no_density()
        if reason is not None:
            raise ValueError(reason)
        return log_step_density(self.space, z_pos, z, self._scales(), self._step()[1], z)

    def mutual_information(self, marginal: Marginal, **options: Any) -> Information:
        """I(z; z+) in nats (:meth:`dgp.base.Conditional.mutual_information`): the quadrature on the box or the
        Gaussian closed form on R^n of :func:`dgp.conditionals.steps.step_information`; otherwise Monte Carlo
        where p(z+|z) is tractable (``options``: a ``generator`` and the sizes ``n``, ``m``), else not available."""
        found = step_information(self.space, marginal, self._scales(), self._step()[1])
        if found is not None:
            return found
        reason = self._no_density()
        if reason is not None:
            return Information.unavailable(reason)
        return super().mutual_information(marginal, **options)

    def _where(self) -> str:
        if isinstance(self.space, Box):
            return f", truncated per coordinate to [{self.space.low:g}, {self.space.high:g}]"
        if isinstance(self.space, Sphere):
            return f", projected back to the sphere of radius {self.space.radius:g}"
        return ""


@CONDITIONALS.register("normal")
class NormalConditional(_Isotropic):
    """z+ = z + δ, δ ~ N(0, σ² I). Option ``sigma`` (> 0, default 0.05)."""

    OPTION_DOCS = {
        'sigma': "standard deviation σ > 0 of each coordinate's step",
    }

    def __init__(self, space, rng: torch.Generator | None = None, *, sigma: float = DEFAULT_SCALE):
        super().__init__(space)
        self.sigma = checks.positive("sigma", sigma)

    def _step(self) -> tuple[float, float]:
        return math.sqrt(2.0) * self.sigma, 2.0

    def _around(self, z: Tensor, generator: torch.Generator) -> Tensor:
        return truncation.normal(z, self.sigma, generator)

    def _truncated(self, z: Tensor, low: float, high: float, generator: torch.Generator) -> Tensor:
        return truncation.truncated_normal(z, self.sigma, low, high, generator, check=False)

    def describe(self) -> str:
        return f"normal around z with sigma={self.sigma:g}{self._where()}"


@CONDITIONALS.register("laplace")
class LaplaceConditional(_Isotropic):
    """z+ = z + δ, δ_i ~ Laplace(0, λ), density ∝ exp(-|δ_i|/λ).

    Option ``scale`` (> 0, default 0.05) is λ; it is called ``scale`` because ``lambda`` is a Python keyword.
    """

    OPTION_DOCS = {
        'scale': "λ > 0 of each coordinate's step, density ∝ exp(-|x|/λ)",
    }

    def __init__(self, space, rng: torch.Generator | None = None, *, scale: float = DEFAULT_SCALE):
        super().__init__(space)
        self.scale = checks.positive("scale", scale)

    def _step(self) -> tuple[float, float]:
        return self.scale, 1.0

    def _around(self, z: Tensor, generator: torch.Generator) -> Tensor:
        return truncation.laplace(z, self.scale, generator)

    def _truncated(self, z: Tensor, low: float, high: float, generator: torch.Generator) -> Tensor:
        return truncation.truncated_laplace(z, self.scale, low, high, generator, check=False)

    def describe(self) -> str:
        return f"Laplace around z with scale (lambda)={self.scale:g}{self._where()}"


@CONDITIONALS.register("gennorm")
class GenNormConditional(_Isotropic):
    """z+ = z + δ, δ_i with density ∝ exp(-|δ_i/λ|^p) (scipy.stats.gennorm(p, 0, λ)).

    Options ``scale`` (λ > 0, default 0.05) and ``p`` (shape > 0, default 3).
    """

    OPTION_DOCS = {
        'scale': "λ > 0 of each coordinate's step, density ∝ exp(-|x/λ|^p)",
        'p': 'the shape p > 0',
    }

    def __init__(
        self, space, rng: torch.Generator | None = None, *, scale: float = DEFAULT_SCALE, p: float = 3.0
    ):
        super().__init__(space)
        self.scale = checks.positive("scale", scale)
        self.p = checks.shape_p("p", p)

    def _step(self) -> tuple[float, float]:
        return self.scale, self.p

    def _around(self, z: Tensor, generator: torch.Generator) -> Tensor:
        return truncation.gennorm(z, self.scale, self.p, generator)

    def _truncated(self, z: Tensor, low: float, high: float, generator: torch.Generator) -> Tensor:
        return truncation.truncated_gennorm(z, self.scale, self.p, low, high, generator, check=False,
                                            sampler=self.sampler, shortfalls=self.shortfalls)

    def describe(self) -> str:
        return f"generalized normal around z with scale={self.scale:g}, p={self.p:g}{self._where()}"
