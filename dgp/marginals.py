"""Marginals p(z) of the anchors.

- ``uniform``: on the sphere (a normalised Gaussian scaled to the radius) or on the box; R^n has none.
- ``normal`` (N(loc, scale²)), ``laplace`` (density ∝ exp(-|z_i - loc|/scale)) and ``gennorm``
  (density ∝ exp(-|(z_i - loc)/scale|^p)): i.i.d. coordinates; plain on R^n, exactly truncated to
  [low, high] per coordinate on the box (``loc`` defaults to the box centre there, to 0 on R^n). They are
  not defined on the sphere.

A marginal with a closed-form exponential tilt also has ``sample_tilted(z, beta, num, generator)``:
``(B, num, n)`` exact draws of q_β(z⁻|z) ∝ exp(β zᵀz⁻) p(z⁻) for each anchor row of ``z`` (used by the
``tilted`` hard negatives; marginals without it are handled there by importance resampling). Every
marginal here also has ``tilt_limit()``: the bound on β|z_i| below which that tilt is normalisable (inf on
the sphere and the box and for the normal; 1/scale for Laplace coordinates on R^n and for generalized
normal ones with p = 1; 0 for p < 1, whose tails are heavier than exponential; inf for p > 1).

Draws follow the dtype of the module's buffers (float32 unless cast, e.g. by the process) and the device
of the generator.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from dgp import checks, truncation
from dgp.base import MARGINAL_CONTRACT, Marginal
from dgp.conditionals.vmf import sample_vmf
from dgp.defaults import BUILTIN_MODULES
from dgp.registry import Registry
from dgp.spaces import Box, Euclidean, Sphere

MARGINALS = Registry("marginals", "dgp.marginal", builtins=BUILTIN_MODULES, contract=MARGINAL_CONTRACT)
"""Latent marginals p(z) by name."""


class _Marginal(Marginal):
    """Holds the space and a scalar buffer whose dtype is the dtype of the draws."""

    def __init__(self, space):
        super().__init__()
        self.space = space
        self.register_buffer("_dtype_anchor", torch.zeros(()), persistent=False)

    @property
    def dtype(self) -> torch.dtype:
        return self._dtype_anchor.dtype

    def tilt_limit(self) -> float:
        """The bound on |t| below which exp(t x) p_i(x) has finite mass for every coordinate i.

        The tilt q_β(z⁻|z) ∝ exp(β zᵀz⁻) p(z⁻) is a proper density iff β|z_i| < ``tilt_limit()`` for every
        coordinate with z_i ≠ 0. ``inf``: every tilt is (a bounded space, or tails lighter than exponential);
        ``0``: none is but the trivial one (tails heavier than exponential).
        """
        return math.inf


@MARGINALS.register("uniform")
class UniformMarginal(_Marginal):
    """The uniform law on the sphere (radius r) or on the box [low, high]^n."""

    def __init__(self, space, rng: torch.Generator | None = None):
        if not isinstance(space, (Sphere, Box)):
            checks.fail(
                "dgp.marginal.name", "uniform",
                f"{space.describe()} has no uniform distribution; use dgp.space.name 'sphere' or 'box', "
                "or a 'normal', 'laplace' or 'gennorm' marginal",
            )
        super().__init__(space)

    def sample(self, batch: int, generator: torch.Generator) -> Tensor:
        """``(batch, n)`` uniform draws."""
        return self.space.uniform(batch, generator, self.dtype)

    def sample_tilted(self, z: Tensor, beta: float, num: int, generator: torch.Generator) -> Tensor:
        """``(B, num, n)`` draws of q ∝ exp(β zᵀz⁻) on the space, exactly.

        Sphere of radius r: z⁻ = r·v, v ~ vMF(z/‖z‖, κ) with κ = β·r·‖z‖, which is β r² for anchors on the
        sphere.
        Box: independent coordinates with density ∝ exp(β z_i x) on [low, high] (truncated exponentials).
        """
        batch, n = z.shape
        if isinstance(self.space, Sphere):
            r = self.space.radius
            kappa = (beta * r) * z.to(torch.float64).norm(dim=1)
            v = sample_vmf(z.repeat_interleave(num, dim=0), kappa.repeat_interleave(num), generator, check=False,
                           sampler=self.sampler, shortfalls=self.shortfalls)
            return (r * v).view(batch, num, n)
        rate = (beta * z).unsqueeze(1).expand(batch, num, n)
        return truncation.truncated_exponential(rate, self.space.low, self.space.high, generator, check=False)

    def describe(self) -> str:
        return f"the uniform distribution on {self.space.describe()}"


class _LocationScale(_Marginal):
    """I.i.d. coordinates from a 1-D location-scale law; plain on R^n, truncated on the box."""

    OPTION_DOCS = {
        'loc': 'centre of every coordinate (default: the box centre, or 0 on R^n)',
        'scale': '> 0: the standard deviation (normal) or λ (Laplace, generalised normal) of every coordinate',
    }

    name = ""
    family = ""

    def __init__(self, space, rng: torch.Generator | None = None, *, loc: float | None = None, scale: float = 1.0):
        if not isinstance(space, (Box, Euclidean)):
            checks.fail(
                "dgp.marginal.name", self.name,
                f"is defined on dgp.space.name 'box' or 'euclidean', not on {space.describe()}; "
                "on the sphere use 'uniform'",
            )
        super().__init__(space)
        self.scale = checks.positive("scale", scale)
        if loc is None:
            loc = 0.5 * (space.low + space.high) if isinstance(space, Box) else 0.0
        self.loc = checks.number("loc", loc)

    def sample(self, batch: int, generator: torch.Generator) -> Tensor:
        """``(batch, n)`` draws."""
        loc = torch.full((batch, self.space.dim), self.loc, dtype=self.dtype, device=generator.device)
        return self._draw(loc, generator)

    def _draw(self, loc: Tensor, generator: torch.Generator) -> Tensor:
        if isinstance(self.space, Box):
            return self._truncated(loc, self.space.low, self.space.high, generator)
        return self._plain(loc, generator)

    def tilt_limit(self) -> float:
        """inf on the box (bounded: every tilt is normalisable), else the limit of the plain law on R."""
        return math.inf if isinstance(self.space, Box) else self._plain_tilt_limit()

    def _plain_tilt_limit(self) -> float:
        return math.inf

    def _law(self) -> str:
        return f"loc={self.loc:g}, scale={self.scale:g}"

    def describe(self) -> str:
        where = (
            f", truncated to {self.space.describe()}" if isinstance(self.space, Box) else f" on {self.space.describe()}"
        )
        return f"i.i.d. {self.family} coordinates ({self._law()}){where}"


@MARGINALS.register("normal")
class NormalMarginal(_LocationScale):
    """N(loc, scale²) per coordinate. Options ``loc`` (default: box centre, or 0 on R^n), ``scale`` (> 0, 1)."""

    name = "normal"
    family = "normal"

    def _plain(self, loc: Tensor, generator: torch.Generator) -> Tensor:
        return truncation.normal(loc, self.scale, generator)

    def _truncated(self, loc: Tensor, low: float, high: float, generator: torch.Generator) -> Tensor:
        return truncation.truncated_normal(loc, self.scale, low, high, generator, check=False)

    def sample_tilted(self, z: Tensor, beta: float, num: int, generator: torch.Generator) -> Tensor:
        """``(B, num, n)`` exact draws of q ∝ exp(β zᵀz⁻) N(z⁻; loc, s²I) = N(loc + β s² z, s²I).

        On the box the shifted normal is truncated to it.
        """
        batch, n = z.shape
        loc = (self.loc + beta * self.scale**2 * z).unsqueeze(1).expand(batch, num, n)
        return self._draw(loc, generator)


@MARGINALS.register("laplace")
class LaplaceMarginal(_LocationScale):
    """Laplace(loc, scale) per coordinate, density ∝ exp(-|z_i - loc|/scale). Options ``loc``, ``scale`` (> 0, 1)."""

    name = "laplace"
    family = "Laplace"

    def _plain(self, loc: Tensor, generator: torch.Generator) -> Tensor:
        return truncation.laplace(loc, self.scale, generator)

    def _truncated(self, loc: Tensor, low: float, high: float, generator: torch.Generator) -> Tensor:
        return truncation.truncated_laplace(loc, self.scale, low, high, generator, check=False)

    def _plain_tilt_limit(self) -> float:
        """exp(-|x - loc|/scale + t x) has finite mass on R iff |t| < 1/scale."""
        return 1.0 / self.scale


@MARGINALS.register("gennorm")
class GenNormMarginal(_LocationScale):
    """Generalized normal per coordinate, density ∝ exp(-|(z_i - loc)/scale|^p) (scipy.stats.gennorm(p, loc, scale)).

    Options ``loc``, ``scale`` (> 0, default 1) and the shape ``p`` (> 0, default 3).
    """

    OPTION_DOCS = {
        'p': 'the shape p > 0',
    }

    name = "gennorm"
    family = "generalized normal"

    def __init__(
        self, space, rng: torch.Generator | None = None, *, loc: float | None = None, scale: float = 1.0, p: float = 3.0
    ):
        super().__init__(space, loc=loc, scale=scale)
        self.p = checks.shape_p("p", p)

    def _plain(self, loc: Tensor, generator: torch.Generator) -> Tensor:
        return truncation.gennorm(loc, self.scale, self.p, generator)

    def _truncated(self, loc: Tensor, low: float, high: float, generator: torch.Generator) -> Tensor:
        return truncation.truncated_gennorm(loc, self.scale, self.p, low, high, generator, check=False,
                                            sampler=self.sampler, shortfalls=self.shortfalls)

    def _plain_tilt_limit(self) -> float:
        """exp(-|(x - loc)/scale|^p + t x) on R: finite for every t when p > 1, for |t| < 1/scale when p = 1
        (the Laplace law), and for t = 0 only when p < 1."""
        if self.p > 1.0:
            return math.inf
        return 1.0 / self.scale if self.p == 1.0 else 0.0

    def _law(self) -> str:
        return f"loc={self.loc:g}, scale={self.scale:g}, p={self.p:g}"
