"""The stationary AR(1) sources (``ar1`` marginal and conditional) against closed forms: the stationary variance
Var ε / (1 - ρ²) and excess kurtosis κ_ε (1 - ρ²)² / (1 - ρ⁴), the lag-1 correlation ρ, and the innovations
z+ - ρ z against scipy's law."""

import math

import numpy as np
import pytest
import torch
from scipy import stats

from dgp import CONDITIONALS, MARGINALS
from dgp.base import Conditional
from dgp.ar1 import AR1Conditional, AR1Marginal, burn_in_steps
from dgp.process import Process
from dgp.spaces import Box, Euclidean

GROUPS = 50
"""Independent groups of draws whose spread gives the standard error of an estimate."""


def gen(seed):
    return torch.Generator().manual_seed(seed)


def pair(spec, n, batch, seed):
    """(z, z+) of ``batch`` rows in R^n, float64, for marginal and conditional both built from ``spec``."""
    marginal = AR1Marginal(Euclidean(n), **spec).double()
    z = marginal.sample(batch, gen(seed))
    return z, AR1Conditional(Euclidean(n), **spec).sample(z, gen(seed + 1))


def excess_kurtosis(x):
    x = x - x.mean()
    return float((x**4).mean() / (x**2).mean() ** 2 - 3.0)


def within(estimate, draws, truth, sigmas=5.0):
    """|estimate(all draws) - truth| below ``sigmas`` standard errors, the error from the spread of the estimate
    over :data:`GROUPS` equal groups of the draws (rows of ``draws``)."""
    groups = np.array([estimate(g) for g in np.array_split(draws, GROUPS)])
    error = groups.std(ddof=1) / math.sqrt(GROUPS)
    assert abs(estimate(draws) - truth) < sigmas * error, (estimate(draws), truth, error)
    return error


def innovation_law(spec):
    """scipy's law of ε and its excess kurtosis κ_ε."""
    kind, scale = spec.get("innovation", "laplace"), spec.get("scale", 1.0)
    if kind == "normal":
        return stats.norm(0, scale), 0.0
    if kind == "laplace":
        return stats.laplace(0, scale), 3.0
    p = spec.get("p", 3.0)
    return stats.gennorm(p, 0, scale), math.gamma(5 / p) * math.gamma(1 / p) / math.gamma(3 / p) ** 2 - 3.0


LAWS = [{}, {"rho": -0.5, "scale": 0.3}, {"innovation": "gennorm", "p": 3.0, "rho": 0.4},
        {"innovation": "normal", "scale": 2.0, "rho": 0.9}]


@pytest.mark.parametrize("spec", LAWS)
def test_stationary_variance_and_kurtosis_match_the_closed_forms(spec):
    z, z_pos = pair(spec, 4, 100_000, seed=1)
    law, kappa = innovation_law(spec)
    rho = spec.get("rho", 0.7)
    variance = law.var() / (1 - rho**2)
    for x in (z, z_pos):  # z+ has the stationary law too
        draws = x.numpy().ravel()
        within(lambda v: float(v.var()), draws, variance)
        within(excess_kurtosis, draws, kappa * (1 - rho**2) ** 2 / (1 - rho**4))


def test_the_kurtosis_check_tells_laplace_sources_from_gaussian_ones():
    """With the variance of Laplace(1) innovations, normal ones give sources whose kurtosis the check rejects."""
    z, _ = pair({"innovation": "normal", "scale": math.sqrt(2.0)}, 4, 100_000, seed=2)
    with pytest.raises(AssertionError):
        within(excess_kurtosis, z.numpy().ravel(), 3.0 * 0.51**2 / (1 - 0.7**4))


@pytest.mark.parametrize("spec", LAWS)
def test_lag_one_correlation_is_rho(spec):
    z, z_pos = pair(spec, 4, 100_000, seed=3)
    rows = np.stack([z.numpy().ravel(), z_pos.numpy().ravel()], axis=1)
    within(lambda r: float(np.corrcoef(r[:, 0], r[:, 1])[0, 1]), rows, spec.get("rho", 0.7))


@pytest.mark.parametrize("spec", LAWS)
def test_innovations_follow_their_law(spec):
    z, z_pos = pair(spec, 5, 20_000, seed=4)
    law, _ = innovation_law(spec)
    innovations = (z_pos - spec.get("rho", 0.7) * z).numpy().ravel()
    assert stats.kstest(innovations, law.cdf).pvalue > 1e-3
    gaussian = stats.norm(0, law.std())
    if spec.get("innovation") != "normal":  # the test has power against the Gaussian of the same variance
        assert stats.kstest(innovations, gaussian.cdf).pvalue < 1e-6


def test_normal_sources_are_drawn_exactly_from_the_stationary_law():
    marginal = AR1Marginal(Euclidean(5), innovation="normal", scale=0.5, rho=-0.8).double()
    assert marginal.burn_in == 0
    z = marginal.sample(20_000, gen(5)).numpy().ravel()
    assert stats.kstest(z, stats.norm(0, 0.5 / math.sqrt(1 - 0.64)).cdf).pvalue > 1e-3


@pytest.mark.parametrize("rho", [0.7, -0.7, 0.99, 0.05])
def test_the_burn_in_leaves_a_tail_below_1e_12_of_the_stationary_scale(rho):
    k = burn_in_steps(rho)
    assert abs(rho) ** k <= 1e-12 < abs(rho) ** (k - 1)
    assert burn_in_steps(0.7) == 78 and burn_in_steps(0.0) == 1


def test_with_rho_zero_the_sources_are_the_innovations():
    marginal = AR1Marginal(Euclidean(3), rho=0.0, scale=0.2).double()
    assert marginal.burn_in == 1
    assert stats.kstest(marginal.sample(20_000, gen(6)).numpy().ravel(), stats.laplace(0, 0.2).cdf).pvalue > 1e-3


def test_draws_follow_the_dtype_and_the_generator():
    marginal, conditional = AR1Marginal(Euclidean(3)), AR1Conditional(Euclidean(3))
    z = marginal.sample(7, gen(7))
    assert z.dtype == torch.float32 and z.shape == (7, 3)
    assert torch.equal(z, marginal.sample(7, gen(7))) and torch.equal(conditional.sample(z, gen(8)),
                                                                       conditional.sample(z, gen(8)))


@pytest.mark.parametrize("spec", LAWS)
def test_log_density_is_the_innovations_log_density(spec):
    z, z_pos = pair(spec, 3, 50, seed=9)
    law, _ = innovation_law(spec)
    expected = law.logpdf((z_pos - spec.get("rho", 0.7) * z).numpy()).sum(-1)
    got = AR1Conditional(Euclidean(3), **spec).log_density(z_pos, z)
    assert got.dtype == torch.float64 and np.allclose(got.numpy(), expected, rtol=1e-10, atol=1e-10)


def test_gaussian_information_closed_form_matches_monte_carlo():
    spec = {"innovation": "normal", "rho": 0.8}
    marginal, conditional = AR1Marginal(Euclidean(2), **spec).double(), AR1Conditional(Euclidean(2), **spec)
    closed = conditional.mutual_information(marginal)
    assert closed.method == "closed form" and closed.nats == pytest.approx(-math.log(1 - 0.64))
    laplace = AR1Conditional(Euclidean(2))
    assert laplace.mutual_information(AR1Marginal(Euclidean(2)).double(), generator=gen(10)).method == "monte carlo"
    estimate = Conditional.mutual_information(conditional, marginal, generator=gen(11), n=4096, m=4096)
    assert abs(estimate.nats - closed.nats) < 5 * estimate.stderr + 0.02  # 0.02 nats: the inner log-mean's bias


def test_a_process_pairs_them_by_default():
    process = Process({"space": {"name": "euclidean"}, "marginal": {"name": "ar1"}, "conditional": {"name": "ar1"}})
    batch = process.sample(4, process.make_generator(0))
    assert batch.z.shape == batch.z_pos.shape == (4, 10)
    assert "burn-in of 78 steps" in process.describe()


@pytest.mark.parametrize("options, key, message", [
    ({"rho": 1.0}, "dgp.marginal.rho", r"must lie in \(-1, 1\)"),
    ({"rho": "high"}, "dgp.marginal.rho", "expected a finite number"),
    ({"innovation": "cauchy"}, "dgp.marginal.innovation", "allowed: 'laplace', 'normal', 'gennorm'"),
    ({"scale": 0}, "dgp.marginal.scale", "must be > 0"),
    ({"p": 2.0}, "dgp.marginal.p", "applies to innovation 'gennorm' only"),
    ({"innovation": "gennorm", "p": -1}, "dgp.marginal.p", "must be > 0"),
])
def test_invalid_options_give_one_line_naming_the_key(options, key, message):
    with pytest.raises(ValueError, match=rf"^{key.replace('.', '[.]')}={options[key.split('.')[-1]]!r} is invalid: "
                                         rf".*{message}") as raised:
        MARGINALS.build({"name": "ar1", **options}, Euclidean(3), None, key="dgp.marginal")
    assert "\n" not in str(raised.value)


def test_only_on_rn():
    with pytest.raises(ValueError, match=r"^dgp\.space\.name='box' is invalid: .*R\^n only"):
        CONDITIONALS.build({"name": "ar1"}, Box(3, low=0.0, high=1.0), None, key="dgp.conditional")


@pytest.mark.parametrize("marginal, conditional, message", [
    ({"name": "ar1", "rho": 0.5}, {"name": "ar1"},
     r"^dgp\.conditional\.rho=0\.7 is invalid: the marginal has rho=0\.5"),
    ({"name": "ar1"}, {"name": "ar1", "innovation": "normal"},
     r"^dgp\.conditional\.innovation='normal' is invalid: the marginal has innovation='laplace'"),
    ({"name": "ar1", "innovation": "gennorm"}, {"name": "ar1", "innovation": "gennorm", "p": 2.5},
     r"^dgp\.conditional\.p=2\.5 is invalid: the marginal has p=3\.0"),
    ({"name": "normal"}, {"name": "ar1"},
     r"^dgp\.conditional\.name='ar1' is invalid: .*needs dgp\.marginal\.name 'ar1'"),
])
def test_marginal_and_conditional_must_describe_one_process(marginal, conditional, message):
    with pytest.raises(ValueError, match=message):
        Process({"space": {"name": "euclidean"}, "marginal": marginal, "conditional": conditional})


@pytest.mark.slow
@pytest.mark.parametrize("spec", [{"rho": 0.95}, {"rho": -0.9, "innovation": "gennorm", "p": 0.8}])
def test_long_memory_and_heavy_tails_keep_the_closed_forms(spec):
    z, z_pos = pair(spec, 4, 250_000, seed=12)
    law, kappa = innovation_law(spec)
    rho = spec["rho"]
    draws = z.numpy().ravel()
    within(lambda v: float(v.var()), draws, law.var() / (1 - rho**2))
    within(excess_kurtosis, draws, kappa * (1 - rho**2) ** 2 / (1 - rho**4))
    innovations = (z_pos - rho * z).numpy().ravel()
    assert stats.kstest(innovations, law.cdf).pvalue > 1e-3
