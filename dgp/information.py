"""The mutual information I(z; z+) between anchors and positives of a process, in nats.

InfoNCE with K candidates bounds it from below, I(z; z+) >= log K - L; here it is computed from the known
data-generating process. :class:`Information` holds a value and how it was obtained. The numerical pieces:

- :func:`vmf_information`: uniform marginal on the sphere, vMF positives (closed form);
- :func:`gaussian_information`: Gaussian latents and additive Gaussian steps on R^n (closed form);
- :func:`box_information`: one coordinate of a box whose marginal and conditional factorise (quadrature);
- :func:`monte_carlo_information`: any pair of samplers with a normalised log-density p(z+|z);
- the log-densities the conditionals need for it: :func:`log_gennorm` (1-D laws, truncated or plain) and
  :func:`log_projected_normal` (a normal projected onto the unit sphere);
- :func:`box_step_information`, :func:`gaussian_covariance` (with :func:`is_marginal`, :func:`coordinate_law`):
  what a conditional needs from the marginal it is paired with.

Densities are taken with respect to the space's own measure (Lebesgue on R^n and on the box, the surface
measure on the sphere); I(z; z+) does not depend on that choice.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Mapping

import numpy as np
import torch
from torch import Tensor

from dgp import checks
from dgp.registry import REGISTRIES

METHODS = ("closed form", "quadrature", "monte carlo", "not available")

_GAUSS_ORDER = 8
"""Gauss–Legendre nodes per quadrature panel."""
_GRADING_LEVELS = 16
"""Panels between a kink and ``scale``: their ends lie at ``scale·2^-j``, j = 1..16."""
_CHUNK_ELEMENTS = 1 << 22
"""Pairs × dimensions evaluated at once by :func:`monte_carlo_information`."""
_RADIAL_EXTRA_TERMS = 64
"""Terms of the continued fraction in :func:`log_radial_moment` beyond the order of the moment."""


@dataclass(frozen=True)
class Information:
    """I(z; z+) in nats and how it was obtained.

    ``nats``: the value; ``math.inf`` when z+ keeps part of z exactly, ``math.nan`` when not available.
    ``stderr``: the Monte-Carlo standard error of the outer average; None for closed forms and quadrature.
    ``method``: one of :data:`METHODS`. ``note``: the formula used, or why there is none.
    ``parts``: the information of named latent blocks where it is reported separately (e.g. ``"style"``).
    """

    nats: float
    stderr: float | None
    method: str
    note: str
    parts: Mapping[str, Information] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {', '.join(METHODS)}, got {self.method!r}")

    @classmethod
    def unavailable(cls, reason: str) -> Information:
        """``nats = nan`` with ``reason`` as the note."""
        return cls(math.nan, None, "not available", reason)


# ------------------------------------------------------------------------------------------ closed forms


def vmf_log_normaliser(n: int, kappa: float) -> float:
    """log C_n(κ) = (n/2-1) log κ - (n/2) log 2π - log I_{n/2-1}(κ), the normaliser of vMF(μ, κ) on S^{n-1}.

    log I_v(κ) = log ive(v, κ) + κ with the exponentially scaled Bessel function ive, which does not overflow.
    """
    from scipy import special  # here, not at import: a run's start does not need it
    v = 0.5 * n - 1.0
    return float(v * math.log(kappa) - 0.5 * n * math.log(2.0 * math.pi) - math.log(special.ive(v, kappa)) - kappa)


def vmf_information(n: int, kappa: float) -> float:
    """I(z; z+) for z uniform on S^{n-1} (any radius) and z+ ~ vMF(z, κ), n >= 2, κ > 0.

    p(z+) is uniform, so I = E[log p(z+|z)] + log|S^{n-1}| = log|S^{n-1}| + log C_n(κ) + κ A_n(κ) with
    |S^{n-1}| = 2π^{n/2}/Γ(n/2), C_n(κ) from :func:`vmf_log_normaliser` and A_n(κ) = E[μᵀz+] =
    I_{n/2}(κ)/I_{n/2-1}(κ) = ive(n/2, κ)/ive(n/2-1, κ).
    """
    from scipy import special  # here, not at import: a run's start does not need it
    log_area = math.log(2.0) + 0.5 * n * math.log(math.pi) - math.lgamma(0.5 * n)
    mean_cosine = special.ive(0.5 * n, kappa) / special.ive(0.5 * n - 1.0, kappa)
    return float(log_area + vmf_log_normaliser(n, kappa) + kappa * mean_cosine)


def gaussian_information(cov_z: Tensor, cov_noise: Tensor) -> float:
    """I(z; z + ε) = ½ log det(I + Σ_z Σ_ε⁻¹) for z ~ N(μ, Σ_z) and ε ~ N(0, Σ_ε) independent in R^n.

    ``cov_z`` ``(n, n)`` positive semi-definite, ``cov_noise`` ``(n, n)`` positive definite; computed as
    ½ (log det(Σ_z + Σ_ε) - log det Σ_ε) in float64.
    """
    cov_z, cov_noise = cov_z.to(torch.float64), cov_noise.to(torch.float64)
    return 0.5 * float(torch.linalg.slogdet(cov_z + cov_noise)[1] - torch.linalg.slogdet(cov_noise)[1])


# -------------------------------------------------------------------------------------------- densities


def log_gennorm(x: Tensor, loc: Tensor | float, scale: Tensor | float, p: float,
                low: float = -math.inf, high: float = math.inf) -> Tensor:
    """log of the density ∝ exp(-|(x - loc)/scale|^p) on [low, high] (R when unbounded), normalised there.

    ``x``, ``loc`` and ``scale`` broadcast (e.g. ``(..., n)`` with ``scale`` ``(n,)``); the result is float64 of
    their broadcast shape, for x in [low, high]. The normaliser is computed on the shape of ``loc`` and ``scale``:
    scale·Γ(1 + 1/p)·(F(b) - F(a)) with a, b the standardised bounds and F(t) = sign(t)·P(1/p, |t|^p) (P the
    regularised lower incomplete gamma function); an interval on one side of ``loc`` uses the upper function
    Q = 1 - P, which keeps its mass accurate in the tails. The normal N(loc, σ²) is scale = σ√2, p = 2; the
    Laplace law is p = 1.
    """
    loc = torch.as_tensor(loc, dtype=torch.float64, device=x.device)
    scale = torch.as_tensor(scale, dtype=torch.float64, device=x.device)
    loc, scale = torch.broadcast_tensors(loc, scale)
    shape = torch.full_like(loc, 1.0 / p)
    a, b = ((low - loc) / scale).abs().pow(p), ((high - loc) / scale).abs().pow(p)
    above, below = low >= loc, high <= loc
    lower, upper = torch.special.gammainc, torch.special.gammaincc
    mass = torch.where(
        above, upper(shape, a) - upper(shape, b),
        torch.where(below, upper(shape, b) - upper(shape, a), lower(shape, a) + lower(shape, b)),
    )
    log_norm = scale.log() + math.lgamma(1.0 + 1.0 / p) + mass.log()
    return -((x.to(torch.float64) - loc).abs() / scale).pow(p) - log_norm


def log_radial_moment(k: int, tau: Tensor) -> Tensor:
    """log ∫_0^∞ x^k exp(-(x - τ)²/2) dx, elementwise on a float64 tensor ``tau``, k >= 0.

    For τ >= -1 the moments m_j = ∫_0^∞ x^j exp(-(x - τ)²/2) dx / √(2π) follow
    m_0 = Φ(τ), m_1 = τ m_0 + φ(τ), m_j = τ m_{j-1} + (j-1) m_{j-2}, which is stable there, kept as a ratio to
    the latest term with its logarithm accumulated. For τ < -1, with s = -τ, the integral is
    e^{-s²/2} G_k, G_j = ∫_0^∞ x^j e^{-sx - x²/2} dx, whose ratios r_j = G_j/G_{j-1} satisfy
    r_j = j/(s + r_{j+1}); they are computed downwards from j = k + 64, started at the fixed point of that map,
    and G_0 = √(π/2)·erfcx(s/√2). The relative error is about 1e-8 or less for k <= 127 (against mpmath).
    """
    out = torch.empty_like(tau)
    up = tau >= -1.0
    t = tau[up]
    cdf = 0.5 * torch.special.erfc(-t * math.sqrt(0.5))
    prev, cur = cdf, (t * cdf + torch.exp(-0.5 * t * t) / math.sqrt(2.0 * math.pi) if k else cdf)
    log_scale = torch.zeros_like(t)
    for j in range(2, k + 1):
        nxt = t * cur + (j - 1) * prev
        prev, cur = cur / nxt, torch.ones_like(nxt)
        log_scale = log_scale + torch.log(nxt)
    out[up] = 0.5 * math.log(2.0 * math.pi) + log_scale + torch.log(cur)
    s = -tau[~up]
    top = k + _RADIAL_EXTRA_TERMS
    ratio = 0.5 * (torch.sqrt(s * s + 4.0 * (top + 1)) - s)
    log_ratios = torch.zeros_like(s)
    for j in range(top, 0, -1):
        ratio = j / (s + ratio)
        if j <= k:
            log_ratios = log_ratios + torch.log(ratio)
    g0 = math.sqrt(0.5 * math.pi) * torch.special.erfcx(s * math.sqrt(0.5))
    out[~up] = -0.5 * s * s + torch.log(g0) + log_ratios
    return out


def log_projected_normal(v: Tensor, mean: Tensor, precision: Tensor) -> Tensor:
    """log density of w/‖w‖ at unit vectors ``v``, w ~ N(mean, diag(1/precision)), on S^{n-1} (surface measure).

    ``v`` ``(..., n)`` (normalised here), ``mean`` ``(..., n)`` broadcasting with it, ``precision`` ``(n,)``
    (Λ); float64 result of the broadcast leading shape. With a = vᵀΛv, b = vᵀΛμ, c = μᵀΛμ and τ = b/√a,
    p(v) = ∫_0^∞ ρ^{n-1} N(ρv; μ, Λ⁻¹) dρ
         = (2π)^{-n/2} (det Λ)^{1/2} a^{-n/2} exp((τ² - c)/2) ∫_0^∞ x^{n-1} exp(-(x - τ)²/2) dx
    (:func:`log_radial_moment`).
    """
    lam = precision.to(torch.float64)
    v = v.to(torch.float64)
    v = v / v.norm(dim=-1, keepdim=True)
    mean = mean.to(torch.float64)
    n = v.shape[-1]
    a = (v * v * lam).sum(-1)
    c = (mean * mean * lam).sum(-1)
    b = (v * lam * mean).sum(-1)
    tau = b / a.sqrt()
    tau, a, c = torch.broadcast_tensors(tau, a, c)
    return (-0.5 * n * math.log(2.0 * math.pi) + 0.5 * float(lam.log().sum()) - 0.5 * n * a.log()
            + 0.5 * (tau * tau - c) + log_radial_moment(n - 1, tau))


# -------------------------------------------------------------------------------------------- quadrature


def _panels(breaks: Tensor) -> tuple[Tensor, Tensor]:
    """Gauss–Legendre nodes and weights on the panels between consecutive ``breaks`` ``(..., B)`` (sorted):
    both ``(..., (B - 1)·order)``; an empty panel gets zero weights."""
    t, w = (torch.as_tensor(a, dtype=torch.float64) for a in np.polynomial.legendre.leggauss(_GAUSS_ORDER))
    left, right = breaks[..., :-1, None], breaks[..., 1:, None]
    half = 0.5 * (right - left)
    return (left + half * (1.0 + t)).flatten(-2), (half * w).flatten(-2)


def _graded(centres: Tensor, scale: float, low: float, high: float) -> Tensor:
    """``(len(centres), B)`` break points centre ± scale·2^j for j = -16..J (scale·2^J >= high - low) and the
    centre itself, clipped to [low, high]."""
    top = max(0, math.ceil(math.log2((high - low) / scale)))
    steps = scale * 2.0 ** torch.arange(-_GRADING_LEVELS, top + 1, dtype=torch.float64)
    c = centres[:, None]
    return torch.cat([c - steps, c, c + steps], dim=1).clamp(low, high)


def box_information(
    log_conditional: Callable[[Tensor, Tensor], Tensor],
    log_marginal: Callable[[Tensor], Tensor],
    low: float,
    high: float,
    scale: float,
    kinks: tuple[float, ...] = (),
) -> float:
    """I₁ = ∫∫ p(z) p(x|z) log(p(x|z)/p(x)) dz dx over [low, high]² for one coordinate, by quadrature.

    ``log_conditional(x, z)`` = log p(x|z) and ``log_marginal(z)`` = log p(z), both normalised on [low, high],
    elementwise on broadcast float64 tensors. I₁ = H(x) - H(x|z) with
        H(x|z) = -∫ p(z) ∫ p(x|z) log p(x|z) dx dz,
        H(x)   = -∫ p(x) log p(x) dx,   p(x) = ∫ p(z) p(x|z) dz,
    each by Gauss–Legendre panels in float64. The panels are graded geometrically (ratio 2), from scale·2^-16
    to the box width, around both ends of the box, around the marginal's ``kinks`` (e.g. its location) and,
    for the inner integrals, around the conditional's kink x = z; ``scale`` is the smallest width of the two
    laws. Against nested adaptive quadrature (scipy.integrate.quad) the relative error was below 1e-8 for
    normal, Laplace and generalized normal laws (p from 0.3 to 3, widths from 0.01 to 2 of the box).
    """
    ends = torch.tensor([low, high], dtype=torch.float64)
    points = torch.cat([ends, torch.tensor([k for k in kinks if low < k < high], dtype=torch.float64)])
    fixed = torch.unique(_graded(points, scale, low, high))
    x, w = _panels(fixed)
    inner = torch.sort(torch.cat([fixed.expand(x.numel(), -1), _graded(x, scale, low, high)], dim=1)).values
    y, v = _panels(inner)
    log_cond = log_conditional(y, x[:, None])
    conditional_entropy = -(w * log_marginal(x).exp() * (v * log_cond.exp() * log_cond).sum(1)).sum()
    log_pos = torch.logsumexp(v.log() + log_marginal(y) + log_conditional(x[:, None], y), dim=1)
    entropy = -(w * log_pos.exp() * log_pos).sum()
    return float(entropy - conditional_entropy)


# ------------------------------------------------------------------------------------------- Monte Carlo


def monte_carlo_information(
    sample_marginal: Callable[[int, torch.Generator], Tensor],
    sample_conditional: Callable[[Tensor, torch.Generator], Tensor],
    log_conditional: Callable[[Tensor, Tensor], Tensor],
    *,
    generator: torch.Generator | None = None,
    n: int = 4096,
    m: int = 4096,
) -> Information:
    """I(z; z+) ≈ (1/n) Σ_i [log p(z+_i | z_i) - log (1/m) Σ_j p(z+_i | z'_j)], by Monte Carlo.

    Draws, in this order and from ``generator`` only (required: a torch.Generator on the samplers' device):
    anchors z = sample_marginal(n, generator) ``(n, d)``, positives z+ = sample_conditional(z, generator)
    ``(n, d)``, fresh z' = sample_marginal(m, generator) ``(m, d)``. ``log_conditional(x, z)`` = log p(x | z),
    normalised, for ``(..., d)`` inputs that broadcast, giving float64 ``(...)``. log p(z+_i) is the logsumexp
    over j of log p(z+_i | z'_j) minus log m, in float64 and in chunks of anchors.

    The inner log-mean is biased: by Jensen's inequality it underestimates log p(z+) on average, so the
    estimate of I is biased upward, by O(1/m) once m is large compared with e^I (the fresh draws must land
    where p(z+|z') is large); for I near log m or above, it is a loose upper bound, which the note says.
    ``stderr`` = std_i / √n covers the outer average only, not that bias.
    """
    if not isinstance(generator, torch.Generator):
        raise ValueError("a Monte-Carlo estimate needs generator=torch.Generator (e.g. process.make_generator(seed))")
    n = checks.integer("n", n, minimum=2)
    m = checks.integer("m", m, minimum=1)
    z = sample_marginal(n, generator)
    z_pos = sample_conditional(z, generator)
    z_fresh = sample_marginal(m, generator)
    rows = max(1, _CHUNK_ELEMENTS // (m * z.shape[1]))
    log_pos = torch.cat([
        torch.logsumexp(log_conditional(z_pos[i : i + rows, None, :], z_fresh[None, :, :]), dim=1)
        for i in range(0, n, rows)
    ]) - math.log(m)
    values = log_conditional(z_pos, z) - log_pos
    nats = float(values.mean())
    note = (f"I = E[log p(z+|z)] - E[log p(z+)] over {n} anchors, p(z+) as the mean of p(z+|z') over {m} fresh "
            f"marginal draws (biased upward by O(1/m); the standard error covers the outer average only)")
    if nats > math.log(m) - 1.0:
        note += f"; the estimate exceeds log m - 1 = {math.log(m) - 1.0:.3g}, so m is too small for it: raise m"
    return Information(nats, float(values.std() / math.sqrt(n)), "monte carlo", note)


# ----------------------------------------------------------------------------------------- the marginal


def is_marginal(marginal: object, name: str) -> bool:
    """Whether ``marginal`` is the marginal registered as ``name``; the registry is asked, so that the
    conditionals need not import :mod:`dgp.marginals`, which imports them."""
    return isinstance(marginal, REGISTRIES["marginals"].get(name))


def coordinate_law(marginal: object) -> tuple[float, float, float] | None:
    """``(loc, λ, p)`` of a location-scale marginal, whose i.i.d. coordinates have density ∝ exp(-|(z_i - loc)/λ|^p)
    (normal: λ = √2·scale, p = 2; Laplace: p = 1; generalized normal: its own p), truncated on the box;
    None for any other marginal."""
    if is_marginal(marginal, "normal"):
        return marginal.loc, math.sqrt(2.0) * marginal.scale, 2.0
    if is_marginal(marginal, "laplace"):
        return marginal.loc, marginal.scale, 1.0
    if is_marginal(marginal, "gennorm"):
        return marginal.loc, marginal.scale, marginal.p
    return None


def box_step_information(marginal: object, low: float, high: float, scale: float, p: float) -> float | None:
    """I₁ of one coordinate of the box [low, high]^n for steps with density ∝ exp(-|(x - z)/scale|^p) truncated to
    it (:func:`log_gennorm`), under the marginal's law of one coordinate (uniform or a location-scale law,
    :func:`coordinate_law`), by :func:`box_information`; None when the marginal is neither."""
    if is_marginal(marginal, "uniform"):
        log_marginal, width, kinks = (lambda z: torch.full_like(z, -math.log(high - low))), math.inf, ()
    elif (law := coordinate_law(marginal)) is not None:
        loc, width, shape = law
        log_marginal, kinks = (lambda z: log_gennorm(z, loc, width, shape, low, high)), (loc,)
    else:
        return None

    def log_step(x: Tensor, z: Tensor) -> Tensor:
        return log_gennorm(x, z, scale, p, low, high)

    return box_information(log_step, log_marginal, low, high, min(scale, width), kinks)


def gaussian_covariance(marginal: object) -> Tensor | None:
    """The ``(n, n)`` covariance (float64, on the CPU) of a Gaussian marginal on R^n (normal: scale²·I;
    content-style: its block covariance), else None. Only for marginals on R^n: on a box the normal is truncated."""
    if is_marginal(marginal, "normal"):
        return marginal.scale**2 * torch.eye(marginal.space.dim, dtype=torch.float64)
    if is_marginal(marginal, "content_style"):
        return marginal.covariance().to("cpu", torch.float64)
    return None
