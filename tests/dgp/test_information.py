import math

import mpmath
import numpy as np
import pytest
import torch
from scipy import special, stats

import dgp
from dgp.base import Conditional
from dgp.information import Information, log_radial_moment
from dgp.spaces import Sphere


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def build(config, seed=0):
    return dgp.build_process({"mixing": "identity", "dtype": "float64", **config}, seed=seed)


def log_volume(space):
    """log of the surface area of the sphere, or of the volume of the box."""
    n = space.dim
    if isinstance(space, Sphere):
        return math.log(2 * math.pi ** (n / 2) / math.gamma(n / 2)) + (n - 1) * math.log(space.radius)
    return n * math.log(space.high - space.low)


def log_mean_exp(a, axis):
    top = a.max(axis=axis, keepdims=True)
    return (top + np.log(np.exp(a - top).mean(axis=axis, keepdims=True))).squeeze(axis)


# ----------------------------------------------------------------------------------- reference values

VMF = [(10, 100.0, 11.3502), (3, 10.0, 1.9957), (10, 1.0, 0.0494)]
BOX = [({"name": "laplace", "scale": 0.1}, 0.8401), ({"name": "laplace", "scale": 0.05}, 1.4179),
       ({"name": "normal", "sigma": 0.1}, 1.0239)]


@pytest.mark.parametrize("n, kappa, expected", VMF)
@pytest.mark.parametrize("radius", [1.0, 2.5])
def test_vmf_reference_values(n, kappa, expected, radius):
    process = build({"space": {"name": "sphere", "radius": radius}, "dim": n,
                     "conditional": {"name": "vmf", "kappa": kappa}})
    info = process.mutual_information()
    assert info.method == "closed form" and info.stderr is None
    assert info.nats == pytest.approx(expected, abs=5e-5)


@pytest.mark.parametrize("conditional, expected", BOX)
def test_box_reference_values_per_coordinate(conditional, expected):
    info = build({"space": "box", "dim": 3, "conditional": conditional}).mutual_information()
    assert info.method == "quadrature" and info.stderr is None
    assert info.nats / 3 == pytest.approx(expected, abs=5e-5)


# --------------------------------------------------------------- closed forms against Monte Carlo


@pytest.mark.parametrize("n, kappa, _", VMF)
def test_vmf_closed_form_against_monte_carlo(n, kappa, _):
    """p(z+) is uniform, so log p(z+|z)/p(z+) = log C_n(κ) + κ cos + log|S^{n-1}|: no inner average, no bias."""
    process = build({"space": "sphere", "dim": n, "conditional": {"name": "vmf", "kappa": kappa}})
    g = gen(1)
    z = process.sample_latents(20_000, g)
    cos = (z * process.conditional.sample(z, g)).sum(1).numpy()
    v = n / 2 - 1
    log_c = v * math.log(kappa) - n / 2 * math.log(2 * math.pi) - math.log(special.iv(v, kappa))
    values = log_c + kappa * cos + log_volume(Sphere(n))
    se = values.std() / math.sqrt(len(values))
    assert abs(process.mutual_information().nats - values.mean()) < 4 * se


def truncated_logpdf(law, x, loc, low, high):
    """log-density of ``law`` = (scipy distribution, other parameters) centred at ``loc``, truncated to [low, high]."""
    dist, kw = law
    return dist.logpdf(x, loc=loc, **kw) - np.log(dist.cdf(high, loc=loc, **kw) - dist.cdf(low, loc=loc, **kw))


BOX_CASES = [
    ({"space": "box", "dim": 1, "conditional": {"name": "laplace", "scale": 0.1}}, (stats.laplace, {"scale": 0.1})),
    ({"space": "box", "dim": 2, "marginal": {"name": "normal", "loc": 0.3, "scale": 0.2},
      "conditional": {"name": "normal", "sigma": 0.05}}, (stats.norm, {"scale": 0.05})),
    ({"space": {"name": "box", "low": -1.0, "high": 2.0}, "dim": 1, "marginal": {"name": "laplace", "scale": 0.5},
      "conditional": {"name": "gennorm", "scale": 0.3, "p": 3.0}}, (stats.gennorm, {"beta": 3.0, "scale": 0.3})),
    ({"space": "box", "dim": 2, "conditional": {"name": "anisotropic", "lambdas": [25.0, 100.0]}},
     [(stats.norm, {"scale": 0.2}), (stats.norm, {"scale": 0.1})]),
]


@pytest.mark.parametrize("config, step", BOX_CASES)
def test_box_quadrature_against_monte_carlo(config, step):
    """An independent estimate: scipy's truncated densities, p(z+) as the mean over M fresh anchors.

    The inner log-mean is biased upward by about Var_j[w_ij] / (2M mean_j[w_ij]²), w_ij = p(z+_i|z'_j)
    (delta method), estimated from the same draws; the tolerance is 4 standard errors plus twice that bias.
    """
    process = build(config)
    low, high = process.space.low, process.space.high
    laws = step if isinstance(step, list) else [step] * process.dim
    g = gen(2)
    z = process.sample_latents(2000, g)
    z_pos = process.conditional.sample(z, g).numpy()
    fresh = process.sample_latents(2000, g).numpy()

    def log_cond(x, loc):
        return sum(truncated_logpdf(law, x[..., i], loc[..., i], low, high) for i, law in enumerate(laws))

    inner = log_cond(z_pos[:, None, :], fresh[None, :, :])
    values = log_cond(z_pos, z.numpy()) - log_mean_exp(inner, axis=1)
    w = np.exp(inner - inner.max(axis=1, keepdims=True))
    bias = (w.var(axis=1) / (2 * w.shape[1] * w.mean(axis=1) ** 2)).mean()
    se = values.std() / math.sqrt(len(values))
    assert bias < 0.02
    assert abs(process.mutual_information().nats - values.mean()) < 4 * se + 2 * bias


def test_gaussian_closed_form_against_formula_and_monte_carlo():
    s, sigma, n = 1.5, 0.5, 4
    process = build({"space": "euclidean", "dim": n, "marginal": {"name": "normal", "scale": s},
                     "conditional": {"name": "normal", "sigma": sigma}})
    info = process.mutual_information()
    assert info.method == "closed form"
    assert info.nats == pytest.approx(n / 2 * math.log(1 + s**2 / sigma**2), rel=1e-12)
    g = gen(3)
    z = process.sample_latents(20_000, g)
    z_pos = process.conditional.sample(z, g).numpy()
    # z+ ~ N(0, (s² + σ²) I) exactly, so there is no inner average
    values = (stats.norm.logpdf(z_pos, z.numpy(), sigma) - stats.norm.logpdf(z_pos, 0, math.hypot(s, sigma))).sum(1)
    assert abs(info.nats - values.mean()) < 4 * values.std() / math.sqrt(len(values))


def test_anisotropic_gaussian_closed_form():
    lambdas = [1.0, 4.0, 9.0]
    process = build({"space": "euclidean", "dim": 3, "marginal": {"name": "normal", "scale": 0.7},
                     "conditional": {"name": "anisotropic", "lambdas": lambdas}})
    expected = sum(0.5 * math.log(1 + 0.49 * lam) for lam in lambdas)
    assert process.mutual_information().nats == pytest.approx(expected, rel=1e-12)


def test_content_style_marginal_with_normal_steps():
    """A correlated Gaussian marginal: ½ log det(I + Σ_z/σ²), against numpy and an exact-marginal Monte Carlo."""
    sigma = 0.8
    process = build({"space": "euclidean", "dim": 6, "conditional": {"name": "normal", "sigma": sigma},
                     "marginal": {"name": "content_style", "content_dim": 2, "dependence": True,
                                  "content_dependent_style": True}})
    m = process.marginal
    cov_c, cov_s, b = m.sigma_content.numpy(), m.sigma_style.numpy(), m.style_weight.numpy()
    cov = np.block([[cov_c, cov_c @ b.T], [b @ cov_c, cov_s + b @ cov_c @ b.T]])
    info = process.mutual_information()
    assert info.nats == pytest.approx(0.5 * np.linalg.slogdet(np.eye(6) + cov / sigma**2)[1], rel=1e-10)
    g = gen(4)
    z = process.sample_latents(20_000, g)
    assert np.abs(np.cov(z.numpy().T) / cov - 1).max() < 0.1
    z_pos = process.conditional.sample(z, g).numpy()
    mean = np.concatenate([np.zeros(2), m.style_offset.numpy()])
    values = (stats.norm.logpdf(z_pos, z.numpy(), sigma).sum(1)
              - stats.multivariate_normal(mean, cov + sigma**2 * np.eye(6)).logpdf(z_pos))
    assert abs(info.nats - values.mean()) < 4 * values.std() / math.sqrt(len(values))


# ------------------------------------------------------------------------------------ content-style


CONTENT_STYLE = {"space": "euclidean", "dim": 6,
                 "marginal": {"name": "content_style", "content_dim": 2, "dependence": True,
                              "content_dependent_style": True},
                 "conditional": {"name": "content_style", "content_dim": 2, "dependence": True}}


def test_content_style_is_infinite_and_reports_the_style_block():
    process = build(CONTENT_STYLE)
    info = process.mutual_information()
    assert info.nats == math.inf and "kept exactly" in info.note
    style = info.parts["style"]
    assert style.method == "closed form" and math.isfinite(style.nats)
    cov_s, cov_a = process.marginal.sigma_style.numpy(), process.conditional.sigma_change.numpy()
    assert style.nats == pytest.approx(0.5 * np.linalg.slogdet(np.eye(4) + cov_s @ np.linalg.inv(cov_a))[1], rel=1e-10)
    # I(s; s+ | c): given c, s ~ N(Bc + a, Σ_s) and s+ = s + ε, so p(s+ | c) = N(Bc + a, Σ_s + Σ_a)
    g = gen(5)
    z = process.sample_latents(20_000, g).numpy()
    z_pos = process.conditional.sample(torch.from_numpy(z), g).numpy()
    s, s_pos = z[:, 2:], z_pos[:, 2:]
    centre = z[:, :2] @ process.marginal.style_weight.numpy().T + process.marginal.style_offset.numpy()
    values = (stats.multivariate_normal(np.zeros(4), cov_a).logpdf(s_pos - s)
              - stats.multivariate_normal(np.zeros(4), cov_s + cov_a).logpdf(s_pos - centre))
    assert abs(style.nats - values.mean()) < 4 * values.std() / math.sqrt(len(values))


def test_content_style_style_block_is_infinite_when_it_may_stay_put():
    config = {**CONTENT_STYLE, "conditional": {**CONTENT_STYLE["conditional"], "p_change": 0.75}}
    info = build(config).mutual_information()
    assert info.nats == math.inf and info.parts["style"].nats == math.inf


# -------------------------------------------------------------------------------------- Monte Carlo


@pytest.mark.parametrize("conditional", [{"name": "anisotropic", "lambdas": "bimodal"},
                                         {"name": "normal", "sigma": 0.3}])
def test_monte_carlo_without_a_closed_form(conditional):
    process = build({"space": "sphere", "dim": 6, "conditional": conditional})
    with pytest.raises(ValueError, match="needs generator"):
        process.mutual_information()
    state = torch.get_rng_state()
    info = process.mutual_information(generator=gen(6), n=512, m=512)
    assert torch.equal(state, torch.get_rng_state())
    assert info.method == "monte carlo" and 0 < info.stderr < 0.2 and math.isfinite(info.nats)
    assert "biased upward" in info.note
    assert process.mutual_information(generator=gen(6), n=512, m=512) == info


def test_monte_carlo_estimator_against_the_vmf_closed_form():
    """The generic estimator (the base class's method) on a case with a closed form.

    w = p(z+|z')/p(z+) has Var[w] = κ coth κ - 1 on S², so the inner-average bias is about
    (κ coth κ - 1)/(2m) < 0.002 (delta method); the tolerance is 4 standard errors plus 0.01.
    """
    process = build({"space": "sphere", "dim": 3, "conditional": {"name": "vmf", "kappa": 10.0}})
    estimate = Conditional.mutual_information(process.conditional, process.marginal, generator=gen(7), n=2048, m=4096)
    assert estimate.method == "monte carlo"
    assert abs(estimate.nats - process.mutual_information().nats) < 4 * estimate.stderr + 0.01


def test_monte_carlo_estimator_against_the_box_quadrature():
    """Laplace(0.1) on [0, 1]: the inner-average bias is about 1e-3 here; tolerance 4 standard errors plus 0.01."""
    process = build({"space": "box", "dim": 1, "conditional": {"name": "laplace", "scale": 0.1}})
    estimate = Conditional.mutual_information(process.conditional, process.marginal, generator=gen(8), n=2048, m=2048)
    assert abs(estimate.nats - process.mutual_information().nats) < 4 * estimate.stderr + 0.01


# ------------------------------------------------------------------------------------ not available


def test_not_available_says_why():
    shell = build({"space": "sphere", "dim": 6, "conditional": {"name": "anisotropic", "shell": 0.1}})
    info = shell.mutual_information(generator=gen(9))
    assert info.method == "not available" and math.isnan(info.nats) and "acceptance probability" in info.note
    laplace = build({"space": "sphere", "dim": 6, "conditional": "laplace"}).mutual_information(generator=gen(9))
    assert laplace.method == "not available" and "no tractable density" in laplace.note

    class Opaque(Conditional):
        pass

    info = Opaque().mutual_information(shell.marginal, generator=gen(9))
    assert info.method == "not available" and "Opaque has no normalised log-density" in info.note
    with pytest.raises(ValueError, match="method"):
        Information(1.0, None, "guess", "")


# ---------------------------------------------------------------------------------------- densities


@pytest.mark.parametrize("config", [
    {"space": {"name": "sphere", "radius": 2.0}, "dim": 3, "conditional": {"name": "normal", "sigma": 0.7}},
    {"space": "sphere", "dim": 3, "conditional": {"name": "anisotropic", "lambdas": [0.5, 1.0, 3.0]}},
    {"space": {"name": "sphere", "radius": 1.5}, "dim": 3, "conditional": {"name": "vmf", "kappa": 3.0}},
    {"space": {"name": "box", "low": -1.0, "high": 2.0}, "dim": 2,
     "conditional": {"name": "gennorm", "scale": 0.6, "p": 0.7}},
    {"space": {"name": "box", "low": -1.0, "high": 2.0}, "dim": 2,
     "conditional": {"name": "anisotropic", "lambdas": [1.0, 4.0]}},
])
def test_log_density_is_the_law_of_the_sampler(config):
    """E[u(x)/p(x|z)] = 1 over the sampler's draws x, u the uniform density of the space."""
    process = build(config)
    g = gen(10)
    z = process.sample_latents(1, g).expand(20_000, -1)
    x = process.conditional.sample(z, g)
    ratio = torch.exp(-log_volume(process.space) - process.conditional.log_density(x, z)).numpy()
    assert abs(ratio.mean() - 1) < 5 * ratio.std() / math.sqrt(len(ratio))


@pytest.mark.parametrize("k", [0, 1, 9, 49])
@pytest.mark.parametrize("tau", [-25.0, -3.0, -1.0, -0.5, 0.0, 2.0, 40.0])
def test_log_radial_moment_against_mpmath(k, tau):
    """log ∫_0^∞ x^k exp(-(x - τ)²/2) dx, by mpmath on panels around the peak of the integrand."""
    mpmath.mp.dps = 30
    peak = (tau + math.sqrt(tau * tau + 4 * k)) / 2
    width = 1 / math.sqrt(k / peak**2 + 1) if peak > 0 else 1 / (1 + abs(tau))
    edges = sorted({max(0.0, peak + j * width) for j in (-10, -3, 0, 3, 10, 40)} | {0.0})

    def f(x):
        return x**k * mpmath.exp(-((x - tau) ** 2) / 2)

    expected = float(mpmath.log(mpmath.quad(f, edges + [mpmath.inf])))
    got = float(log_radial_moment(k, torch.tensor([tau], dtype=torch.float64)))
    assert got == pytest.approx(expected, rel=1e-7, abs=1e-7)
