import math

import numpy as np
import pytest
import torch
from scipy import stats

from dgp.conditionals.isotropic import GenNormConditional, LaplaceConditional, NormalConditional
from dgp import CONDITIONALS
from dgp.spaces import Box, Euclidean, Sphere


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def build(spec, space):
    return CONDITIONALS.build(spec, space, None, key="dgp.conditional")


def ks_p(x, cdf):
    return stats.kstest(np.asarray(x, dtype=np.float64).ravel(), cdf).pvalue


INCREMENTS = [
    ({"name": "normal", "sigma": 0.3}, stats.norm(0, 0.3), 0.3 * math.sqrt(2 / math.pi)),
    ({"name": "laplace", "scale": 0.3}, stats.laplace(0, 0.3), 0.3),
    ({"name": "gennorm", "scale": 0.3, "p": 3.0}, stats.gennorm(3.0, 0, 0.3),
     0.3 * math.gamma(2 / 3) / math.gamma(1 / 3)),
    ({"name": "gennorm", "scale": 0.2, "p": 0.7}, stats.gennorm(0.7, 0, 0.2),
     0.2 * math.gamma(2 / 0.7) / math.gamma(1 / 0.7)),
]


@pytest.mark.parametrize("spec, law, mean_abs", INCREMENTS)
def test_increments_on_rn_match_scipy(spec, law, mean_abs):
    """KS against scipy, and E|δ| = λ·Γ(2/p)/Γ(1/p) (σ·sqrt(2/π) for the normal) written out."""
    z = torch.randn(10_000, 5, generator=gen(1), dtype=torch.float64)
    z_pos = build(spec, Euclidean(5)).sample(z, gen(2))
    assert z_pos.dtype == torch.float64 and z_pos.shape == z.shape
    step = (z_pos - z).numpy().ravel()
    assert ks_p(step, law.cdf) > 1e-3
    assert abs(np.abs(step).mean() - mean_abs) < 5 * np.abs(step).std() / math.sqrt(step.size)


def test_sphere_positive_is_the_projected_gaussian_step():
    space = Sphere(6, radius=2.5)
    z = space.uniform(500, gen(3), torch.float64)
    z_pos = NormalConditional(space, sigma=0.2).sample(z, gen(4))
    step = 0.2 * torch.randn(z.shape, generator=gen(4), dtype=torch.float64)
    expected = 2.5 * (z + step) / (z + step).norm(dim=1, keepdim=True)
    assert torch.allclose(z_pos, expected, atol=1e-12)


@pytest.mark.parametrize("spec", [case[0] for case in INCREMENTS])
@pytest.mark.parametrize("radius", [1.0, 2.5])
def test_sphere_support(spec, radius):
    space = Sphere(10, radius=radius)
    z = space.uniform(3000, gen(5), torch.float32)
    z_pos = build(spec, space).sample(z, gen(6))
    assert z_pos.dtype == torch.float32
    assert torch.allclose(z_pos.norm(dim=1), torch.full((3000,), radius), rtol=1e-5)
    assert ((z * z_pos).sum(1) > 0).float().mean() > 0.9


@pytest.mark.parametrize(
    "spec",
    [
        {"name": "normal"},
        {"name": "laplace", "scale": 3.0},
        {"name": "gennorm", "p": 0.5},
        {"name": "gennorm", "scale": 40.0},
    ],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_box_support(spec, dtype):
    space = Box(4, low=-1.0, high=2.0)
    z = space.uniform(3000, gen(7), dtype)
    z[:500] = -1.0
    z[500:1000] = 2.0
    z_pos = build(spec, space).sample(z, gen(8))
    assert z_pos.dtype == dtype
    assert space.contains(z_pos, atol=0.0).all()


def laplace_cdf(y):
    return np.where(y <= 0, 0.5 * np.exp(np.minimum(y, 0)), 1 - 0.5 * np.exp(-np.maximum(y, 0)))


def test_box_coordinates_follow_the_truncated_laws():
    """Anchors close to the lower bound: each coordinate of z+ follows the 1-D law truncated to the box."""
    space, c, s = Box(3, low=0.0, high=1.0), 0.02, 0.05
    z = torch.full((8000, 3), c, dtype=torch.float64)
    x = NormalConditional(space, sigma=s).sample(z, gen(9)).numpy()
    assert ks_p(x, stats.truncnorm(-c / s, (1 - c) / s, loc=c, scale=s).cdf) > 1e-3
    x = LaplaceConditional(space, scale=s).sample(z, gen(10)).numpy()
    lo, hi = laplace_cdf(-c / s), laplace_cdf((1 - c) / s)
    assert ks_p(x, lambda t: (laplace_cdf((np.clip(t, 0, 1) - c) / s) - lo) / (hi - lo)) > 1e-3
    x = GenNormConditional(space, scale=s, p=3.0).sample(z, gen(11)).numpy()
    d = stats.gennorm(3.0, loc=c, scale=s)
    assert ks_p(x, lambda t: (d.cdf(np.clip(t, 0, 1)) - d.cdf(0)) / (d.cdf(1) - d.cdf(0))) > 1e-3


def test_defaults_are_z21s_scale():
    space = Euclidean(3)
    assert NormalConditional(space).sigma == 0.05
    assert LaplaceConditional(space).scale == 0.05
    assert GenNormConditional(space).scale == 0.05 and GenNormConditional(space).p == 3.0
    for name in ("normal", "laplace", "gennorm"):
        assert "0.05" in build({"name": name}, Box(2)).describe()


@pytest.mark.parametrize(
    "spec, key",
    [
        ({"name": "normal", "sigma": 0.0}, "dgp.conditional.sigma"),
        ({"name": "normal", "sigma": -1.0}, "dgp.conditional.sigma"),
        ({"name": "laplace", "scale": -0.1}, "dgp.conditional.scale"),
        ({"name": "gennorm", "scale": 0.0}, "dgp.conditional.scale"),
        ({"name": "gennorm", "p": 0.0}, "dgp.conditional.p"),
        ({"name": "gennorm", "p": math.inf}, "dgp.conditional.p"),
        ({"name": "laplace", "lambda_": 0.1}, "dgp.conditional"),
    ],
)
def test_bad_options_name_the_key(spec, key):
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        build(spec, Sphere(3))


def test_deterministic_given_the_generator():
    space = Box(5)
    z = space.uniform(100, gen(12), torch.float32)
    for spec in ({"name": "normal"}, {"name": "laplace"}, {"name": "gennorm"}):
        cond = build(spec, space)
        assert torch.equal(cond.sample(z, gen(13)), cond.sample(z, gen(13)))
