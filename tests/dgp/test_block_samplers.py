"""Rejection sampling in fixed blocks (dgp.blocks, sampler 2) against the laws and the earlier rounds (sampler 1)."""

import math

import numpy as np
import pytest
import torch
from scipy import integrate, special, stats

import dgp
from dgp import blocks, truncation
from dgp.conditionals.anisotropic import Anisotropic
from dgp.conditionals.vmf import sample_vmf, wood_acceptance
from dgp.spaces import Sphere


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def test_the_plan_leaves_a_row_short_with_probability_below_its_bound():
    for rows in (1, 128, 6144, 98304):
        for acceptance in (0.05, 0.3, 0.7, 0.99):
            per_round, capacities, final, per_row = blocks.plan(rows, acceptance)
            miss = (1.0 - acceptance) ** per_round
            left = [miss ** (s + 1) for s in range(len(capacities) + 1)]
            overflow = sum(stats.binom.sf(c, rows, q) for c, q in zip([*capacities, final], left))
            assert overflow + final * (1.0 - acceptance) ** per_row <= blocks.SHORTFALL_PROBABILITY
    assert blocks.plan(10, 1.0) == (1, (), 0, 0)
    with pytest.raises(ValueError, match="acceptance=0 is invalid"):
        blocks.plan(10, 0)


def test_every_row_takes_its_first_accepted_proposal_and_shortfalls_are_counted():
    """Proposals of row i are i + 0.5, i + 1.5, ...: a row that accepts only its k-th proposal gets i + k - 0.5,
    whatever the other rows do; a row that accepts none keeps its first proposal and is counted."""
    rows = 50
    need = torch.arange(rows) % 4  # row i accepts from its (i mod 4)-th further proposal on
    seen = torch.zeros(rows, dtype=torch.long)
    never = 7

    def propose(idx):
        k = torch.zeros_like(idx)
        for j in range(idx.numel()):  # proposals of one call come slot-minor: count them in that order
            k[j] = seen[idx[j]]
            seen[idx[j]] += 1
        return idx.double() + k.double() + 0.5, (k >= need.index_select(0, idx)) & (idx != never)

    short = blocks.Shortfalls()
    out = blocks.first_accepted(rows, 0.25, propose, torch.device("cpu"), short)
    expected = torch.arange(rows).double() + need.double() + 0.5
    expected[never] = never + 0.5
    assert torch.equal(out, expected) and short.total() == 1


@pytest.mark.parametrize("n", [2, 3, 10])
@pytest.mark.parametrize("kappa", [0.0, 1.0, 50.0])
def test_wood_acceptance_matches_its_integral_and_falls_with_kappa(n, kappa):
    m = n - 1
    b = m / (2 * kappa + math.sqrt(4 * kappa**2 + m * m))
    x0 = (1 - b) / (1 + b)

    def accept(z):  # the acceptance probability of a proposal Z = z, times the Beta(m/2, m/2) density
        d = 1 - (1 - b) * z
        w = (1 - (1 + b) * z) / d
        return math.exp(kappa * (w - x0) + m * math.log((1 + b) / (2 * d))) * stats.beta.pdf(z, m / 2, m / 2)

    direct, _ = integrate.quad(accept, 0, 1, limit=200)
    assert wood_acceptance(kappa, n) == pytest.approx(direct, rel=1e-6)
    assert wood_acceptance(kappa, n) >= wood_acceptance(kappa + 10.0, n) >= wood_acceptance(1e8, n) > 0.65


def _vmf_cosines(kappa, n, sampler, size=40000, seed=0):
    mu = torch.zeros(size, n, dtype=torch.float64)
    mu[:, 0] = 1.0
    return sample_vmf(mu, kappa, gen(seed), sampler=sampler)[:, 0].numpy()


def _vmf_cdf(kappa, n):
    """The CDF of w = μᵀx under vMF(κ) on S^{n-1}: density ∝ exp(κw)(1 - w²)^{(n-3)/2} on [-1, 1], by quadrature."""
    def density(w):
        return math.exp(kappa * (w - 1.0)) * (1 - w * w) ** ((n - 3) / 2)

    def mass(v):  # the mass sits within a few 1/κ of w = 1: split there
        knee = max(-1.0, 1.0 - 30.0 / max(kappa, 1.0))
        head = integrate.quad(density, -1, min(v, knee), limit=200)[0]
        return head + (integrate.quad(density, knee, v, limit=200)[0] if v > knee else 0.0)

    total = mass(1.0)
    return lambda x: np.array([mass(v) / total for v in np.atleast_1d(x)])


@pytest.mark.slow
@pytest.mark.parametrize("n", [3, 10, 64])
@pytest.mark.parametrize("kappa", [0.0, 1.0, 25.0, 2000.0])
def test_blocked_vmf_cosines_follow_the_law(n, kappa):
    w = _vmf_cosines(kappa, n, sampler=2)[:4000]
    assert stats.kstest(w, _vmf_cdf(kappa, n)).pvalue > 1e-3


@pytest.mark.slow
@pytest.mark.parametrize("n,kappa", [(2, 0.5), (10, 1.0), (10, 300.0)])
def test_blocked_and_round_vmf_agree_in_distribution(n, kappa):
    assert stats.ks_2samp(_vmf_cosines(kappa, n, 1), _vmf_cosines(kappa, n, 2, seed=1)).pvalue > 1e-3


def test_blocked_vmf_with_a_concentration_per_row_and_directions():
    n, size = 5, 30000
    mu = torch.randn(size, n, generator=gen(2), dtype=torch.float64)
    kappa = torch.where(torch.arange(size) % 2 == 0, 0.0, 40.0).double()
    x = sample_vmf(mu, kappa, gen(3), check=False)
    w = (x * mu / mu.norm(dim=1, keepdim=True)).sum(1).numpy()
    for half, k in ((w[0::2], 0.0), (w[1::2], 40.0)):
        assert stats.kstest(half[:3000], _vmf_cdf(k, n)).pvalue > 1e-3
    assert torch.allclose(x.norm(dim=1), torch.ones(size, dtype=torch.float64))


def _gennorm_cdf(p, lo, hi):
    """The CDF of density ∝ exp(-|y|^p) on [lo, hi]; through the upper tail Q where 0 <= lo (far tails)."""
    if lo >= 0:
        g = lambda v: -special.gammaincc(1 / p, v**p)  # noqa: E731
    else:
        g = lambda v: np.sign(v) * special.gammainc(1 / p, np.abs(v) ** p)  # noqa: E731
    return lambda x: (g(np.clip(x, lo, hi)) - g(lo)) / (g(hi) - g(lo))


@pytest.mark.parametrize("p", [0.4, 1.0, 2.0, 5.0])
@pytest.mark.parametrize("lo,hi", [(-0.3, 4.0), (0.0, 0.01), (1.5, 1.6), (3.0, 9.0), (-2.0, 2.0), (-1e-3, 1e-3)])
def test_blocked_truncated_gennorm_follows_the_law_at_the_interval_edges(p, lo, hi):
    loc = torch.zeros(6000, dtype=torch.float64)
    y = truncation.truncated_gennorm(loc, 1.0, p, lo, hi, gen(4), sampler=2).numpy()
    assert y.min() >= lo and y.max() <= hi
    assert stats.kstest(y, _gennorm_cdf(p, lo, hi)).pvalue > 1e-3


@pytest.mark.parametrize("p", [0.3, 0.7, 3.0])
def test_blocked_and_round_truncated_gennorm_agree_in_distribution(p):
    loc = torch.linspace(-1.0, 2.0, 20000, dtype=torch.float64)
    draws = [truncation.truncated_gennorm(loc, 0.5, p, 0.0, 1.0, gen(seed), sampler=v).numpy() - loc.numpy()
             for seed, v in ((5, 1), (6, 2))]
    assert stats.ks_2samp(*draws).pvalue > 1e-3


@pytest.mark.parametrize("p", [0.3, 1.0, 2.0, 6.0])
def test_gennorm_acceptance_bounds_the_rate_around_zero_and_nearly_reaches_it(p):
    """Intervals [-s·h, h] use the untruncated law or the uniform at height 1: rate Z / min(2Γ(1 + 1/p), width)."""
    g = math.gamma(1 + 1 / p)
    h = np.logspace(-2, 2, 400)[:, None]
    lo = -np.linspace(0, 1, 41)[None, :] * h
    rate = g * (special.gammainc(1 / p, (-lo) ** p) + special.gammainc(1 / p, h**p)) / np.minimum(2 * g, h - lo)
    bound = truncation.gennorm_acceptance(p)
    assert bound <= rate.min()
    if p <= 2:  # the intervals around 0 are the worst ones: the bound is the margin times their minimum
        assert bound >= 0.99 * truncation.ACCEPTANCE_MARGIN * rate.min()


@pytest.mark.slow
def test_blocked_shell_agrees_with_the_rounds_and_stays_inside():
    space = Sphere(10)
    z = space.uniform(20000, gen(0), torch.float64)
    draws = []
    for version in (1, 2):
        cond = Anisotropic(space, lambdas="bimodal", shell=0.1)
        cond.sampler = version
        w = cond.displaced(z, gen(version))
        assert ((1 - w.norm(dim=-1)).abs() < 0.1).all()
        draws.append(w)
    assert float(cond.acceptance_rate) == pytest.approx(0.12, abs=0.04) and cond.shortfalls.total() == 0
    for j in (0, 4, 5, 9):
        assert stats.ks_2samp((draws[0] - z)[:, j], (draws[1] - z)[:, j]).pvalue > 1e-3
    assert stats.ks_2samp(draws[0].norm(dim=-1), draws[1].norm(dim=-1)).pvalue > 1e-3


def test_a_shell_that_accepts_almost_nothing_is_refused_when_built():
    with pytest.raises(ValueError, match="dgp.conditional.shell=1e-05.*widen the shell"):
        Anisotropic(Sphere(10), lambdas="bimodal", shell=1e-5)


def test_the_process_records_its_sampler_and_counts_shortfalls():
    config = {"space": "sphere", "conditional": {"name": "vmf", "kappa": 3.0}, "negatives": {"name": "tilted"}}
    process = dgp.build_process(config, seed=0)
    assert process.config["sampler"] == process.conditional.sampler == process.marginal.sampler == 2
    process.sample(256, process.make_generator(0))
    assert process.shortfalls() == 0
    earlier = dgp.build_process({**config, "sampler": 1}, seed=0)
    assert earlier.fingerprint() != process.fingerprint()
    for bad in (3, True, "2"):
        with pytest.raises(ValueError, match=f"dgp.sampler={bad!r} is invalid.*allowed: 1, 2"):
            dgp.build_process({**config, "sampler": bad})
