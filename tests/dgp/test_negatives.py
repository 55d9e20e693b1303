import math
import re
import warnings

import numpy as np
import pytest
import torch
from scipy import special, stats

from dgp import MARGINALS, NEGATIVES
from dgp.base import Marginal
from dgp.negatives import LowEffectiveSampleSize, effective_sample_size
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
    # on the box: on R^4 these anchors' Laplace tilts are not normalisable (test_laplace_tilt_beyond_...)
    space = Box(4, low=-1.0, high=1.0)
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
        ({"name": "tilted", "min_ess": -1.0}, "dgp.negatives.min_ess"),
        ({"name": "tilted", "max_pool": 0}, "dgp.negatives.max_pool"),
        ({"name": "tilted", "target_ess": 0.5}, "dgp.negatives.target_ess"),
        ({"name": "tilted", "target_ess": "high"}, "dgp.negatives.target_ess"),
        ({"name": "tilted", "target_ess": 100, "pool": 64, "max_pool": 32}, "dgp.negatives.max_pool"),
        ({"name": "tilted", "target_ess": 100, "pool": 16, "max_pool": 64}, "dgp.negatives.target_ess"),
        ({"name": "marginal", "num": 0}, "dgp.negatives.num"),
        ({"name": "marginal", "per_anchor": 0}, "dgp.negatives.per_anchor"),
        ({"name": "marginal", "num": 4, "per_anchor": 2}, "dgp.negatives.per_anchor"),
        ({"name": "none", "num": 4}, "dgp.negatives"),
    ],
)
def test_bad_options_name_the_key(spec, key):
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        negatives(spec, Sphere(3))


# --- tilts that are not normalisable -----------------------------------------------------------------


def beta_error(value):
    key = rf"dgp\.negatives\.beta={re.escape(repr(value))} is invalid: "
    return pytest.raises(ValueError, match=key + ".*not normalisable")


@pytest.mark.parametrize(
    "spec, space, limit",
    [
        ("uniform", Sphere(3), math.inf),
        ("uniform", Box(3), math.inf),
        ({"name": "normal", "scale": 2.0}, Euclidean(3), math.inf),
        ({"name": "laplace", "scale": 0.5}, Euclidean(3), 2.0),
        ({"name": "laplace", "scale": 0.5}, Box(3), math.inf),
        ({"name": "gennorm", "scale": 0.25, "p": 1.0}, Euclidean(3), 4.0),
        ({"name": "gennorm", "p": 0.5}, Euclidean(3), 0.0),
        ({"name": "gennorm", "p": 0.5}, Box(3), math.inf),
        ({"name": "gennorm", "p": 1.5}, Euclidean(3), math.inf),
    ],
)
def test_tilt_limits_of_the_marginals(spec, space, limit):
    assert marginal(spec, space).tilt_limit() == limit


def test_laplace_tilt_beyond_one_over_scale_is_rejected_before_any_draw():
    space = Euclidean(4)
    m = marginal({"name": "laplace", "scale": 0.5}, space)
    z = m.sample(1000, gen(9))
    neg = negatives({"name": "tilted", "beta": 2.0, "num": 8}, space)
    g = gen(10)
    state = g.get_state()
    with beta_error(2.0) as info:
        neg.sample(z, m, g)
    largest = z.abs().max().item()
    message = str(info.value)
    assert f"beta·max|z_i| = {2.0 * largest:.4g} ≥ 1/scale = 2 for the anchors of this batch" in message
    assert "box space" in message
    assert torch.equal(g.get_state(), state)  # nothing was drawn


def test_laplace_tilt_limit_is_strict_and_depends_on_the_anchors():
    space = Euclidean(2)
    m = marginal({"name": "laplace", "scale": 0.5}, space).to(torch.float64)
    z = torch.tensor([[0.5, -0.5], [0.25, 0.0]], dtype=torch.float64)  # max |z_i| = 0.5: beta < 2 / 0.5 = 4
    spec = {"name": "tilted", "num": 3, "pool": 512, "min_ess": 0}
    assert negatives({**spec, "beta": 3.99}, space).sample(z, m, gen(1)).shape == (2, 3, 2)
    with beta_error(4.0) as info:
        negatives({**spec, "beta": 4.0}, space).sample(z, m, gen(1))
    assert "use beta < 4 for these anchors" in str(info.value)
    assert negatives({**spec, "beta": 7.99}, space).sample(z[1:], m, gen(1)).shape == (1, 3, 2)


def test_gennorm_with_p_one_has_the_laplace_condition():
    space = Euclidean(2)
    m = marginal({"name": "gennorm", "scale": 2.0, "p": 1.0}, space)
    z = torch.tensor([[1.0, -0.5]])
    spec = {"name": "tilted", "num": 2, "min_ess": 0}
    assert negatives({**spec, "beta": 0.49}, space).sample(z, m, gen(1)).shape == (1, 2, 2)
    with beta_error(0.5):
        negatives({**spec, "beta": 0.5}, space).sample(z, m, gen(1))


def test_gennorm_below_p_one_on_rn_rejects_every_positive_beta():
    space = Euclidean(3)
    m = marginal({"name": "gennorm", "p": 0.5}, space)
    neg = negatives({"name": "tilted", "beta": 1e-6, "num": 2}, space)
    with beta_error(1e-6) as info:
        neg.check_marginal(m)  # decided without anchors
    assert "for any beta > 0" in str(info.value) and "dgp.marginal.p >= 1" in str(info.value)
    g = gen(2)
    state = g.get_state()
    with beta_error(1e-6):
        neg.sample(torch.full((4, 3), 1e-3), m, g)
    assert torch.equal(g.get_state(), state)
    z = m.sample(4, gen(3))
    assert negatives({"name": "tilted", "beta": 0.0, "num": 2}, space).sample(z, m, gen(4)).shape == (4, 2, 3)


@pytest.mark.parametrize("spec", [{"name": "laplace", "scale": 0.5}, {"name": "gennorm", "p": 0.5}])
def test_the_same_tilts_on_a_box_are_accepted(spec):
    space = Box(4, low=-1.0, high=1.0)
    m = marginal(spec, space)
    z = m.sample(64, gen(5))
    neg = negatives({"name": "tilted", "beta": 50.0, "num": 4, "pool": 256, "min_ess": 0}, space)
    neg.check_marginal(m)
    z_neg = neg.sample(z, m, gen(6))
    assert z_neg.shape == (64, 4, 4) and space.contains(z_neg.reshape(-1, 4), atol=0.0).all()


@pytest.mark.parametrize("method", ["auto", "resample"])
def test_normal_on_rn_accepts_any_beta(method):
    space = Euclidean(3)
    m = marginal("normal", space)
    z = 10.0 * m.sample(32, gen(7))
    neg = negatives({"name": "tilted", "beta": 100.0, "num": 2, "method": method, "pool": 64, "min_ess": 0}, space)
    neg.check_marginal(m)
    assert torch.isfinite(neg.sample(z, m, gen(8))).all()


# --- effective sample size of the importance resampling ----------------------------------------------


def test_effective_sample_size_closed_forms():
    equal = effective_sample_size(torch.full((2, 8), 1 / 8, dtype=torch.float64))  # beta = 0: the pool size
    assert torch.equal(equal, torch.full((2,), 8.0, dtype=torch.float64))
    sevenths = effective_sample_size(torch.full((7,), 1 / 7, dtype=torch.float64))
    assert math.isclose(sevenths.item(), 7.0, rel_tol=1e-14)
    assert math.isclose(effective_sample_size(torch.full((1000,), 1e-3)).item(), 1000.0, rel_tol=1e-5)
    w = torch.tensor([[0.25, 0.25, 0.5], [1.0, 0.0, 0.0], [2.0, 1.0, 1.0]], dtype=torch.float64)
    expected = torch.tensor([1 / (2 / 16 + 1 / 4), 1.0, 16 / 6], dtype=torch.float64)
    assert torch.allclose(effective_sample_size(w), expected, rtol=1e-14)


class FixedPool(Marginal):
    """A stand-in marginal whose draws are fixed points, cycled: it makes the resampling weights known."""

    def __init__(self, points):
        super().__init__()
        self.points = points

    def sample(self, batch, generator):
        reps = -(-batch // len(self.points))
        return self.points.repeat(reps, 1)[:batch]

    def describe(self):
        return "fixed points"


def test_the_sampler_records_the_closed_form_ess_of_known_weights():
    c, beta = 2.0, math.log(2.0) / 2.0
    m = FixedPool(torch.tensor([[0.0], [0.0], [c]], dtype=torch.float64))
    z = torch.tensor([[1.0], [0.0]], dtype=torch.float64)  # weights (1/4, 1/4, 1/2), then (1/3, 1/3, 1/3)
    neg = negatives({"name": "tilted", "beta": beta, "num": 5, "pool": 3, "min_ess": 0}, Euclidean(1))
    assert neg.last_ess is None
    assert neg.sample(z, m, gen(1)).shape == (2, 5, 1)
    ess = neg.last_ess
    assert ess.pool == 3
    assert math.isclose(ess.min, 8 / 3, rel_tol=1e-12) and math.isclose(ess.mean, (8 / 3 + 3) / 2, rel_tol=1e-12)
    assert "effective sample size 2.83 on average, 2.67 at least, from 3 draws" in neg.describe()


def test_ess_is_the_pool_at_a_vanishing_tilt_and_absent_without_resampling():
    space = Sphere(4)
    m = marginal("uniform", space)
    z = m.sample(32, gen(2))
    neg = negatives({"name": "tilted", "beta": 1e-12, "num": 2, "pool": 300, "method": "resample"}, space)
    neg.sample(z, m, gen(3))
    assert math.isclose(neg.last_ess.min, 300, rel_tol=1e-5) and math.isclose(neg.last_ess.mean, 300, rel_tol=1e-5)
    for spec in ({"beta": 0.0, "method": "resample"}, {"beta": 2.0, "method": "auto"}):
        exact = negatives({"name": "tilted", "num": 2, **spec}, space)
        exact.sample(z, m, gen(3))
        assert exact.last_ess is None and "last call" not in exact.describe()


def test_low_ess_warns_once_and_not_at_beta_zero():
    space = Sphere(10)
    m = marginal("uniform", space)
    z = m.sample(64, gen(4))
    spec = {"name": "tilted", "num": 4, "pool": 16, "method": "resample"}
    neg = negatives({**spec, "beta": 50.0}, space)
    with pytest.warns(LowEffectiveSampleSize, match=r"dgp\.negatives\.min_ess=50"):
        neg.sample(z, m, gen(5))
    assert 1.0 <= neg.last_ess.min <= neg.last_ess.mean < 50
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        neg.sample(z, m, gen(6))  # warned once per sampler
        negatives({**spec, "beta": 0.0}, space).sample(z, m, gen(5))
        negatives({**spec, "beta": 50.0, "min_ess": 0}, space).sample(z, m, gen(5))
        negatives({**spec, "beta": 1e-9, "pool": 4096}, space).sample(z, m, gen(5))
    capped = negatives({**spec, "beta": 50.0, "target_ess": 60, "max_pool": 64}, space)
    with pytest.warns(LowEffectiveSampleSize, match=r"raise dgp\.negatives\.max_pool \(the pool reached it"):
        capped.sample(z, m, gen(5))
    assert capped.last_ess.pool == 64 and "doubled up to 64" in capped.describe()


def test_target_ess_keeps_the_fixed_pool_draws_when_the_first_pool_suffices():
    space = Box(3)
    m = marginal("uniform", space)
    z = m.sample(16, gen(7))
    spec = {"name": "tilted", "beta": 0.5, "num": 3, "pool": 1024, "method": "resample"}
    fixed = negatives(spec, space)
    grown = negatives({**spec, "target_ess": 100}, space)
    assert torch.equal(fixed.sample(z, m, gen(8)), grown.sample(z, m, gen(8)))
    assert grown.last_ess.pool == 1024 and grown.last_ess.mean >= 100


def mean_resultant_length_of(z, z_neg):
    return torch.einsum("bn,bkn->bk", z, z_neg).double().mean().item()


def test_target_ess_grows_the_pool_and_removes_the_bias_on_the_sphere():
    # Uniform on S^2 with resampling forced: the exact tilt is vMF(z, beta), E[z^T z-] = A_3(beta).
    n, beta, calls, target = 3, 20.0, 24, 100.0
    space = Sphere(n)
    m = marginal("uniform", space)
    expected = mean_resultant_length(n, beta)
    gap = mean_resultant_length(n, 2 * beta) - expected  # first-order bias: -gap / ESS
    spec = {"name": "tilted", "beta": beta, "num": 4, "pool": 16, "method": "resample", "min_ess": 0}
    results = {}
    for name, extra in (("fixed", {}), ("grown", {"target_ess": target, "max_pool": 1 << 14})):
        neg = negatives({**spec, **extra}, space)
        g = gen(11)
        means, pools = [], []
        for _ in range(calls):  # independent calls: fresh anchors and a fresh pool each
            z = m.sample(64, g)
            means.append(mean_resultant_length_of(z, neg.sample(z, m, g)))
            pools.append(neg.last_ess.pool)
            assert name == "fixed" or neg.last_ess.mean >= target * (1 - 1e-4)  # float32 weights at the end
        means = np.asarray(means)
        results[name] = (means.mean() - expected, 5 * means.std(ddof=1) / math.sqrt(calls), pools)
    bias, tol, pools = results["fixed"]
    assert set(pools) == {16} and bias < -tol  # a pool of 16 gives negatives too far from the anchor
    bias_grown, tol_grown, pools_grown = results["grown"]
    assert min(pools_grown) > 16 and max(pools_grown) <= 1 << 14
    assert abs(bias_grown) < tol_grown + gap / target
    assert abs(bias_grown) + tol_grown < abs(bias)


def test_a_process_with_tilts_that_no_anchor_can_normalise_is_rejected_when_built():
    import dgp

    config = {"dim": 3, "space": {"name": "euclidean"}, "marginal": {"name": "gennorm", "p": 0.5},
              "conditional": {"name": "normal", "sigma": 0.1}, "negatives": {"name": "tilted", "beta": 0.1}}
    with pytest.raises(ValueError, match=r"dgp.negatives.beta=0.1 is invalid.*not normalisable for any beta"):
        dgp.check_process(config, seed=0)
    dgp.check_process({**config, "negatives": {"name": "tilted", "beta": 0.0}}, seed=0)
