"""The segment-modulated sources (``segments`` marginal, ``same_segment`` conditional) against closed forms: uniform
segments, per-segment means and variances μ_u, σ_u², the standardised sources against scipy's law, positives of the
anchor's segment independent of it given u, and the labels a batch carries."""

import math

import numpy as np
import pytest
import torch
from scipy import stats

from dgp import CONDITIONALS, MARGINALS
from dgp.process import Process
from dgp.segments import SegmentsMarginal
from dgp.spaces import Box, Euclidean


def gen(seed):
    return torch.Generator().manual_seed(seed)


def marginal(n=4, seed=0, **options):
    return SegmentsMarginal(Euclidean(n), gen(seed), **options).double()


def standard_law(law):
    """scipy's law of ε (mean 0, variance 1)."""
    return stats.laplace(0, math.sqrt(0.5)) if law == "laplace" else stats.norm(0, 1)


LAWS = [{}, {"law": "normal"}, {"segments": 5, "location": 3.0, "std_low": 0.5, "std_high": 2.0},
        {"law": "normal", "segments": 3, "location": 1.0}]


@pytest.mark.parametrize("spec", LAWS)
def test_segments_are_uniform(spec):
    m = marginal(**spec)
    _, u = m.sample_labelled(60_000, gen(1))
    assert u.dtype == torch.int64 and u.shape == (60_000,)
    counts = torch.bincount(u, minlength=m.segments).numpy()
    assert len(counts) == m.segments and stats.chisquare(counts).pvalue > 1e-3


@pytest.mark.parametrize("spec", LAWS)
def test_each_segment_has_its_own_mean_and_variance(spec):
    """Per segment and coordinate: the sample mean within 5 standard errors of μ_{u,i}, the sample variance within
    5 standard errors of σ_{u,i}² (Var of the variance estimate: σ⁴ (κ + 2) / N, κ the excess kurtosis)."""
    m = marginal(**spec)
    z, u = m.sample_labelled(100_000, gen(2))
    kurtosis = 3.0 if m.law == "laplace" else 0.0
    for k in range(m.segments):
        rows = z[u == k]
        count = rows.shape[0]
        mu, sigma = m.loc[k], m.std[k]
        assert (rows.mean(0) - mu).abs().lt(5 * sigma / math.sqrt(count)).all()
        variance_se = sigma**2 * math.sqrt((kurtosis + 2) / count)
        assert (rows.var(0) - sigma**2).abs().lt(5 * variance_se).all()


@pytest.mark.parametrize("spec", LAWS)
def test_standardised_sources_follow_their_law(spec):
    m = marginal(n=3, **spec)
    z, u = m.sample_labelled(20_000, gen(3))
    eps = ((z - m.loc[u]) / m.std[u]).numpy().ravel()
    law = m.law
    assert stats.kstest(eps, standard_law(law).cdf).pvalue > 1e-3
    other = "normal" if law == "laplace" else "laplace"
    assert stats.kstest(eps, standard_law(other).cdf).pvalue < 1e-6  # power against the other law of variance 1


def test_the_modulation_is_drawn_once_from_the_stream_within_its_range():
    m = marginal(n=10, seed=4, segments=30, std_low=0.5, std_high=2.0, location=5.0)
    assert m.std.shape == m.loc.shape == (30, 10)
    assert stats.kstest(m.std.numpy().ravel(), stats.uniform(0.5, 1.5).cdf).pvalue > 1e-3
    assert stats.kstest(m.loc.numpy().ravel(), stats.uniform(-5.0, 10.0).cdf).pvalue > 1e-3
    again = marginal(n=10, seed=4, segments=30, std_low=0.5, std_high=2.0, location=5.0)
    assert torch.equal(m.std, again.std) and torch.equal(m.loc, again.loc)
    assert not torch.equal(m.std, marginal(n=10, seed=5, segments=30, std_low=0.5, std_high=2.0).std)
    centred = marginal(n=10, seed=4, segments=30, std_low=0.5, std_high=2.0)
    assert torch.equal(centred.std, m.std) and not centred.loc.any()  # σ's draws do not depend on the location
    default = marginal(n=10, seed=4)
    assert (default.std > 0).all() and (default.std <= 1).all()  # TCL's U(0, 1]


def test_equal_bounds_and_no_location_give_stationary_sources_independent_of_the_segment():
    """std_low = std_high with location 0: every σ_(u,i) is std_high and μ = 0, so z is independent of u (the
    excluded case of TCL's and GCL's theorems): the per-segment samples of |z_0| pass a Kruskal-Wallis test of one
    law, which the scale-modulated default fails."""
    m = marginal(n=3, seed=7, segments=5, std_low=0.7, std_high=0.7)
    assert torch.equal(m.std, torch.full((5, 3), 0.7, dtype=torch.float64)) and not m.loc.any()
    assert "σ = 0.7, μ = 0" in m.describe()
    z, u = m.sample_labelled(20_000, gen(8))
    assert stats.kstest((z / 0.7).numpy().ravel(), standard_law("laplace").cdf).pvalue > 1e-3

    def by_segment(sample, labels):
        return [sample[labels == k, 0].abs().numpy() for k in range(5)]

    assert stats.kruskal(*by_segment(z, u)).pvalue > 1e-3
    modulated = marginal(n=3, seed=7, segments=5)
    zm, um = modulated.sample_labelled(20_000, gen(8))
    assert stats.kruskal(*by_segment(zm, um)).pvalue < 1e-6


def test_positives_come_from_the_anchors_segment_independent_of_it_given_u():
    process = Process({"dim": 3, "dtype": "float64", "space": "euclidean", "mixing": "identity",
                       "marginal": {"name": "segments", "segments": 4, "location": 2.0}, "conditional": "same_segment"})
    m = process.marginal
    batch = process.sample(40_000, process.make_generator(6))
    z, z_pos, u = batch.z, batch.z_pos, batch.u
    law = standard_law(m.law)
    assert stats.kstest(((z_pos - m.loc[u]) / m.std[u]).numpy().ravel(), law.cdf).pvalue > 1e-3
    other = u.roll(1)  # the power check: standardised by another row's segment, the law is rejected
    assert stats.kstest(((z_pos - m.loc[other]) / m.std[other]).numpy().ravel(), law.cdf).pvalue < 1e-6
    shared = np.corrcoef(z[:, 0].numpy(), z_pos[:, 0].numpy())[0, 1]
    assert shared > 0.3  # the segment's mean is shared
    for k in range(4):
        rows = (u == k).numpy()
        within = np.corrcoef(z[rows, 0].numpy(), z_pos[rows, 0].numpy())[0, 1]
        assert abs(within) < 5 / math.sqrt(rows.sum())  # independent given u


def test_a_batch_carries_the_labels_and_other_processes_carry_none():
    process = Process({"space": "euclidean", "marginal": {"name": "segments", "segments": 7},
                       "conditional": "same_segment", "negatives": "marginal"})
    batch = process.sample(50, process.make_generator(0))
    assert batch.u.shape == (50,) and batch.u.dtype == torch.int64 and 0 <= int(batch.u.min()) <= int(batch.u.max()) < 7
    assert batch.z_neg.shape == (50, 10) and process.marginal.segments == 7
    again = process.sample(50, process.make_generator(0))
    assert torch.equal(batch.u, again.u) and torch.equal(batch.x, again.x)
    plain = Process({"mixing": "identity"})
    assert plain.sample(5, plain.make_generator(0)).u is None and plain.marginal.segments is None


def test_other_conditionals_follow_segment_anchors():
    process = Process({"space": "euclidean", "marginal": "segments", "conditional": {"name": "laplace", "scale": 0.1}})
    batch = process.sample(20_000, process.make_generator(1))
    assert batch.u is not None
    noise = (batch.z_pos - batch.z).numpy().ravel()
    assert stats.kstest(noise, stats.laplace(0, 0.1).cdf).pvalue > 1e-3


def test_the_process_saves_and_loads_the_modulation():
    from dgp.process import load_process

    process = Process({"space": "euclidean", "marginal": {"name": "segments", "location": 1.0},
                       "conditional": "same_segment"}, seed=3)
    loaded = load_process(process.to_dict())
    assert loaded.fingerprint() == process.fingerprint() and torch.equal(loaded.marginal.std, process.marginal.std)
    other = Process({"space": "euclidean", "marginal": {"name": "segments", "location": 1.0},
                     "conditional": "same_segment"}, seed=4)
    assert other.fingerprint() != process.fingerprint()
    assert "20 segments" in process.describe() and "anchor's segment" in process.describe()


@pytest.mark.parametrize("options, key, message", [
    ({"segments": 1}, "dgp.marginal.segments", "must be an integer >= 2"),
    ({"law": "cauchy"}, "dgp.marginal.law", "allowed: 'laplace', 'normal'"),
    ({"std_low": -1}, "dgp.marginal.std_low", r"must lie in \[0, 1e\+06\]"),
    ({"std_high": 0.4, "std_low": 0.5}, "dgp.marginal.std_high", r"must be >= std_low \(0.5\)"),
    ({"std_high": 0.0, "std_low": 0.0}, "dgp.marginal.std_high", "must be > 0"),
    ({"location": -2}, "dgp.marginal.location", "must be >= 0"),
])
def test_invalid_options_give_one_line_naming_the_key(options, key, message):
    with pytest.raises(ValueError, match=rf"^{key.replace('.', '[.]')}={options[key.split('.')[-1]]!r} is invalid: "
                                         rf".*{message}") as raised:
        MARGINALS.build({"name": "segments", **options}, Euclidean(3), None, key="dgp.marginal")
    assert "\n" not in str(raised.value)


def test_only_on_rn():
    with pytest.raises(ValueError, match=r"^dgp\.space\.name='box' is invalid: .*R\^n only"):
        MARGINALS.build({"name": "segments"}, Box(3, low=0.0, high=1.0), None, key="dgp.marginal")


def test_same_segment_needs_the_segments_marginal_and_the_anchors_segment():
    with pytest.raises(ValueError, match=r"^dgp\.conditional\.name='same_segment' is invalid: .*needs "
                                         r"dgp\.marginal\.name 'segments'"):
        Process({"space": "euclidean", "marginal": "normal", "conditional": "same_segment"})
    conditional = CONDITIONALS.build({"name": "same_segment"}, Euclidean(3), None, key="dgp.conditional")
    with pytest.raises(ValueError, match=r"^dgp\.conditional\.name='same_segment' is invalid: .*positives of latents "
                                         "alone"):
        conditional.sample(torch.zeros(2, 3), gen(0))
    with pytest.raises(ValueError, match=r"^dgp\.views\.latents=.* is invalid: views see named latent blocks"):
        Process({"space": "euclidean", "marginal": "segments", "conditional": "same_segment",
                 "views": {"name": "subsets", "latents": [["content"], ["style"]]}})
