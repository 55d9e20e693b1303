"""Latent spaces: hypersphere, box and R^n."""

from __future__ import annotations

import torch
from torch import Tensor

from dgp import checks
from dgp.base import SPACE_CONTRACT, Space
from dgp.defaults import BUILTIN_MODULES
from dgp.registry import Registry

SPACES = Registry("spaces", "dgp.space", builtins=BUILTIN_MODULES, contract=SPACE_CONTRACT)
"""Latent spaces by name."""


@SPACES.register("sphere")
class Sphere(Space):
    """The hypersphere S^{n-1} of radius ``radius`` in R^n (n = ``dim`` >= 2)."""

    OPTION_DOCS = {
        'radius': 'radius r > 0 of the sphere',
    }

    def __init__(self, dim: int, rng: torch.Generator | None = None, *, radius: float = 1.0):
        super().__init__()
        self.dim = checks.integer("dgp.dim", dim, minimum=2)
        self.radius = checks.latent_scale("radius", radius)

    def uniform(self, batch: int, generator: torch.Generator, dtype: torch.dtype) -> Tensor:
        """Uniform on the sphere: a normalised standard Gaussian, scaled to the radius."""
        g = torch.randn(batch, self.dim, generator=generator, device=generator.device, dtype=dtype)
        return self.project(g)

    def contains(self, z: Tensor, atol: float = 1e-5) -> Tensor:
        return (z.norm(dim=-1) - self.radius).abs() <= atol * max(1.0, self.radius)

    def project(self, z: Tensor) -> Tensor:
        return self.radius * z / z.norm(dim=-1, keepdim=True).clamp_min(torch.finfo(z.dtype).tiny)

    def describe(self) -> str:
        return f"the sphere S^{self.dim - 1} of radius {self.radius:g} in R^{self.dim}"


@SPACES.register("box")
class Box(Space):
    """The box [low, high]^n."""

    OPTION_DOCS = {
        'low': 'lower bound of every coordinate (< high)',
        'high': 'upper bound of every coordinate (> low)',
    }

    def __init__(self, dim: int, rng: torch.Generator | None = None, *, low: float = 0.0, high: float = 1.0):
        super().__init__()
        self.dim = checks.integer("dgp.dim", dim, minimum=1)
        self.low = checks.data_scale("low", low, minimum=-checks.DATA_SCALE)
        self.high = checks.data_scale("high", high, minimum=-checks.DATA_SCALE)
        if self.low >= self.high:
            checks.fail("low", low, f"must be < dgp.space.high={high!r}")

    def uniform(self, batch: int, generator: torch.Generator, dtype: torch.dtype) -> Tensor:
        u = torch.rand(batch, self.dim, generator=generator, device=generator.device, dtype=dtype)
        return self.low + (self.high - self.low) * u

    def contains(self, z: Tensor, atol: float = 1e-5) -> Tensor:
        return ((z >= self.low - atol) & (z <= self.high + atol)).all(dim=-1)

    def project(self, z: Tensor) -> Tensor:
        return z.clamp(self.low, self.high)

    def describe(self) -> str:
        return f"the box [{self.low:g}, {self.high:g}]^{self.dim}"


@SPACES.register("euclidean")
class Euclidean(Space):
    """All of R^n; it has no uniform distribution."""

    def __init__(self, dim: int, rng: torch.Generator | None = None):
        super().__init__()
        self.dim = checks.integer("dgp.dim", dim, minimum=1)

    def contains(self, z: Tensor, atol: float = 1e-5) -> Tensor:
        return torch.isfinite(z).all(dim=-1)

    def project(self, z: Tensor) -> Tensor:
        return z

    def describe(self) -> str:
        return f"R^{self.dim}"
