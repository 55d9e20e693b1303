import math

import numpy as np
import pytest
import torch
from scipy import special, stats

from dgp.conditionals.vmf import VonMisesFisher, sample_vmf
from dgp import CONDITIONALS
from dgp.spaces import Box, Euclidean, Sphere


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def unit(n, seed, dtype=torch.float64):
    v = torch.randn(n, generator=gen(seed), dtype=dtype)
    return v / v.norm()


def mean_resultant_length(n, kappa):
    """A_n(κ) = I_{n/2}(κ) / I_{n/2-1}(κ) = E[μᵀx] under vMF(μ, κ) on S^{n-1}."""
    return special.ive(n / 2, kappa) / special.ive(n / 2 - 1, kappa)


@pytest.mark.parametrize("n", [2, 3, 10])
@pytest.mark.parametrize("kappa", [0.5, 5.0, 50.0, 1000.0])
def test_mean_resultant_length(n, kappa):
    batch = 20_000
    mu = unit(n, seed=n)
    x = sample_vmf(mu.expand(batch, n), kappa, gen(1))
    cos = (x @ mu).numpy()
    assert abs(cos.mean() - mean_resultant_length(n, kappa)) < 5 * cos.std() / math.sqrt(batch)


@pytest.mark.parametrize("n, kappa", [(3, 2.0), (3, 50.0), (10, 1.0), (10, 20.0)])
def test_two_sample_against_scipy(n, kappa):
    batch = 6000
    mu = unit(n, seed=3)
    ours = sample_vmf(mu.expand(batch, n), kappa, gen(2)).numpy()
    ref = stats.vonmises_fisher(mu.numpy(), kappa).rvs(batch, random_state=np.random.default_rng(0))
    a = unit(n, seed=4).numpy()
    assert stats.ks_2samp(ours @ mu.numpy(), ref @ mu.numpy()).pvalue > 1e-3
    assert stats.ks_2samp(ours @ a, ref @ a).pvalue > 1e-3


@pytest.mark.parametrize("radius", [1.0, 2.5])
def test_support_and_concentration_on_a_sphere_of_any_radius(radius):
    space = Sphere(10, radius=radius)
    z = space.uniform(4000, gen(5), torch.float32)
    z_pos = VonMisesFisher(space, kappa=5.0).sample(z, gen(6))
    assert z_pos.dtype == torch.float32 and z_pos.shape == z.shape
    assert torch.allclose(z_pos.norm(dim=1), torch.full((4000,), radius), rtol=1e-5)
    cos = ((z * z_pos).sum(1) / radius**2).double()
    assert abs(cos.mean().item() - mean_resultant_length(10, 5.0)) < 5 * cos.std().item() / math.sqrt(4000)


def test_float64_in_float64_out():
    mu = torch.nn.functional.normalize(torch.randn(1000, 7, generator=gen(7), dtype=torch.float64), dim=1)
    x = sample_vmf(mu, 3.0, gen(8))
    assert x.dtype == torch.float64
    assert (x.norm(dim=1) - 1).abs().max() < 1e-12


@pytest.mark.parametrize("n", [2, 3, 10])
def test_large_and_small_concentrations(n):
    batch = 20_000
    mu = unit(n, seed=9)
    x = sample_vmf(mu.expand(batch, n), 1e4, gen(10))
    gap = (1 - x @ mu).numpy()
    assert np.isfinite(x.numpy()).all() and (gap >= -1e-12).all()
    expected_gap = 1 - mean_resultant_length(n, 1e4)
    assert abs(gap.mean() / expected_gap - 1) < 5 * gap.std() / gap.mean() / math.sqrt(batch)
    y = sample_vmf(mu.expand(batch, n), 1e-3, gen(11))
    assert y.mean(0).abs().max() < 5 / math.sqrt(n * batch) + 1e-3
    second = (y.T @ y / batch).numpy()
    assert np.abs(second - np.eye(n) / n).max() < 6 / math.sqrt(batch) / n + 0.01


def test_each_row_has_its_own_direction_and_concentration():
    """Rows with μ = ±e_1, μ near e_1 and a general μ, two concentrations: per-row μᵀx means."""
    n, per = 5, 5000
    e1 = torch.zeros(n, dtype=torch.float64)
    e1[0] = 1
    near = e1 + 1e-9 * unit(n, seed=12)
    mus = [e1, -e1, near / near.norm(), unit(n, seed=13)]
    mu = torch.cat([m.expand(per, n) for m in mus])
    kappa = torch.tensor([2.0, 30.0]).repeat_interleave(per // 2).repeat(len(mus)).double()
    x = sample_vmf(mu, kappa, gen(14))
    cos = (x * mu).sum(1).view(len(mus), 2, per // 2)
    for j, k in enumerate((2.0, 30.0)):
        c = cos[:, j]
        tol = 5 * c.std(dim=1) / math.sqrt(per // 2)
        assert ((c.mean(dim=1) - mean_resultant_length(n, k)).abs() < tol).all()


def test_deterministic_given_the_generator():
    mu = torch.nn.functional.normalize(torch.randn(64, 4, generator=gen(15)), dim=1)
    assert torch.equal(sample_vmf(mu, 2.0, gen(16)), sample_vmf(mu, 2.0, gen(16)))
    assert not torch.equal(sample_vmf(mu, 2.0, gen(16)), sample_vmf(mu, 2.0, gen(17)))


@pytest.mark.parametrize("kappa", [0.0, -1.0, math.nan, math.inf, "5"])
def test_bad_kappa_names_the_key(kappa):
    with pytest.raises(ValueError, match=r"dgp\.conditional\.kappa"):
        CONDITIONALS.build({"name": "vmf", "kappa": kappa}, Sphere(3), None, key="dgp.conditional")


@pytest.mark.parametrize("space", [Box(3), Euclidean(3)])
def test_needs_a_sphere(space):
    with pytest.raises(ValueError, match=r"dgp\.conditional\.name.*sphere"):
        CONDITIONALS.build({"name": "vmf", "kappa": 1.0}, space, None, key="dgp.conditional")


def test_bad_arguments_of_the_plain_function():
    mu = torch.nn.functional.normalize(torch.randn(4, 3, generator=gen(20)), dim=1)
    with pytest.raises(ValueError, match="kappa"):
        sample_vmf(mu, -1.0, gen())
    with pytest.raises(ValueError, match="kappa"):
        sample_vmf(mu, torch.ones(3), gen())
    with pytest.raises(ValueError, match="shape"):
        sample_vmf(mu[:, :1], 1.0, gen())
