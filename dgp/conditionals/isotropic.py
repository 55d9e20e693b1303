"""Isotropic positives z+ = z + δ with i.i.d. coordinates of δ (Z21's normal, Laplace and generalized normal).

How the space is respected:
- R^n: z+ = z + δ as is;
- sphere of radius r: z+ = r·(z + δ)/‖z + δ‖ (drawn in R^n and projected back);
- box [low, high]^n: each coordinate z+_i is drawn from the 1-D law centred at z_i truncated exactly to
  [low, high] (:mod:`dgp.truncation`).

Z21's default conditional parameter is 0.05, the default of every scale here.
"""

from __future__ import annotations

import torch
from torch import Tensor

from dgp import checks, truncation
from dgp.base import Conditional
from dgp.conditionals import CONDITIONALS
from dgp.spaces import Box, Sphere

DEFAULT_SCALE = 0.05


class _Isotropic(Conditional):
    """Shared sampling; subclasses define the plain draw ``_around(z, generator)`` and the truncated one
    ``_truncated(z, low, high, generator)``."""

    def __init__(self, space):
        super().__init__()
        self.space = space

    def sample(self, z: Tensor, generator: torch.Generator) -> Tensor:
        """``(B, n)`` positives around the anchors ``z`` ``(B, n)``, in the space."""
        if isinstance(self.space, Box):
            return self._truncated(z, self.space.low, self.space.high, generator)
        return self.space.project(self._around(z, generator))

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

    def _around(self, z: Tensor, generator: torch.Generator) -> Tensor:
        return truncation.normal(z, self.sigma, generator)

    def _truncated(self, z: Tensor, low: float, high: float, generator: torch.Generator) -> Tensor:
        return truncation.truncated_normal(z, self.sigma, low, high, generator)

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

    def _around(self, z: Tensor, generator: torch.Generator) -> Tensor:
        return truncation.laplace(z, self.scale, generator)

    def _truncated(self, z: Tensor, low: float, high: float, generator: torch.Generator) -> Tensor:
        return truncation.truncated_laplace(z, self.scale, low, high, generator)

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
        self.p = checks.positive("p", p)

    def _around(self, z: Tensor, generator: torch.Generator) -> Tensor:
        return truncation.gennorm(z, self.scale, self.p, generator)

    def _truncated(self, z: Tensor, low: float, high: float, generator: torch.Generator) -> Tensor:
        return truncation.truncated_gennorm(z, self.scale, self.p, low, high, generator)

    def describe(self) -> str:
        return f"generalized normal around z with scale={self.scale:g}, p={self.p:g}{self._where()}"
