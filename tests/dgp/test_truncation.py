import math

import numpy as np
import pytest
import torch
from scipy import integrate, stats

from dgp import truncation

N = 20_000
INF = math.inf


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def ks_p(x, cdf):
    return stats.kstest(np.asarray(x, dtype=np.float64).ravel(), cdf).pvalue


def gennorm_truncated_cdf(p, loc, scale, low, high):
    """CDF of scipy's gennorm truncated to [low, high]; uses sf in the upper tail to keep precision."""
    d = stats.gennorm(p, loc=loc, scale=scale)
    if low > loc:
        return lambda x: (d.sf(low) - d.sf(np.clip(x, low, high))) / (d.sf(low) - d.sf(high))
    return lambda x: (d.cdf(np.clip(x, low, high)) - d.cdf(low)) / (d.cdf(high) - d.cdf(low))


def laplace_cdf(y):
    """Standard Laplace CDF, written out."""
    return np.where(y <= 0, 0.5 * np.exp(np.minimum(y, 0)), 1 - 0.5 * np.exp(-np.maximum(y, 0)))


@pytest.mark.parametrize(
    "loc, scale, low, high",
    [
        (0.0, 1.0, -1.0, 2.0),
        (1.5, 2.0, 2.0, 9.0),
        (0.0, 1.0, 8.0, 9.0),  # far upper tail: 1 - Φ(8) ~ 6e-16
        (0.0, 1.0, -40.0, -38.0),  # Φ is denormal here
        (0.0, 1.0, -60.0, -50.0),  # Φ underflows to 0: inverted in log space
        (0.0, 1.0, 45.0, 46.0),
        (0.0, 1.0, 30.0, INF),
        (0.0, 1.0, -INF, -3.0),
        (0.3, 0.5, 0.3, 0.300001),  # narrow
    ],
)
def test_truncated_normal_matches_scipy(loc, scale, low, high):
    x = truncation.truncated_normal(torch.full((N,), loc, dtype=torch.float64), scale, low, high, gen())
    assert x.min() >= low and x.max() <= high
    a, b = (low - loc) / scale, (high - loc) / scale
    assert ks_p(x, stats.truncnorm(a, b, loc=loc, scale=scale).cdf) > 1e-3


def test_truncated_normal_per_coordinate_locations():
    locs = torch.tensor([-0.5, 0.0, 0.9, 3.0], dtype=torch.float64)
    x = truncation.truncated_normal(locs.expand(N, 4), 0.4, 0.0, 1.0, gen())
    assert x.shape == (N, 4)
    for j, loc in enumerate(locs.tolist()):
        cdf = stats.truncnorm((0.0 - loc) / 0.4, (1.0 - loc) / 0.4, loc=loc, scale=0.4).cdf
        assert ks_p(x[:, j], cdf) > 1e-3


@pytest.mark.parametrize(
    "loc, scale, low, high",
    [
        (0.0, 1.0, -1.0, 2.0),
        (0.0, 0.5, 1.5, 2.5),
        (0.0, 1.0, -31.0, -30.0),
        (1.0, 2.0, -INF, 0.5),
        (0.0, 1.0, 40.0, INF),
    ],
)
def test_truncated_laplace_matches_closed_form(loc, scale, low, high):
    x = truncation.truncated_laplace(torch.full((N,), loc, dtype=torch.float64), scale, low, high, gen(1))
    assert x.min() >= low and x.max() <= high
    a, b = (low - loc) / scale, (high - loc) / scale
    if a > 0:  # upper tail: work with the survival function, written out
        sf = lambda y: 0.5 * np.exp(-y)  # noqa: E731
        cdf = lambda t: (sf(a) - sf(np.clip((t - loc) / scale, a, b))) / (sf(a) - sf(b))  # noqa: E731
    else:
        fa, fb = laplace_cdf(a), laplace_cdf(b)
        cdf = lambda t: (laplace_cdf(np.clip((t - loc) / scale, a, b)) - fa) / (fb - fa)  # noqa: E731
    assert ks_p(x, cdf) > 1e-3


@pytest.mark.parametrize("p", [0.5, 1.0, 2.0, 3.0, 8.0])
def test_gennorm_matches_scipy(p):
    x = truncation.gennorm(torch.full((N,), 0.3, dtype=torch.float64), 1.7, p, gen(2))
    assert ks_p(x, stats.gennorm(p, loc=0.3, scale=1.7).cdf) > 1e-3


@pytest.mark.parametrize("p", [0.5, 1.5, 3.0, 8.0])
@pytest.mark.parametrize("low, high", [(-1.0, 2.0), (0.5, 3.0), (2.0, 2.5), (-0.2, 0.1), (-3.0, -1.0), (-50.0, 50.0)])
def test_truncated_gennorm_matches_scipy(p, low, high):
    _check_truncated_gennorm(p, low, high)


@pytest.mark.parametrize("low, high", [(0.3, 0.9), (0.01, 2.0), (30.0, 400.0), (1e4, 1e8), (-1e8, -50.0), (20.0, 25.0)])
def test_truncated_heavy_tailed_gennorm_matches_scipy(low, high):
    """p = 1/4: T = |Y|^p ~ Gamma(4) has its mode at 3, so intervals lie left of, around and right of it."""
    _check_truncated_gennorm(0.25, low, high)


def _check_truncated_gennorm(p, low, high):
    x = truncation.truncated_gennorm(torch.zeros(N, dtype=torch.float64), 1.0, p, low, high, gen(3))
    assert x.min() >= low and x.max() <= high
    assert ks_p(x, gennorm_truncated_cdf(p, 0.0, 1.0, low, high)) > 1e-3


def test_truncated_gennorm_with_location_and_scale():
    x = truncation.truncated_gennorm(torch.full((N,), 0.9, dtype=torch.float64), 0.05, 3.0, 0.0, 1.0, gen(4))
    assert ks_p(x, gennorm_truncated_cdf(3.0, 0.9, 0.05, 0.0, 1.0)) > 1e-3


@pytest.mark.parametrize("p, low, high", [(3.0, 20.0, 21.0), (2.0, 1000.0, INF), (0.5, 400.0, 900.0)])
def test_truncated_gennorm_far_tail_mean(p, low, high):
    """Where scipy's sf underflows, compare mean and variance with quadrature of exp(-(y^p - low^p))."""
    x = truncation.truncated_gennorm(torch.zeros(N, dtype=torch.float64), 1.0, p, low, high, gen(5)).numpy()
    assert x.min() >= low and x.max() <= high
    decay = p * low ** (p - 1)  # the log density's slope at low
    top = min(high, low + 50.0 / decay)
    dens = lambda y: np.exp(-(y**p - low**p))  # noqa: E731
    kw = dict(epsabs=0, epsrel=1e-12, limit=500, points=[low + 1.0 / decay])
    z = integrate.quad(dens, low, top, **kw)[0]
    mean = integrate.quad(lambda y: y * dens(y), low, top, **kw)[0] / z
    var = integrate.quad(lambda y: (y - mean) ** 2 * dens(y), low, top, **kw)[0] / z
    assert abs(x.mean() - mean) < 5 * math.sqrt(var / N)
    assert abs(x.var() / var - 1) < 0.1


@pytest.mark.parametrize("rate", [-3.0, 0.0, 2.0, 250.0])
def test_truncated_exponential_matches_closed_form(rate):
    low, high = -1.0, 0.5
    x = truncation.truncated_exponential(torch.full((N,), rate, dtype=torch.float64), low, high, gen(6))
    assert x.min() >= low and x.max() <= high
    if rate == 0:
        cdf = lambda t: (np.clip(t, low, high) - low) / (high - low)  # noqa: E731
    else:
        cdf = lambda t: np.expm1(rate * (np.clip(t, low, high) - high) + rate * (high - low)) / np.expm1(  # noqa: E731
            rate * (high - low)
        )
    assert ks_p(x, cdf) > 1e-3


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(
    "sampler",
    [
        lambda loc, s, lo, hi, g: truncation.truncated_normal(loc, s, lo, hi, g),
        lambda loc, s, lo, hi, g: truncation.truncated_laplace(loc, s, lo, hi, g),
        lambda loc, s, lo, hi, g: truncation.truncated_gennorm(loc, s, 3.0, lo, hi, g),
        lambda loc, s, lo, hi, g: truncation.truncated_gennorm(loc, s, 0.5, lo, hi, g),
        lambda loc, s, lo, hi, g: truncation.truncated_exponential((loc - 0.5) / s, lo, hi, g),
    ],
)
def test_never_outside_the_interval(sampler, dtype):
    low, high = 0.1, 0.7
    locs = torch.tensor([0.1, 0.7, 0.4, -50.0, 50.0, 0.1 + 1e-9, 0.7 - 1e-9], dtype=dtype)
    loc = locs.repeat(3000)
    lo_t, hi_t = torch.tensor(low, dtype=dtype), torch.tensor(high, dtype=dtype)
    for scale in (1e-8, 0.05, 1.0, 1e6):
        x = sampler(loc, scale, low, high, gen(7))
        assert x.dtype == dtype and x.shape == loc.shape
        assert torch.isfinite(x).all()
        assert (x >= lo_t).all() and (x <= hi_t).all()


def test_draws_are_deterministic_given_the_generator():
    loc = torch.rand(64, 5, generator=gen(8))
    for fn in (
        lambda g: truncation.truncated_normal(loc, 0.05, 0.0, 1.0, g),
        lambda g: truncation.truncated_gennorm(loc, 0.05, 3.0, 0.0, 1.0, g),
        lambda g: truncation.gennorm(loc, 0.05, 3.0, g),
        lambda g: truncation.laplace(loc, 0.05, g),
    ):
        assert torch.equal(fn(gen(9)), fn(gen(9)))
        assert not torch.equal(fn(gen(9)), fn(gen(10)))


def test_bad_inputs_raise():
    loc = torch.zeros(4)
    with pytest.raises(ValueError, match="scale"):
        truncation.truncated_normal(loc, 0.0, 0.0, 1.0, gen())
    with pytest.raises(ValueError, match="scale"):
        truncation.truncated_laplace(loc, -1.0, 0.0, 1.0, gen())
    with pytest.raises(ValueError, match="low < high"):
        truncation.truncated_normal(loc, 1.0, 1.0, 1.0, gen())
    with pytest.raises(ValueError, match="p must be"):
        truncation.truncated_gennorm(loc, 1.0, 0.0, 0.0, 1.0, gen())
    with pytest.raises(ValueError, match="finite"):
        truncation.truncated_gennorm(torch.tensor([math.nan]), 1.0, 2.0, 0.0, 1.0, gen())
    with pytest.raises(ValueError, match="finite bounds"):
        truncation.truncated_exponential(loc, 0.0, INF, gen())


def test_the_far_tail_equals_its_log_space_form_computed_on_its_own():
    """Where Φ(b) underflows, every element's draw is the log-space inversion of that element alone."""
    a = torch.tensor([-50.0, -45.0, -3.0, -1.0, -40.0, -math.inf], dtype=torch.float64)
    b = torch.tensor([-40.0, -44.0, -2.0, 0.5, -39.5, -38.0], dtype=torch.float64)
    u = torch.tensor([0.3, 0.9, 0.5, 0.1, 0.99, 0.5], dtype=torch.float64)
    got = truncation._normal_lower_quantile(a, b, u)
    for i in range(len(a)):
        ai, bi, ui = a[i : i + 1], b[i : i + 1], u[i : i + 1]
        if float(truncation._ndtr(bi)) < 1e-290:
            log_a, log_b = torch.special.log_ndtr(ai), torch.special.log_ndtr(bi)
            lp = log_b + torch.log1p((1.0 - ui) * torch.expm1(log_a - log_b))
            s = -2.0 * lp
            t = -torch.sqrt(s - torch.log(s) - 2.0 * truncation._HALF_LOG_2PI)
            for _ in range(6):
                log_cdf = torch.special.log_ndtr(t)
                t = t - (log_cdf - lp) * torch.exp(log_cdf + 0.5 * t * t + truncation._HALF_LOG_2PI)
            want = t
        else:
            cdf_a, cdf_b = truncation._ndtr(ai), truncation._ndtr(bi)
            want = torch.special.ndtri(cdf_a + ui * (cdf_b - cdf_a))
        assert torch.equal(got[i : i + 1], torch.minimum(torch.maximum(want, ai), bi)), i
        assert ai <= got[i] <= bi
