"""Von Mises–Fisher positives on the sphere, sampled exactly with Wood's (1994) algorithm.

vMF(μ, κ) on the unit sphere S^{n-1} has density ∝ exp(κ μᵀx). On a sphere of radius r the conditional
p(z+ | z) draws the direction z+/r ~ vMF(z/‖z‖, κ): κ is the concentration of unit directions.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import torch
from torch import Tensor

from dgp import checks
from dgp.blocks import SAMPLER, Shortfalls, first_accepted
from dgp.base import Conditional, Marginal
from dgp.conditionals import CONDITIONALS
from dgp.information import Information, is_marginal, vmf_information, vmf_log_normaliser
from dgp.truncation import float64_on
from dgp.spaces import Sphere

_MAX_ROUNDS = 10_000


def _wood_cosines(kappa: Tensor, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
    """w = μᵀx for x ~ vMF(μ, κ_i) on S^{n-1}, returned as (w, 1 - w, 1 + w) in float64, shape ``(B,)``.

    Wood (1994): b = (n-1)/(2κ + sqrt(4κ² + (n-1)²)), x0 = (1-b)/(1+b); propose Z ~ Beta((n-1)/2, (n-1)/2),
    W = (1 - (1+b)Z)/(1 - (1-b)Z), accept if κW + (n-1)log(1 - x0·W) - c >= log U with
    c = κx0 + (n-1)log(1 - x0²). With Z = G1/(G1+G2), G1, G2 ~ Gamma((n-1)/2), every quantity is formed
    without cancellation: 1 - W = 2bG1/(G2 + bG1), 1 + W = 2G2/(G2 + bG1), the log test reads
    κ(W - x0) + (n-1)·log((1+b)(G1+G2) / (2(G2 + bG1))) >= log U. Rounds repeat for rejected rows only.
    """
    m = n - 1
    b, one_minus_x0 = _wood_terms(kappa, n)
    batch = kappa.numel()
    out = torch.empty(3, batch, dtype=torch.float64, device=kappa.device)
    pending = torch.arange(batch, device=kappa.device)
    for _ in range(_MAX_ROUNDS):
        if pending.numel() == 0:
            return out[0], out[1], out[2]
        k, bb = kappa[pending], b[pending]
        conc = torch.full((2, pending.numel()), 0.5 * m, dtype=torch.float64, device=kappa.device)
        g1, g2 = torch._standard_gamma(conc, generator=generator)
        den = g2 + bb * g1
        one_minus_w = 2.0 * bb * g1 / den
        one_plus_w = 2.0 * g2 / den
        w = (g2 - bb * g1) / den
        log_u = torch.log(torch.rand(pending.numel(), generator=generator, device=kappa.device, dtype=torch.float64))
        test = k * (one_minus_x0[pending] - one_minus_w) + m * torch.log((1.0 + bb) * (g1 + g2) / (2.0 * den))
        ok = test >= log_u
        rows = pending[ok]
        out[0, rows], out[1, rows], out[2, rows] = w[ok], one_minus_w[ok], one_plus_w[ok]
        pending = pending[~ok]
    raise RuntimeError(f"vMF sampling did not finish in {_MAX_ROUNDS} rounds")


def _wood_terms(kappa: Tensor, n: int) -> tuple[Tensor, Tensor]:
    """Wood's b = (n-1)/(2κ + sqrt(4κ² + (n-1)²)) and 1 - x0 = 2b/(1 + b), for ``kappa`` of any shape."""
    m = n - 1
    b = m / (2.0 * kappa + torch.sqrt(4.0 * kappa * kappa + m * m))
    return b, 2.0 * b / (1.0 + b)


def _wood_cosines_in_blocks(kappa: Tensor, n: int, generator: torch.Generator, acceptance: float,
                            shortfalls: Shortfalls | None) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`_wood_cosines` drawn in the fixed blocks of :func:`dgp.blocks.first_accepted` (no host wait);
    ``acceptance``: a lower bound on Wood's acceptance rate at every κ_i (:func:`wood_acceptance`)."""
    m = n - 1
    b, one_minus_x0 = _wood_terms(kappa, n)

    def propose(rows: Tensor) -> tuple[Tensor, Tensor]:
        k, bb, gap = kappa.index_select(0, rows), b.index_select(0, rows), one_minus_x0.index_select(0, rows)
        conc = torch.full((2, rows.numel()), 0.5 * m, dtype=torch.float64, device=kappa.device)
        g1, g2 = torch._standard_gamma(conc, generator=generator)
        den = g2 + bb * g1
        one_minus_w, one_plus_w = 2.0 * bb * g1 / den, 2.0 * g2 / den
        log_u = torch.log(torch.rand(rows.numel(), generator=generator, device=kappa.device, dtype=torch.float64))
        test = k * (gap - one_minus_w) + m * torch.log((1.0 + bb) * (g1 + g2) / (2.0 * den))
        return torch.stack([(g2 - bb * g1) / den, one_minus_w, one_plus_w], dim=1), test >= log_u

    out = first_accepted(kappa.numel(), acceptance, propose, kappa.device, shortfalls)
    return out[:, 0], out[:, 1], out[:, 2]


@lru_cache(maxsize=256)
def wood_acceptance(kappa: float, n: int) -> float:
    """The probability that one proposal of Wood's sampler for vMF(κ) on S^{n-1} is accepted, by quadrature.

    With m = n - 1, Z ~ Beta(m/2, m/2) and W = (1 - (1+b)Z)/(1 - (1-b)Z), a proposal is accepted with
    probability exp(κ(W - x0) + m·log((1+b)/(2(1 - (1-b)Z)))), so the rate is E_Z of that. With Z = sin²θ,
    θ ∈ (0, π/2), the Beta density times dz is 2(sinθ cosθ)^{m-1}/B(m/2, m/2) dθ, smooth at both ends.
    """
    from scipy import integrate, special  # here, not at import: a run's start does not need them
    m = n - 1
    b = m / (2.0 * kappa + math.sqrt(4.0 * kappa * kappa + m * m))
    x0 = (1.0 - b) / (1.0 + b)
    log_norm = math.log(2.0) - special.betaln(0.5 * m, 0.5 * m)

    def integrand(theta: float) -> float:
        s, c = math.sin(theta), math.cos(theta)
        d = 1.0 - (1.0 - b) * s * s
        w = (1.0 - (1.0 + b) * s * s) / d
        log_ratio = kappa * (w - x0) + m * math.log((1.0 + b) / (2.0 * d))
        return math.exp(log_ratio + (m - 1) * math.log(s * c) + log_norm)

    peak = math.asin(math.sqrt(min(1.0, 1.0 / (1.0 + kappa))))  # where the ratio falls off at large κ
    value, _ = integrate.quad(integrand, 0.0, 0.5 * math.pi, points=[peak], limit=500, epsabs=1e-10)
    return min(1.0, value)


ACCEPTANCE_MARGIN = 0.9
"""The block plan assumes this fraction of the quadrature's acceptance (its error is below 1e-6)."""
LIMIT_KAPPA = 1e7
"""Wood's acceptance falls as κ grows, towards its limit (about 0.66 on the circle, 0.70 on S^9): evaluated at
κ = LIMIT_KAPPA·n, it bounds the rate at every κ within 0.1%, which :data:`ACCEPTANCE_MARGIN` covers."""


def _block_acceptance(kappa: float | Tensor, n: int) -> float:
    """A lower bound on Wood's acceptance: at the given κ, or at every κ for per-row concentrations."""
    at = float(kappa) if isinstance(kappa, (int, float)) else LIMIT_KAPPA * n
    return ACCEPTANCE_MARGIN * wood_acceptance(at, n)


def sample_vmf(mu: Tensor, kappa: float | Tensor, generator: torch.Generator, *, check: bool = True,
               sampler: int = SAMPLER, shortfalls: Shortfalls | None = None) -> Tensor:
    """``(B, n)`` draws x_i ~ vMF(μ_i, κ_i) on the unit sphere S^{n-1} (Wood 1994), n >= 2.

    ``mu``: ``(B, n)`` mean directions (normalised here); ``kappa``: a float or a ``(B,)`` tensor, >= 0 (0 is the
    uniform law), checked unless ``check=False`` (a component that checked it when it was built draws without
    making a GPU wait). ``sampler`` (:data:`dgp.blocks.SAMPLERS`): 2 draws the cosines in fixed blocks
    (:func:`_wood_cosines_in_blocks`, rows left short added to ``shortfalls``), 1 in rounds with a host loop
    (:func:`_wood_cosines`). The draw is x' = (w, sqrt(1 - w²)·v) with w the cosine and v uniform on
    S^{n-2}, rotated to μ by the Householder reflection H = I - 2uuᵀ/‖u‖², u = e_1 + sμ, s = sign(μ_1), which
    maps e_1 to -sμ (so x = -s·Hx'); ‖u‖² >= 2, so it is stable for every μ. Computed in float64 (v is drawn
    in the dtype of ``mu``), returned in the dtype of ``mu``.
    """
    if mu.dim() != 2 or mu.shape[1] < 2:
        raise ValueError(f"mu must have shape (B, n) with n >= 2, got {tuple(mu.shape)}")
    batch, n = mu.shape
    dev = mu.device
    kap = float64_on(kappa, mu)
    if kap.dim() == 0:
        kap = kap.expand(batch)
    if kap.shape != (batch,):
        raise ValueError(f"kappa must be a float or a tensor of shape ({batch},), got shape {tuple(kap.shape)}")
    if check and not bool((torch.isfinite(kap) & (kap >= 0)).all()):
        raise ValueError("kappa must be finite and >= 0")
    if sampler == 1:
        w, one_minus_w, one_plus_w = _wood_cosines(kap.contiguous(), n, generator)
    else:
        w, one_minus_w, one_plus_w = _wood_cosines_in_blocks(kap.contiguous(), n, generator,
                                                             _block_acceptance(kappa, n), shortfalls)
    mu64 = mu.to(torch.float64)
    mu64 = mu64 / mu64.norm(dim=1, keepdim=True).clamp_min(torch.finfo(torch.float64).tiny)
    v = torch.randn(batch, n - 1, generator=generator, device=dev, dtype=mu.dtype).to(torch.float64)
    v = v / v.norm(dim=1, keepdim=True).clamp_min(torch.finfo(torch.float64).tiny)
    x = torch.cat([w.unsqueeze(1), torch.sqrt(one_minus_w * one_plus_w).unsqueeze(1) * v], dim=1)
    s = 1.0 - 2.0 * (mu64[:, :1] < 0).to(torch.float64)
    u = s * mu64
    u[:, 0] += 1.0
    x = x - u * (2.0 * (u * x).sum(dim=1, keepdim=True) / (u * u).sum(dim=1, keepdim=True))
    return (-s * x).to(mu.dtype)


def _unit(x: Tensor) -> Tensor:
    """Rows of ``x`` scaled to unit norm, in float64."""
    x = x.to(torch.float64)
    return x / x.norm(dim=-1, keepdim=True)


@CONDITIONALS.register("vmf")
class VonMisesFisher(Conditional):
    """z+ = r·x, x ~ vMF(z/‖z‖, κ), on the sphere of radius r (Z21's positive conditional on S^{n-1}).

    Option ``kappa`` (> 0): the concentration of the unit direction; density ∝ exp(κ (z/r)ᵀ(z+/r)).
    """

    OPTION_DOCS = {
        'kappa': '(> 0) the concentration of the unit direction; density ∝ exp(κ (z/r)ᵀ(z+/r))',
    }

    def __init__(self, space, rng: torch.Generator | None = None, *, kappa: float = 1.0):
        super().__init__()
        if not isinstance(space, Sphere):
            checks.fail(
                "dgp.conditional.name", "vmf", f"needs dgp.space.name='sphere', got {type(space).__name__.lower()}"
            )
        self.space = space
        self.kappa = checks.positive("kappa", kappa)

    def sample(self, z: Tensor, generator: torch.Generator) -> Tensor:
        """``(B, n)`` positives on the sphere of radius r around the anchors ``z`` ``(B, n)``."""
        return self.space.radius * sample_vmf(z, self.kappa, generator, check=False, sampler=self.sampler,
                                              shortfalls=self.shortfalls)

    def log_density(self, z_pos: Tensor, z: Tensor) -> Tensor:
        """log p(z+ | z) = log C_n(κ) + κ cos∠(z, z+) - (n-1) log r, float64, for ``(..., n)`` inputs that
        broadcast: a density for the surface measure of the sphere of radius r."""
        n = self.space.dim
        cosine = (_unit(z_pos) * _unit(z)).sum(-1)
        return vmf_log_normaliser(n, self.kappa) + self.kappa * cosine - (n - 1) * math.log(self.space.radius)

    def mutual_information(self, marginal: Marginal, **options: Any) -> Information:
        """I(z; z+) in nats (:meth:`dgp.base.Conditional.mutual_information`): the closed form of
        :func:`dgp.information.vmf_information` for the uniform marginal, else Monte Carlo (``options``: a
        ``generator`` and the sizes ``n``, ``m``)."""
        if is_marginal(marginal, "uniform"):
            note = "log|S^{n-1}| + log C_n(κ) + κ A_n(κ) for the uniform marginal on the sphere"
            return Information(vmf_information(self.space.dim, self.kappa), None, "closed form", note)
        return super().mutual_information(marginal, **options)

    def describe(self) -> str:
        return f"von Mises-Fisher around z/r with concentration kappa={self.kappa:g} (directions), scaled to r"
