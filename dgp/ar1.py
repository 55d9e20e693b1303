"""Stationary AR(1) sources on R^n (Hyvärinen & Morioka, AISTATS 2017: permutation-contrastive learning).

Each coordinate follows s_t = ρ s_{t-1} + ε_t with i.i.d. innovations ε_t of one law (:class:`Innovation`):
``laplace`` (density ∝ exp(-|ε|/λ), PCL's), ``normal`` (N(0, σ²), the case where PCL's theorem fails: a
Gaussian AR(1) is time-reversible and its sources are identifiable only up to a rotation) or ``gennorm``
(density ∝ exp(-|ε/λ|^p)). A batch's pair (z, z+) is (s_{t-1}, s_t) of the stationary process:

- the marginal ``ar1`` draws z from the stationary law of s_t;
- the conditional ``ar1`` draws z+ = ρ z + ε.

Both take the same options (``rho``, ``innovation``, ``scale``, ``p``) with the same defaults, as the
content-style marginal and conditional both take ``content_dim``; the process asks the conditional to check
that its marginal is the ``ar1`` marginal of the same law (:meth:`AR1Conditional.check_marginal`), and a
disagreement is one line naming the conditional's key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from dgp import checks, truncation
from dgp.base import Conditional, Marginal, Space
from dgp.conditionals import CONDITIONALS
from dgp.conditionals.steps import log_step_density
from dgp.information import Information
from dgp.marginals import MARGINALS
from dgp.spaces import Euclidean

INNOVATIONS = ("laplace", "normal", "gennorm")
DEFAULT_RHO = 0.7
"""PCL's AR coefficient."""
DEFAULT_GENNORM_P = 3.0
BURN_IN_TOLERANCE = 1e-12
"""The burn-in stops once |ρ|^K, the standard deviation of the omitted tail relative to the stationary one, is
at most this."""

MAX_BURN_IN = 10_000
"""The longest burn-in a draw of the stationary law may take (|ρ| <= 0.9972 for innovations other than normal)."""

OPTION_DOCS = {
    'rho': 'the AR coefficient ρ in (-1, 1) of s_t = ρ s_{t-1} + ε_t (PCL: 0.7); marginal and conditional must agree',
    'innovation': "the law of ε: 'laplace' (density ∝ exp(-|ε|/λ), PCL's), 'normal' (N(0, σ²), where PCL's theorem "
                  "fails) or 'gennorm' (density ∝ exp(-|ε/λ|^p)); marginal and conditional must agree",
    'scale': '> 0: σ of the normal innovation, λ of the others; marginal and conditional must agree',
    'p': "the shape p > 0 of the 'gennorm' innovation (default 3); only with innovation 'gennorm'",
}


@dataclass(frozen=True)
class Innovation:
    """The law of one innovation ε: ``kind`` in :data:`INNOVATIONS`, ``scale`` (σ of the normal, λ of the
    others) and ``p`` (the generalized normal's shape; 2 for the normal, 1 for Laplace)."""

    kind: str
    scale: float
    p: float

    def step(self) -> tuple[float, float]:
        """``(λ, p)``: the density is ∝ exp(-|ε/λ|^p) (the normal: λ = σ√2, p = 2)."""
        return (math.sqrt(2.0) * self.scale if self.kind == "normal" else self.scale), self.p

    def variance(self) -> float:
        """Var ε = λ² Γ(3/p) / Γ(1/p) (σ² for the normal, 2λ² for Laplace)."""
        lam, p = self.step()
        return lam**2 * math.exp(math.lgamma(3.0 / p) - math.lgamma(1.0 / p))

    def draw(self, loc: Tensor, generator: torch.Generator) -> Tensor:
        """``loc + ε``, ε of this law i.i.d. per entry; shape and dtype of ``loc``."""
        if self.kind == "normal":
            return truncation.normal(loc, self.scale, generator)
        if self.kind == "laplace":
            return truncation.laplace(loc, self.scale, generator)
        return truncation.gennorm(loc, self.scale, self.p, generator)


@dataclass(frozen=True)
class AR1Law:
    """ρ and the innovation law of s_t = ρ s_{t-1} + ε_t, checked from a component's options."""

    rho: float
    innovation: Innovation

    def options(self) -> dict[str, Any]:
        """The options that give this law, as a config names them."""
        return {"rho": self.rho, "innovation": self.innovation.kind, "scale": self.innovation.scale,
                **({"p": self.innovation.p} if self.innovation.kind == "gennorm" else {})}

    def describe(self) -> str:
        p = f", p={self.innovation.p:g}" if self.innovation.kind == "gennorm" else ""
        return f"rho={self.rho:g}, {self.innovation.kind} innovations with scale={self.innovation.scale:g}{p}"


def ar1_law(space: Space, section: str, rho: Any, innovation: Any, scale: Any, p: Any) -> AR1Law:
    """The options of an ``ar1`` component (in config ``section``) checked: R^n, |ρ| < 1, a known innovation
    law with scale > 0, and ``p`` > 0 given only for ``gennorm``."""
    if not isinstance(space, Euclidean):
        checks.fail("dgp.space.name", type(space).__name__.lower(),
                    f"the AR(1) sources ({section} 'ar1') are defined on R^n only: use 'euclidean'")
    rho = checks.number("rho", rho)
    if not -1.0 < rho < 1.0:
        checks.fail("rho", rho, "must lie in (-1, 1): the AR(1) process is stationary only for |rho| < 1")
    kind = checks.choice("innovation", innovation, INNOVATIONS)
    scale = checks.positive("scale", scale)
    checks.data_scale("scale", scale)
    if kind == "gennorm":
        shape = checks.shape_p("p", DEFAULT_GENNORM_P if p is None else p)
    elif p is not None:
        checks.fail("p", p, f"applies to innovation 'gennorm' only, and innovation is {kind!r}: leave p out")
    else:
        shape = 2.0 if kind == "normal" else 1.0
    return AR1Law(rho, Innovation(kind, scale, shape))


def burn_in_steps(rho: float) -> int:
    """K = ⌈log(1e-12) / log|ρ|⌉ (1 for ρ = 0): the fewest steps with |ρ|^K <= :data:`BURN_IN_TOLERANCE`
    (78 at ρ = 0.7, 2,750 at 0.99)."""
    if rho == 0.0:
        return 1
    return max(1, math.ceil(math.log(BURN_IN_TOLERANCE) / math.log(abs(rho))))


@MARGINALS.register("ar1")
class AR1Marginal(Marginal):
    """The stationary law of s_t = ρ s_{t-1} + ε_t, i.i.d. coordinates; ``sample(batch, generator)`` gives
    ``(batch, n)``.

    Normal innovations: drawn exactly, N(0, σ² / (1 - ρ²)). Other innovations: by a stated burn-in,
    s_K = Σ_{k<K} ρ^k ε_k from s_0 = 0 with K = :func:`burn_in_steps` (78 at ρ = 0.7): the omitted tail
    Σ_{k>=K} ρ^k ε_k has standard deviation |ρ|^K <= 1e-12 times the stationary one, Var s = Var ε / (1 - ρ²).
    A draw costs K innovations per entry.
    """

    OPTION_DOCS = OPTION_DOCS

    def __init__(self, space: Space, rng: torch.Generator | None = None, *, rho: float = DEFAULT_RHO,
                 innovation: str = "laplace", scale: float = 1.0, p: float | None = None):
        super().__init__()
        self.law = ar1_law(space, "dgp.marginal", rho, innovation, scale, p)
        self.space = space
        self.burn_in = 0 if self.law.innovation.kind == "normal" else burn_in_steps(self.law.rho)
        if self.burn_in > MAX_BURN_IN:
            bound = BURN_IN_TOLERANCE ** (1.0 / MAX_BURN_IN)
            with checks.section("dgp.marginal"):
                checks.fail("rho", rho, f"with {self.law.innovation.kind} innovations the stationary law is drawn by a "
                            f"burn-in of {self.burn_in:,} steps, more than the {MAX_BURN_IN:,} a draw may take: "
                            f"|rho| <= {math.floor(bound * 1e4) / 1e4:g} (or normal innovations, drawn exactly)")
        self.register_buffer("_dtype_anchor", torch.zeros(()), persistent=False)

    def sample(self, batch: int, generator: torch.Generator) -> Tensor:
        """``(batch, n)`` draws of the stationary law (exact for normal innovations, else after the burn-in)."""
        rho, innovation = self.law.rho, self.law.innovation
        s = torch.zeros(batch, self.space.dim, dtype=self._dtype_anchor.dtype, device=generator.device)
        if innovation.kind == "normal":
            return truncation.normal(s, innovation.scale / math.sqrt(1.0 - rho**2), generator)
        for _ in range(self.burn_in):
            s = innovation.draw(rho * s, generator)
        return s

    def describe(self) -> str:
        how = "drawn exactly" if self.burn_in == 0 else f"drawn after a burn-in of {self.burn_in} steps from 0"
        return f"the stationary AR(1) law ({self.law.describe()}; {how}) on {self.space.describe()}"


@CONDITIONALS.register("ar1")
class AR1Conditional(Conditional):
    """The next time point of the AR(1): z+ = ρ z + ε, ε i.i.d. per coordinate from the innovation law;
    ``sample(z (batch, n), generator) -> (batch, n)``.

    With z drawn from the ``ar1`` marginal of the same law (:meth:`check_marginal`), (z, z+) is (s_{t-1}, s_t)
    of the stationary process. log p(z+ | z) = Σ_i log p_ε(z+_i - ρ z_i) in closed form.
    """

    OPTION_DOCS = OPTION_DOCS

    def __init__(self, space: Space, rng: torch.Generator | None = None, *, rho: float = DEFAULT_RHO,
                 innovation: str = "laplace", scale: float = 1.0, p: float | None = None):
        super().__init__()
        self.law = ar1_law(space, "dgp.conditional", rho, innovation, scale, p)
        self.space = space

    def sample(self, z: Tensor, generator: torch.Generator) -> Tensor:
        return self.law.innovation.draw(self.law.rho * z, generator)

    def check_marginal(self, marginal: Marginal) -> None:
        """A ValueError naming the key unless ``marginal`` is the ``ar1`` marginal of this law."""
        if not isinstance(marginal, AR1Marginal):
            checks.fail("dgp.conditional.name", "ar1", f"continues a stationary AR(1) and needs dgp.marginal.name "
                        f"'ar1', not {marginal.describe()}")
        ours, theirs = self.law.options(), marginal.law.options()
        for key in ("rho", "innovation", "scale", "p"):
            if ours.get(key) != theirs.get(key):
                checks.fail(f"dgp.conditional.{key}", ours.get(key), f"the marginal has {key}={theirs.get(key)!r}; "
                            "the ar1 marginal and conditional describe one process: give both the same")

    def log_density(self, z_pos: Tensor, z: Tensor) -> Tensor:
        """log p(z+ | z) = Σ_i log p_ε(z+_i - ρ z_i), float64, for ``(..., n)`` inputs that broadcast."""
        lam, p = self.law.innovation.step()
        scales = torch.full((self.space.dim,), lam, dtype=torch.float64)
        centre = self.law.rho * z.to(torch.float64)
        return log_step_density(self.space, z_pos, centre, scales, p, centre)

    def mutual_information(self, marginal: Marginal, **options: Any) -> Information:
        """I(z; z+) in nats: -(n/2) log(1 - ρ²) for normal innovations (a Gaussian pair with correlation ρ per
        coordinate), else Monte Carlo from :meth:`log_density` (:meth:`dgp.base.Conditional.mutual_information`)."""
        if self.law.innovation.kind == "normal":
            note = "-(n/2) log(1 - ρ²): n independent Gaussian pairs with correlation ρ"
            return Information(-0.5 * self.space.dim * math.log1p(-self.law.rho**2), None, "closed form", note)
        return super().mutual_information(marginal, **options)

    def describe(self) -> str:
        return f"the next AR(1) time point z+ = rho z + eps ({self.law.describe()})"
