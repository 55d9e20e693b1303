import math

import numpy as np
import pytest
import torch
from scipy import stats

from dgp.marginals import GenNormMarginal, LaplaceMarginal, NormalMarginal, UniformMarginal
from dgp import MARGINALS
from dgp.spaces import Box, Euclidean, Sphere

N = 20_000


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def build(spec, space):
    return MARGINALS.build(spec, space, None, key="dgp.marginal")


def ks_p(x, cdf):
    return stats.kstest(np.asarray(x, dtype=np.float64).ravel(), cdf).pvalue


def test_uniform_box_moments_and_law():
    space = Box(3, low=-1.0, high=2.0)
    z = build("uniform", space).sample(N, gen(1)).double().numpy()
    assert z.shape == (N, 3)
    assert np.abs(z.mean(0) - 0.5).max() < 5 * math.sqrt(9 / 12 / N)
    assert np.abs(z.var(0) / (9 / 12) - 1).max() < 0.05
    for j in range(3):
        assert ks_p(z[:, j], stats.uniform(-1.0, 3.0).cdf) > 1e-3


@pytest.mark.parametrize("radius", [1.0, 2.0])
def test_uniform_sphere_moments(radius):
    n = 6
    z = build("uniform", Sphere(n, radius=radius)).to(torch.float64).sample(N, gen(2))
    assert z.dtype == torch.float64
    assert torch.allclose(z.norm(dim=1), torch.full((N,), radius, dtype=torch.float64))
    assert z.mean(0).abs().max() < 5 * radius / math.sqrt(n * N)
    second = z.T @ z / N
    assert (second - radius**2 / n * torch.eye(n, dtype=torch.float64)).abs().max() < 6 * radius**2 / n / math.sqrt(N)
    cos = (z[:, 0] / radius).numpy()
    assert ks_p(cos, stats.beta((n - 1) / 2, (n - 1) / 2, loc=-1, scale=2).cdf) > 1e-3


@pytest.mark.parametrize(
    "spec, law",
    [
        ({"name": "normal"}, stats.norm(0, 1)),
        ({"name": "normal", "loc": 1.5, "scale": 0.3}, stats.norm(1.5, 0.3)),
        ({"name": "laplace", "loc": -1.0, "scale": 2.0}, stats.laplace(-1.0, 2.0)),
        ({"name": "gennorm", "scale": 0.7, "p": 3.0}, stats.gennorm(3.0, 0, 0.7)),
        ({"name": "gennorm", "loc": 0.2, "p": 0.6}, stats.gennorm(0.6, 0.2, 1.0)),
    ],
)
def test_rn_marginals_match_scipy(spec, law):
    z = build(spec, Euclidean(4)).sample(N // 4, gen(3))
    assert z.shape == (N // 4, 4) and z.dtype == torch.float32
    assert ks_p(z.numpy(), law.cdf) > 1e-3


def test_box_normal_defaults_to_the_centre_and_is_truncated():
    space = Box(2, low=0.0, high=2.0)
    marginal = build({"name": "normal", "scale": 0.5}, space)
    assert marginal.loc == 1.0
    z = marginal.sample(N // 2, gen(4)).numpy()
    assert ks_p(z, stats.truncnorm(-2.0, 2.0, loc=1.0, scale=0.5).cdf) > 1e-3
    off = build({"name": "normal", "loc": 3.0, "scale": 0.5}, space).sample(N // 2, gen(5)).numpy()
    assert ks_p(off, stats.truncnorm(-6.0, -2.0, loc=3.0, scale=0.5).cdf) > 1e-3


def test_box_laplace_is_truncated():
    z = build({"name": "laplace", "loc": 0.0, "scale": 0.5}, Box(2)).to(torch.float64).sample(N // 2, gen(6)).numpy()
    sf = lambda y: 0.5 * np.exp(-y / 0.5)  # noqa: E731  (Laplace(0, 0.5) survival for y >= 0)
    assert ks_p(z, lambda t: (sf(0.0) - sf(np.clip(t, 0, 1))) / (sf(0.0) - sf(1.0))) > 1e-3


@pytest.mark.parametrize("p", [0.5, 3.0])
def test_box_gennorm_within_bounds_and_truncated(p):
    space = Box(5, low=-1.0, high=1.0)
    z = build({"name": "gennorm", "loc": 0.5, "scale": 0.8, "p": p}, space).sample(N // 5, gen(7))
    assert space.contains(z, atol=0.0).all()
    d = stats.gennorm(p, loc=0.5, scale=0.8)
    assert ks_p(z.numpy(), lambda t: (d.cdf(np.clip(t, -1, 1)) - d.cdf(-1)) / (d.cdf(1) - d.cdf(-1))) > 1e-3


def test_dtype_follows_the_module_and_no_state_is_saved():
    for marginal in (UniformMarginal(Box(3)), NormalMarginal(Euclidean(3)), GenNormMarginal(Box(3))):
        assert marginal.sample(4, gen()).dtype == torch.float32
        assert marginal.to(torch.float64).sample(4, gen()).dtype == torch.float64
        assert marginal.state_dict() == {}


def test_describe_mentions_the_law():
    assert "uniform" in UniformMarginal(Sphere(3)).describe()
    assert "truncated" in LaplaceMarginal(Box(3)).describe()
    assert "p=3" in GenNormMarginal(Euclidean(3)).describe()


@pytest.mark.parametrize(
    "spec, space, key",
    [
        ("uniform", Euclidean(3), "dgp.marginal.name"),
        ("normal", Sphere(3), "dgp.marginal.name"),
        ("gennorm", Sphere(3), "dgp.marginal.name"),
        ({"name": "normal", "scale": 0.0}, Euclidean(3), "dgp.marginal.scale"),
        ({"name": "laplace", "scale": -2.0}, Box(3), "dgp.marginal.scale"),
        ({"name": "gennorm", "p": -1.0}, Box(3), "dgp.marginal.p"),
        ({"name": "normal", "loc": "0"}, Euclidean(3), "dgp.marginal.loc"),
        ({"name": "normal", "loc": math.nan}, Euclidean(3), "dgp.marginal.loc"),
        ({"name": "uniform", "scale": 1.0}, Box(3), "dgp.marginal"),
    ],
)
def test_bad_options_name_the_key(spec, space, key):
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        build(spec, space)
