import math

import numpy as np
import pytest
import torch
from scipy import special, stats

from dgp import MARGINALS, NEGATIVES
from dgp.spaces import Box, Euclidean, Sphere


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def negatives(spec, space):
    return NEGATIVES.build(spec, space, None, key="dgp.negatives")


def marginal(spec, space):
    return MARGINALS.build(spec, space, None, key="dgp.marginal")


def ks_p(x, cdf):
    return stats.kstest(np.asarray(x, dtype=np.float64).ravel(), cdf).pvalue


def test_none_returns_none():
    space = Sphere(4)
    z = space.uniform(8, gen(), torch.float32)
    assert negatives("none", space).sample(z, marginal("uniform", space), gen()) is None


def test_marginal_negatives_shapes_and_law():
    space = Box(4, low=-1.0, high=1.0)
    m = marginal("uniform", space)
    z = m.sample(8, gen(1))
    assert negatives("marginal", space).sample(z, m, gen(2)).shape == (8, 4)
    assert negatives({"name": "marginal", "num": 5}, space).sample(z, m, gen(2)).shape == (5, 4)
    per = negatives({"name": "marginal", "per_anchor": 3}, space).sample(z, m, gen(2))
    assert per.shape == (8, 3, 4)
    many = negatives({"name": "marginal", "num": 5000}, space).sample(z, m, gen(3))
    assert ks_p(many.numpy(), stats.uniform(-1.0, 2.0).cdf) > 1e-3


def mean_resultant_length(n, kappa):
    return special.ive(n / 2, kappa) / special.ive(n / 2 - 1, kappa)


@pytest.mark.parametrize("radius, beta", [(1.0, 0.5), (1.0, 3.0), (2.0, 1.0)])
def test_tilted_on_the_sphere_is_vmf_with_kappa_beta_r2(radius, beta):
    n, batch, k = 10, 2000, 8
    space = Sphere(n, radius=radius)
    m = marginal("uniform", space)
    z = m.sample(batch, gen(4))
    z_neg = negatives({"name": "tilted", "beta": beta, "num": k}, space).sample(z, m, gen(5))
    assert z_neg.shape == (batch, k, n)
    assert torch.allclose(z_neg.norm(dim=2), torch.full((batch, k), radius), rtol=1e-5)
    cos = (torch.einsum("bn,bkn->bk", z, z_neg) / radius**2).double()
    expected = mean_resultant_length(n, beta * radius**2)
    assert abs(cos.mean().item() - expected) < 5 * cos.std().item() / math.sqrt(batch * k)


def tilted_uniform_mean(t, low, high):
    """Mean of the density ∝ exp(t x) on [low, high], t != 0."""
    return (high * math.exp(t * high) - low * math.exp(t * low)) / (math.exp(t * high) - math.exp(t * low)) - 1 / t


@pytest.mark.parametrize("method, pool", [("auto", 4096), ("resample", 20_000)])
def test_tilted_uniform_box_matches_the_closed_form(method, pool):
    space, beta = Box(3), 4.0
    m = marginal("uniform", space)
    anchor = torch.tensor([0.2, 0.9, -0.5])
    z = anchor.expand(64, 3)
    spec = {"name": "tilted", "beta": beta, "num": 200, "method": method, "pool": pool}
    z_neg = negatives(spec, space).sample(z, m, gen(6))
    assert z_neg.shape == (64, 200, 3) and space.contains(z_neg.reshape(-1, 3), atol=0.0).all()
    means = z_neg.reshape(-1, 3).double().mean(0)
    for j, a in enumerate(anchor.tolist()):
        expected = tilted_uniform_mean(beta * a, 0.0, 1.0)
        tol = 5 * 0.3 / math.sqrt(64 * 200) if method == "auto" else 0.02
        assert abs(means[j].item() - expected) < tol


@pytest.mark.parametrize("beta", [0.0, 1e-9])
def test_resampling_at_beta_zero_gives_the_marginal(beta):
    space = Euclidean(2)
    m = marginal({"name": "laplace", "scale": 0.5}, space)
    z = m.sample(200, gen(7))
    spec = {"name": "tilted", "beta": beta, "num": 10, "pool": 50_000, "method": "resample"}
    z_neg = negatives(spec, space).sample(z, m, gen(8))
    assert z_neg.shape == (200, 10, 2)
    assert ks_p(z_neg.numpy(), stats.laplace(0, 0.5).cdf) > 1e-3


def test_resampled_dot_product_grows_with_beta():
    space = Euclidean(4)
    m = marginal({"name": "laplace", "scale": 0.5}, space)
    z = m.sample(1000, gen(9))
    means = []
    for beta in (0.0, 0.5, 1.0, 2.0):
        z_neg = negatives({"name": "tilted", "beta": beta, "num": 8}, space).sample(z, m, gen(10))
        means.append(torch.einsum("bn,bkn->bk", z, z_neg).mean().item())
    assert abs(means[0]) < 0.05
    assert all(b - a > 0.05 for a, b in zip(means, means[1:]))


def test_normal_marginal_tilt_is_a_shifted_normal():
    space, beta, loc, s = Euclidean(3), 0.8, 0.5, 0.7
    m = marginal({"name": "normal", "loc": loc, "scale": s}, space).to(torch.float64)
    z = m.sample(500, gen(11))
    exact = negatives({"name": "tilted", "beta": beta, "num": 40}, space).sample(z, m, gen(12))
    resid = (exact - beta * s**2 * z.unsqueeze(1)).numpy()
    assert ks_p(resid, stats.norm(loc, s).cdf) > 1e-3
    anchor = torch.tensor([[1.0, -2.0, 0.0]], dtype=torch.float64)
    spec = {"name": "tilted", "beta": beta, "num": 4000, "method": "resample", "pool": 50_000}
    approx = negatives(spec, space).sample(anchor, m, gen(13))[0]
    assert torch.allclose(approx.mean(0), loc + beta * s**2 * anchor[0], atol=0.05)


def test_box_normal_tilt_stays_in_the_box_and_matches_resampling():
    space = Box(2)
    m = marginal({"name": "normal", "scale": 0.3}, space)
    anchor = torch.tensor([[0.9, 0.1]])
    exact = negatives({"name": "tilted", "beta": 3.0, "num": 4000}, space).sample(anchor, m, gen(14))[0]
    spec = {"name": "tilted", "beta": 3.0, "num": 4000, "method": "resample", "pool": 50_000}
    approx = negatives(spec, space).sample(anchor, m, gen(15))[0]
    assert space.contains(exact, atol=0.0).all()
    assert torch.allclose(exact.mean(0), approx.mean(0), atol=0.03)


@pytest.mark.parametrize("method", ["auto", "resample"])
def test_shapes_dtype_and_determinism(method):
    space = Sphere(5)
    m = marginal("uniform", space).to(torch.float64)
    z = m.sample(16, gen(16))
    neg = negatives({"name": "tilted", "beta": 2.0, "num": 3, "method": method, "pool": 256}, space)
    a, b, c = neg.sample(z, m, gen(17)), neg.sample(z, m, gen(17)), neg.sample(z, m, gen(18))
    assert a.shape == (16, 3, 5) and a.dtype == torch.float64
    assert torch.equal(a, b) and not torch.equal(a, c)


@pytest.mark.parametrize(
    "spec, key",
    [
        ({"name": "tilted", "beta": -0.1}, "dgp.negatives.beta"),
        ({"name": "tilted", "beta": math.nan}, "dgp.negatives.beta"),
        ({"name": "tilted", "num": 0}, "dgp.negatives.num"),
        ({"name": "tilted", "num": 2.0}, "dgp.negatives.num"),
        ({"name": "tilted", "pool": 0}, "dgp.negatives.pool"),
        ({"name": "tilted", "method": "exact"}, "dgp.negatives.method"),
        ({"name": "marginal", "num": 0}, "dgp.negatives.num"),
        ({"name": "marginal", "per_anchor": 0}, "dgp.negatives.per_anchor"),
        ({"name": "marginal", "num": 4, "per_anchor": 2}, "dgp.negatives.per_anchor"),
        ({"name": "none", "num": 4}, "dgp.negatives"),
    ],
)
def test_bad_options_name_the_key(spec, key):
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        negatives(spec, Sphere(3))
