"""Exact samplers of 1-D location-scale laws, plain or truncated to an interval.

With the standardised variable y = (x - loc) / scale the laws are

- normal:              density ∝ exp(-y²/2)                       (std = scale)
- Laplace:             density ∝ exp(-|y|)
- generalized normal:  density ∝ exp(-|y|^p), p > 0               (p = 1 Laplace, p = 2 normal with std scale/√2)
- tilted uniform:      density ∝ exp(rate·x) on [low, high]       (:func:`truncated_exponential`)

Every function works elementwise: ``loc`` (any shape, e.g. ``(B, n)``, one location per sample and
coordinate) fixes the shape, dtype and device of the result; ``scale``, ``low`` and ``high`` are floats or
tensors broadcastable to it. The values are checked unless ``check=False`` (a component that checked its
parameters when it was built draws without making a GPU wait for the check). Truncated draws are computed in
float64 and clamped, in the output dtype, to [low, high], so no draw ever leaves the interval; bounds may be
infinite.

Methods: normal and Laplace by the inverse CDF on the lower tail: the interval is mirrored so that its
centre is <= 0, which keeps both tails accurate. Laplace works in log space throughout; the normal uses
Φ = erfc(-y/√2)/2 and Φ^{-1}, and where Φ underflows (beyond about -37 standard deviations) log Φ, inverted by
Newton steps. The generalized normal by exact rejection with, for each coordinate, the cheaper of two
envelopes: the untruncated law (|Y| = U·G^{1/p}, G ~ Gamma(1 + 1/p)) or a tight one on the interval (a
uniform at the mode's height, or, for log-concave pieces, an exponential tangent at the end nearest the mode;
for p < 1 the one-sided pieces are handled through T = |Y|^p ~ Gamma(1/p), which is log-concave).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import torch
from torch import Tensor

from dgp.blocks import SAMPLER, Shortfalls, first_accepted

_MAX_ROUNDS = 10_000
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_SQRT_HALF = math.sqrt(0.5)


def _uniform(shape: torch.Size | tuple[int, ...], generator: torch.Generator, device: torch.device) -> Tensor:
    """float64 uniforms in the open interval (0, 1)."""
    return torch.rand(shape, generator=generator, device=device, dtype=torch.float64).clamp_(min=2.0**-80)


def float64_on(value: Tensor | float, like: Tensor) -> Tensor:
    """``value`` (a tensor or a Python number) as a float64 tensor on ``like``'s device. A number is filled in
    there rather than copied from the host: a step recorded as a CUDA graph cannot hold a copy from the host."""
    if isinstance(value, (int, float)):
        return like.new_full((), value, dtype=torch.float64)
    return torch.as_tensor(value, dtype=torch.float64, device=like.device)


def _prepare(loc: Tensor, scale, low, high, check: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``loc``, ``scale``, ``low``, ``high`` as broadcast float64 tensors; with ``check``, a ValueError on bad
    values. Inspecting tensor values makes a GPU wait, so the components that draw every step check their
    parameters once, when they are built, and pass ``check=False``."""
    if not torch.is_tensor(loc):
        raise ValueError(f"loc must be a tensor, got {type(loc).__name__}")
    loc64 = loc.to(torch.float64)
    scale64, low64, high64 = (float64_on(value, loc64) for value in (scale, low, high))
    if check:
        if not bool(torch.isfinite(loc64).all()):
            raise ValueError("loc (or rate) must be finite")
        if not bool(((scale64 > 0) & torch.isfinite(scale64)).all()):
            raise ValueError(f"scale must be finite and > 0, got {scale!r}")
        if bool(torch.isnan(low64).any() | torch.isnan(high64).any()) or not bool((low64 < high64).all()):
            raise ValueError(f"need low < high, got low={low!r}, high={high!r}")
    return torch.broadcast_tensors(loc64, scale64, low64, high64)


def _finish(x64: Tensor, low64: Tensor, high64: Tensor, dtype: torch.dtype) -> Tensor:
    """Clamp to [low, high] in float64, cast, and clamp again to the bounds as represented in ``dtype``."""
    x = torch.minimum(torch.maximum(x64, low64), high64).to(dtype)
    return x.clamp(min=low64.to(dtype), max=high64.to(dtype))


def exponential_offset(rho: Tensor, width: Tensor, u: Tensor) -> Tensor:
    """Inverse CDF of δ ∈ [0, width] with density ∝ exp(-rho·δ), rho >= 0 (uniform when rho = 0)."""
    safe = torch.where(rho > 0, rho, torch.ones_like(rho))
    delta = torch.where(rho > 0, -torch.log1p(u * torch.expm1(-safe * width)) / safe, u * width)
    return torch.minimum(delta.clamp(min=0.0), width)


def exponential_log_mass(rho: Tensor, width: Tensor) -> Tensor:
    """log ∫_0^width exp(-rho·δ) dδ for rho >= 0 (+inf for rho = 0 and width = inf)."""
    safe = torch.where(rho > 0, rho, torch.ones_like(rho))
    return torch.where(rho > 0, torch.log(-torch.expm1(-safe * width)) - torch.log(safe), torch.log(width))


def _rejection(values: Tensor, accepted: Tensor, propose) -> Tensor:
    """Bulk rejection sampling, given a first round (``values``, ``accepted``) for every index.

    ``propose(idx) -> (values, accepted)`` draws candidates for the indices ``idx`` (repeats allowed); rounds
    repeat until every index has an accepted value. Once few indices are pending, each gets several i.i.d.
    candidates per round and keeps its first accepted one, the same as proposing them one after another.
    """
    out = values.clone()
    pending = torch.nonzero(~accepted).squeeze(1)
    count = values.numel()
    for _ in range(_MAX_ROUNDS):
        n = pending.numel()
        if n == 0:
            return out
        copies = max(1, min(16, count // (8 * n)))
        cand, ok = propose(pending.repeat(copies))
        ok = ok.view(copies, n)
        first = ok.to(torch.uint8).argmax(dim=0, keepdim=True)
        done = ok.any(dim=0)
        chosen = cand.view(copies, n).gather(0, first).squeeze(0)
        out[pending[done]] = chosen[done]
        pending = pending[~done]
    raise RuntimeError(f"rejection sampling did not finish in {_MAX_ROUNDS} rounds")


# ----------------------------------------------------------------------------------------------- plain laws


def normal(loc: Tensor, scale, generator: torch.Generator) -> Tensor:
    """Draws of N(loc, scale²), shape and dtype of ``loc``."""
    eps = torch.randn(loc.shape, generator=generator, device=loc.device, dtype=loc.dtype)
    return loc + scale * eps


def laplace(loc: Tensor, scale, generator: torch.Generator) -> Tensor:
    """Draws of Laplace(loc, scale) (density ∝ exp(-|x - loc|/scale)) as the log-ratio of two uniforms."""
    u = _uniform((2,) + tuple(loc.shape), generator, loc.device)
    return loc + scale * (torch.log(u[0]) - torch.log(u[1])).to(loc.dtype)


def standard_gennorm_abs(shape, p: float, generator: torch.Generator, device: torch.device) -> Tensor:
    """float64 draws of |Y|, Y with density ∝ exp(-|y|^p): |Y| = U·G^{1/p}, G ~ Gamma(1 + 1/p), U ~ U(0, 1)."""
    conc = torch.full(shape, 1.0 + 1.0 / p, dtype=torch.float64, device=device)
    gamma = torch._standard_gamma(conc, generator=generator)
    return _uniform(shape, generator, device) * gamma.pow(1.0 / p)


def gennorm(loc: Tensor, scale, p: float, generator: torch.Generator) -> Tensor:
    """Draws of the generalized normal, density ∝ exp(-|(x - loc)/scale|^p) (scipy.stats.gennorm(p, loc, scale))."""
    magnitude = standard_gennorm_abs(loc.shape, p, generator, loc.device)
    sign = torch.rand(loc.shape, generator=generator, device=loc.device, dtype=torch.float64) < 0.5
    y = torch.where(sign, -magnitude, magnitude)
    return loc + scale * y.to(loc.dtype)


# ------------------------------------------------------------------------------------------ truncated laws


def _mirror(a: Tensor, b: Tensor, lower: bool) -> tuple[Tensor, Tensor, Tensor]:
    """Mirror [a, b] to [-b, -a] where its centre is > 0 (``lower``) or < 0; returns the flip mask too."""
    flip = (a + b > 0) if lower else (a + b < 0)
    return flip, torch.where(flip, -b, a), torch.where(flip, -a, b)


def _ndtr(y: Tensor) -> Tensor:
    """Φ(y) = erfc(-y/√2)/2, accurate in relative terms down to y ≈ -37 (torch.special.ndtr is not below -6)."""
    return 0.5 * torch.special.erfc(-y * _SQRT_HALF)


def _normal_lower_quantile(a: Tensor, b: Tensor, u: Tensor) -> Tensor:
    """Quantile u of N(0, 1) truncated to [a, b] with a + b <= 0 (lower-tail form, float64).

    p = Φ(a) + u·(Φ(b) - Φ(a)), y = Φ^{-1}(p); where Φ(b) underflows the same is done in log space,
    log p = log Φ(b) + log1p((1-u)·expm1(log Φ(a) - log Φ(b))), inverted by Newton steps on log Φ.
    Both forms are computed for every element and the log-space one kept where Φ(b) < 1e-290 (elementwise,
    so each element's value is what it would be alone; no data-dependent branch, so a GPU never waits). The
    log-space form is evaluated at a safe interval where it is not used, so that it produces no NaN there.
    """
    cdf_a, cdf_b = _ndtr(a), _ndtr(b)
    y = torch.special.ndtri(cdf_a + u * (cdf_b - cdf_a))
    far = cdf_b < 1e-290
    a_far, b_far = torch.where(far, a, -40.0), torch.where(far, b, -39.0)
    log_a, log_b = torch.special.log_ndtr(a_far), torch.special.log_ndtr(b_far)
    lp = log_b + torch.log1p((1.0 - u) * torch.expm1(log_a - log_b))
    s = -2.0 * lp
    t = -torch.sqrt(s - torch.log(s) - 2.0 * _HALF_LOG_2PI)
    for _ in range(6):
        log_cdf = torch.special.log_ndtr(t)
        t = t - (log_cdf - lp) * torch.exp(log_cdf + 0.5 * t * t + _HALF_LOG_2PI)
    y = torch.where(far, t, y)
    return torch.minimum(torch.maximum(y, a), b)


def truncated_normal(loc: Tensor, scale, low, high, generator: torch.Generator, check: bool = True) -> Tensor:
    """Draws of N(loc, scale²) truncated to [low, high] by the inverse CDF (float64, lower-tail form)."""
    loc64, scale64, low64, high64 = _prepare(loc, scale, low, high, check)
    flip, a, b = _mirror((low64 - loc64) / scale64, (high64 - loc64) / scale64, lower=True)
    y = _normal_lower_quantile(a, b, _uniform(a.shape, generator, a.device))
    return _finish(loc64 + scale64 * torch.where(flip, -y, y), low64, high64, loc.dtype)


def truncated_laplace(loc: Tensor, scale, low, high, generator: torch.Generator, check: bool = True) -> Tensor:
    """Draws of Laplace(loc, scale) truncated to [low, high] by the inverse CDF in log space.

    Standard CDF F(y) = e^y/2 (y <= 0), 1 - e^{-y}/2 (y > 0); sampled on the mirrored interval (centre <= 0).
    """
    loc64, scale64, low64, high64 = _prepare(loc, scale, low, high, check)
    flip, a, b = _mirror((low64 - loc64) / scale64, (high64 - loc64) / scale64, lower=True)
    log_half = math.log(0.5)

    def log_cdf(y: Tensor) -> Tensor:
        return torch.where(y <= 0, y + log_half, torch.log1p(-0.5 * torch.exp(-y.clamp(min=0.0))))

    log_a, log_b = log_cdf(a), log_cdf(b)
    u = _uniform(a.shape, generator, a.device)
    log_p = log_b + torch.log1p((1.0 - u) * torch.expm1(log_a - log_b))
    upper = -torch.log(-2.0 * torch.expm1(log_p.clamp(min=log_half)))
    y = torch.where(log_p <= log_half, log_p - log_half, upper)
    y = torch.minimum(torch.maximum(y, a), b)
    return _finish(loc64 + scale64 * torch.where(flip, -y, y), low64, high64, loc.dtype)


def truncated_exponential(rate: Tensor, low, high, generator: torch.Generator, check: bool = True) -> Tensor:
    """Draws with density ∝ exp(rate·x) on [low, high] (any sign of ``rate``; uniform where it is 0).

    ``rate`` fixes shape and dtype; the bound the density decreases towards may be infinite.
    """
    rate64, _, low64, high64 = _prepare(rate, 1.0, low, high, check)
    rho = rate64.abs()
    width = high64 - low64
    if check and bool(((rho == 0) & torch.isinf(width)).any()):
        raise ValueError("a zero rate needs finite bounds")
    start = torch.where(rate64 > 0, high64, low64)
    delta = exponential_offset(rho, width, _uniform(rate64.shape, generator, rate64.device))
    return _finish(torch.where(rate64 > 0, start - delta, start + delta), low64, high64, rate.dtype)


def truncated_gennorm(loc: Tensor, scale, p: float, low, high, generator: torch.Generator, check: bool = True,
                      sampler: int = SAMPLER, shortfalls: Shortfalls | None = None) -> Tensor:
    """Draws of the generalized normal (density ∝ exp(-|(x - loc)/scale|^p)) truncated to [low, high].

    Exact rejection, vectorised over coordinates (see the module docstring). ``sampler``
    (:data:`dgp.blocks.SAMPLERS`): 2 draws in the fixed blocks of :func:`dgp.blocks.first_accepted`, planned
    with the lower bound :func:`gennorm_acceptance` on the acceptance rate over all intervals (coordinates left
    short added to ``shortfalls``); 1 in rounds with a host loop until every coordinate has a draw.
    """
    if not (isinstance(p, (int, float)) and math.isfinite(p) and p > 0):
        raise ValueError(f"p must be a finite number > 0, got {p!r}")
    p = float(p)
    loc64, scale64, low64, high64 = _prepare(loc, scale, low, high, check)
    flip, a, b = _mirror((low64 - loc64) / scale64, (high64 - loc64) / scale64, lower=False)
    if sampler == 1:
        y = _standard_gennorm_interval(a.reshape(-1), b.reshape(-1), p, generator)
    else:
        y = _standard_gennorm_in_blocks(a.reshape(-1), b.reshape(-1), p, generator, shortfalls)
    y = y.view(a.shape)
    return _finish(loc64 + scale64 * torch.where(flip, -y, y), low64, high64, loc.dtype)


def _standard_gennorm_interval(lo: Tensor, hi: Tensor, p: float, generator: torch.Generator) -> Tensor:
    """Draws of Y ∝ exp(-|y|^p) on [lo_i, hi_i] with lo_i + hi_i >= 0 (flat float64 tensors), in rounds."""
    if p >= 1:
        out = _rounds(_gennorm_y_space(lo, hi, p, generator, dense=False), lo.numel(), lo.device)
    else:
        out = torch.empty_like(lo)
        straddle = lo < 0
        for mask, law in ((straddle, _gennorm_y_space), (~straddle, _gennorm_t_space)):
            idx = torch.nonzero(mask).squeeze(1)
            if idx.numel():
                out[idx] = _rounds(law(lo[idx], hi[idx], p, generator, dense=False), idx.numel(), lo.device)
    return torch.minimum(torch.maximum(out, lo), hi)


def _standard_gennorm_in_blocks(lo: Tensor, hi: Tensor, p: float, generator: torch.Generator,
                                shortfalls: Shortfalls | None) -> Tensor:
    """:func:`_standard_gennorm_interval` in fixed blocks: for p < 1 every proposal is drawn in both spaces
    and each coordinate keeps the one of its own law, so that shapes never depend on the data."""
    propose = _gennorm_y_space(lo, hi, p, generator, dense=True)
    if p < 1:
        in_y, in_t = propose, _gennorm_t_space(lo, hi, p, generator, dense=True)
        straddle = lo < 0

        def propose(idx: Tensor) -> tuple[Tensor, Tensor]:
            (y, ok_y), (y_t, ok_t) = in_y(idx), in_t(idx)
            here = straddle.index_select(0, idx)
            return torch.where(here, y, y_t), torch.where(here, ok_y, ok_t)

    out = first_accepted(lo.numel(), gennorm_acceptance(p), propose, lo.device, shortfalls)
    return torch.minimum(torch.maximum(out, lo), hi)


def _rounds(propose, count: int, device: torch.device) -> Tensor:
    """Rounds of :func:`_rejection` for ``count`` indices, from a first proposal for each."""
    return _rejection(*propose(torch.arange(count, device=device)), propose)


def _signed_gennorm(straddle: Tensor, p: float, generator: torch.Generator) -> Tensor:
    """Untruncated draws where ``straddle``, folded to y >= 0 elsewhere."""
    y = standard_gennorm_abs(straddle.shape, p, generator, straddle.device)
    flip = straddle & (torch.rand(straddle.shape, generator=generator, device=straddle.device) < 0.5)
    return torch.where(flip, -y, y)


def _gennorm_y_space(lo: Tensor, hi: Tensor, p: float, generator: torch.Generator, dense: bool):
    """Proposals in y for intervals around 0 (any p) or with 0 <= lo (p >= 1: -y^p is concave there):
    ``propose(idx) -> (y, accepted)`` for the coordinates ``idx``. ``dense`` draws from both envelopes for
    every coordinate; otherwise only from those some coordinate uses (which asks the host).

    Envelopes: the untruncated law, folded to y >= 0 when lo >= 0, of mass (1 + [lo < 0])·Γ(1 + 1/p); or
    exp(-lo^p - rho·(y - lo)) on [lo, hi] with rho = p·lo^{p-1} (tangent to -y^p at lo), which is the
    uniform at the mode's height 1 when lo < 0. The log acceptance ratio -(y^p - lo^p - rho·(y - lo)) is
    evaluated as -lo^p·((1 + x)^p - 1 - p·x), x = (y - lo)/lo, where y is close to lo.
    """
    straddle = lo < 0
    start = lo.clamp(min=0.0)
    rho = torch.where(straddle, torch.zeros_like(lo), p * start.pow(p - 1.0))
    width = hi - lo
    log_env = -start.pow(p) + exponential_log_mass(rho, width)
    log_base = math.lgamma(1.0 + 1.0 / p) + straddle.to(torch.float64) * math.log(2.0)
    use_base = log_base <= log_env

    def propose(idx: Tensor) -> tuple[Tensor, Tensor]:
        l, h, st, base = (x.index_select(0, idx) for x in (lo, hi, straddle, use_base))
        y = ok = None
        if dense or bool(base.any()):
            y = _signed_gennorm(st, p, generator)
            ok = (y >= l) & (y <= h)
        if dense or not bool(base.all()):
            s, r = start.index_select(0, idx), rho.index_select(0, idx)
            u = _uniform((2, idx.numel()), generator, idx.device)
            delta = exponential_offset(r, h - l, u[0])
            y_env = l + delta
            near = (s > 0) & (delta <= s)
            x = delta / torch.where(near, s, torch.ones_like(s))
            close = s.pow(p) * (torch.expm1(p * torch.log1p(x)) - p * x)
            gap = torch.where(near, close, y_env.pow(p) - s.pow(p) - r * delta)
            ok_env = torch.log(u[1]) <= torch.where(st, -y_env.abs().pow(p), -gap)
            y = y_env if y is None else torch.where(base, y, y_env)
            ok = ok_env if ok is None else torch.where(base, ok, ok_env)
        return y, ok

    return propose


def _gennorm_t_space(lo: Tensor, hi: Tensor, p: float, generator: torch.Generator, dense: bool):
    """Proposals for p < 1 on [lo, hi] with 0 <= lo, through T = Y^p on [lo^p, hi^p]: ``propose(idx) -> (y,
    accepted)`` as :func:`_gennorm_y_space`, y = T^{1/p}.

    T ~ Gamma(α), α = 1/p > 1, is log-concave with mode m = α - 1 and -log density φ(t) = t - m·log t.
    Envelopes: Gamma(α) itself (mass Γ(α)); or, on the interval, the uniform at height e^{-φ(m)} when it
    holds m, else the exponential tangent to -φ at the end e nearest m (slope (α-1)/e - 1).
    """
    alpha = 1.0 / p
    mode = alpha - 1.0
    t1, t2 = lo.pow(p), hi.pow(p)
    width = t2 - t1

    def phi(t: Tensor) -> Tensor:
        return t - mode * torch.log(t)

    def gamma(n: int) -> Tensor:
        conc = torch.full((n,), alpha, dtype=torch.float64, device=lo.device)
        return torch._standard_gamma(conc, generator=generator)

    holds_mode = (t1 <= mode) & (mode <= t2)
    right = t1 > mode
    end = torch.where(right, t1, t2)
    rho = torch.where(holds_mode, torch.zeros_like(t1), (mode / end - 1.0).abs())
    end_phi = torch.where(holds_mode, torch.full_like(t1, mode - mode * math.log(mode)), phi(end))
    use_base = math.lgamma(alpha) <= -end_phi + exponential_log_mass(rho, width)

    def propose(idx: Tensor) -> tuple[Tensor, Tensor]:
        a, b, base = (x.index_select(0, idx) for x in (t1, t2, use_base))
        t = ok = None
        if dense or bool(base.any()):
            t = gamma(idx.numel())
            ok = (t >= a) & (t <= b)
        if dense or not bool(base.all()):
            inside, r = holds_mode.index_select(0, idx), right.index_select(0, idx)
            u = _uniform((2, idx.numel()), generator, idx.device)
            delta = exponential_offset(rho.index_select(0, idx), width.index_select(0, idx), u[0])
            t_env = torch.where(inside | r, a + delta, b - delta)
            x = torch.where(r, delta, -delta) / end.index_select(0, idx)
            log_ratio = torch.where(inside, end_phi.index_select(0, idx) - phi(t_env), mode * (torch.log1p(x) - x))
            ok_env = torch.log(u[1]) <= log_ratio
            t = t_env if t is None else torch.where(base, t, t_env)
            ok = ok_env if ok is None else torch.where(base, ok, ok_env)
        return t.pow(alpha), ok

    return propose

ACCEPTANCE_MARGIN = 0.8
"""The block plan assumes this fraction of :func:`gennorm_acceptance`'s grid minimum."""


def _log_mass(rho: np.ndarray, width: np.ndarray) -> np.ndarray:
    """log ∫_0^width exp(-rho·δ) dδ (numpy twin of :func:`exponential_log_mass`)."""
    safe = np.where(rho > 0, rho, 1.0)
    return np.where(rho > 0, np.log(-np.expm1(-safe * width)) - np.log(safe), np.log(width))


def _mass_between(alpha: float, t1: np.ndarray, t2: np.ndarray) -> np.ndarray:
    """∫_{t1}^{t2} t^{α-1}e^{-t} dt / Γ(α), from the lower tail left of the mode and the upper one right of it;
    NaN where t2 - t1 is too small to resolve the difference."""
    from scipy import special  # here, not at import: a run's start does not need it
    lower = special.gammainc(alpha, t2) - special.gammainc(alpha, t1)
    upper = special.gammaincc(alpha, t1) - special.gammaincc(alpha, t2)
    left = t2 <= alpha
    diff = np.where(left, lower, upper)
    scale = np.where(left, special.gammainc(alpha, t2), special.gammaincc(alpha, t1))
    return np.where(diff > 1e-6 * scale, diff, np.nan)


@lru_cache(maxsize=64)
def gennorm_acceptance(p: float) -> float:
    """A lower bound on the acceptance rate of :func:`truncated_gennorm`'s rejection at shape ``p``, over every
    interval: :data:`ACCEPTANCE_MARGIN` times the minimum over a grid of intervals of Z/M, the target's mass
    Z over the chosen envelope's mass M (the cheaper of the two, as the sampler chooses).

    With G(x) = ∫_0^x e^{-y^p} dy = Γ(1+1/p)·P(1/p, x^p): intervals around 0 (lo = -s·hi, s ∈ [0, 1]) have
    Z = G(-lo) + G(hi) and M = min(2Γ(1+1/p), hi - lo); one-sided ones (0 <= lo, lo^p <= 600, where farther
    out the tangent envelope is tighter still) Z = G(hi) - G(lo) and M = min(Γ(1+1/p), e^{-lo^p}·mass) for
    p >= 1, or, for p < 1, the same in t = y^p with the Gamma(1/p) law (:func:`_gennorm_t_space`).
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        return ACCEPTANCE_MARGIN * _grid_acceptance(p)


def _grid_acceptance(p: float) -> float:
    """The minimum of Z/M over the grid of intervals of :func:`gennorm_acceptance`."""
    from scipy import special  # here, not at import: a run's start does not need it
    alpha = 1.0 / p
    hi = np.logspace(-4, 3, 300)[:, None]
    lo = -np.linspace(0.0, 1.0, 101)[None, :] * hi
    mass = math.gamma(1.0 + alpha) * (special.gammainc(alpha, (-lo) ** p) + special.gammainc(alpha, hi ** p))
    around = mass / np.minimum(2.0 * math.gamma(1.0 + alpha), hi - lo)
    lo = np.concatenate([[0.0], np.logspace(-4, math.log10(600.0 ** alpha), 300)])[:, None]
    hi = lo + np.logspace(-5, 3, 300)[None, :]
    t1, t2 = lo ** p, hi ** p
    if p >= 1:
        rho = p * lo ** (p - 1.0)
        log_env = -t1 + _log_mass(rho, hi - lo)
        log_base = math.lgamma(1.0 + alpha)
    else:
        mode = alpha - 1.0
        holds, right = (t1 <= mode) & (mode <= t2), t1 > mode
        end = np.where(right, t1, t2)
        rho = np.where(holds, 0.0, np.abs(mode / end - 1.0))
        phi = np.where(holds, mode - mode * math.log(mode), end - mode * np.log(end))
        log_env = -phi + _log_mass(rho, t2 - t1)
        log_base = math.lgamma(alpha)
    one_sided = np.exp(np.log(_mass_between(alpha, t1, t2)) + math.lgamma(alpha) - np.minimum(log_base, log_env)
                       - (math.log(p) if p >= 1 else 0.0))
    return float(min(np.nanmin(around), np.nanmin(one_sided)))
