"""The NWJ bound against a plain per-anchor reference: values, gradients, its MI bound, options and limits."""

from __future__ import annotations

import math

import pytest
import torch

import identifiable_cl.losses.nwj  # noqa: F401  (registration)
from identifiable_cl.losses import LOSSES
from identifiable_cl.losses.base import SIMILARITIES
from identifiable_cl.losses.nwj import NWJ
from loss_reference import (
    BATCHES,
    CRITIC_NEGATIVES,
    assert_float32_as_float64,
    assert_invalid_option,
    candidate_rows,
    check_critic_against_reference,
    check_critic_flags_and_negatives,
    check_critic_gradcheck,
    check_critic_reference_can_fail,
    check_offset_learnt_or_fixed,
    critic,
    dgp_views,
    dot_critic_matrices,
    encodings,
)


def reference(h, hp, hn, kind, tau, offset, negatives) -> torch.Tensor:
    """-(mean over rows of f+ - e^{-1} mean over all (row, negative) pairs of e^f), f = sim / tau + offset."""
    f = critic(kind, tau, offset)
    positives, exps = [], []
    for pos, negs in candidate_rows(h, hp, hn, negatives):
        positives.append(f(pos))
        for pair in negs:
            exps.append(torch.exp(f(pair)))
    return -(sum(positives) / len(positives) - math.exp(-1) * sum(exps) / len(exps))


@pytest.mark.parametrize("B", BATCHES)
@pytest.mark.parametrize("negatives", CRITIC_NEGATIVES)
@pytest.mark.parametrize("kind", SIMILARITIES)
def test_values_and_gradients_match_reference(kind, negatives, B):
    check_critic_against_reference(NWJ, reference, kind, negatives, B)


def test_reference_can_fail():
    check_critic_reference_can_fail(NWJ, reference)


@pytest.mark.parametrize("shape", ["shared", "per_anchor"])
def test_closed_form_with_dgp_negatives(shape):
    """-(mean f+ - e^{-1} mean e^{f-}) over B anchors and their K negatives, written with matrices."""
    h, hp, hn = dgp_views(shape)
    loss = NWJ(dim=4, similarity="dot", tau=0.5, offset=-0.5, negatives="independent").double()
    pos, neg = dot_critic_matrices(h, hp, hn, 0.5, -0.5)
    want = -(pos.mean() - torch.exp(neg).mean() / math.e)
    torch.testing.assert_close(loss(h, hp, hn), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind", SIMILARITIES)
@pytest.mark.parametrize("negatives", CRITIC_NEGATIVES)
def test_gradcheck(kind, negatives):
    check_critic_gradcheck(NWJ, kind, negatives)


@pytest.mark.parametrize("B", [2, 8])
def test_mi_bound_counts_candidates_and_is_minus_the_loss(B):
    h, hp = encodings(B, 3, 5)
    for negatives, k in [("symmetric", 2 * B - 1), ("r24", 2 * B - 1), ("one_sided", B), ("first_view_others", B)]:
        loss = LOSSES.build({"name": "nwj", "similarity": "l2", "negatives": negatives}, key="loss", dim=3).double()
        value = float(loss(h, hp).detach())
        assert loss.mi_bound(value, B, None) == (k, -value)
    independent = NWJ(dim=3, negatives="independent")
    assert independent.mi_bound(0.5, B, 5) == (6, -0.5)
    assert independent.mi_bound(0.5, B, None) is None


def test_optimal_offset_gives_the_donsker_varadhan_bound():
    """At c* = 1 - log mean e^{g-} (g = sim / tau) the offset's gradient vanishes and -L = mean g+ - log mean e^{g-}."""
    h, hp = encodings(6, 3, 6)
    base = NWJ(dim=3, similarity="l1", tau=0.5, offset=0.0, learn_offset=False).double().terms(h, hp)
    g_neg = base.neg[torch.isfinite(base.neg)]
    best = 1 - (torch.logsumexp(g_neg, 0) - math.log(g_neg.numel()))
    loss = NWJ(dim=3, similarity="l1", tau=0.5).double()
    with torch.no_grad():
        loss.offset.copy_(best)
    value = loss(h, hp)
    value.backward()
    assert abs(float(loss.offset.grad)) < 1e-12
    dv = base.pos.mean() - (torch.logsumexp(g_neg, 0) - math.log(g_neg.numel()))
    torch.testing.assert_close(-value.detach(), dv, rtol=1e-12, atol=1e-12)


def test_minus_the_loss_stays_below_the_information_of_gaussian_views():
    """x ~ N(0, I_2), x+ = ρx + sqrt(1 - ρ²) ε: I = -log(1 - ρ²). Critics -||a - b||² / tau with their best
    offset come close to I but no higher (one_sided negatives, B = 1500, about 2.2 million pairs)."""
    d, rho, B = 2, 0.8, 1500
    g = torch.Generator().manual_seed(0)
    x = torch.randn(B, d, generator=g, dtype=torch.float64)
    y = rho * x + math.sqrt(1 - rho ** 2) * torch.randn(B, d, generator=g, dtype=torch.float64)
    info = -d / 2 * math.log(1 - rho ** 2)
    bounds = []
    for tau in (0.5, 1.0, 1.5, 3.0):
        base = NWJ(dim=d, similarity="l2", tau=tau, learn_offset=False, negatives="one_sided").double().terms(x, y)
        g_neg = base.neg[torch.isfinite(base.neg)]
        best = 1 - float(torch.logsumexp(g_neg, 0) - math.log(g_neg.numel()))
        loss = NWJ(dim=d, similarity="l2", tau=tau, offset=best, learn_offset=False, negatives="one_sided").double()
        bounds.append(-float(loss(x, y)))
    assert max(bounds) < info - 0.1 and max(bounds) > 0.7 * info


def test_offset_learnt_or_fixed():
    check_offset_learnt_or_fixed(NWJ, 1.0, seed=7)


def test_dtypes_and_flags():
    assert_float32_as_float64(NWJ(dim=3, similarity="l3", offset=0.25), *encodings(5, 3, 8))
    check_critic_flags_and_negatives(NWJ, "nwj", "l2", seed=9)


@pytest.mark.parametrize(
    "options,message",
    [
        ({"tau": 0.0}, "loss.tau"),
        ({"tau": -1.0}, "loss.tau"),
        ({"tau": float("inf")}, "loss.tau"),
        ({"tau": 1e39}, "loss.tau"),
        ({"similarity": "cos"}, "loss.similarity"),
        ({"negatives": "batch"}, "loss.negatives"),
        ({"negatives": "first_view"}, r"loss.negatives='first_view' is invalid: .* own negative; allowed: 'symmetric'"),
        ({"offset": float("nan")}, "loss.offset"),
        ({"offset": 1e39}, "loss.offset"),
        ({"offset": None}, "loss.offset"),
        ({"learn_offset": 1}, "loss.learn_offset"),
        ({"lr": -1e-3}, "loss.lr"),
        ({"beta": 1.0}, "loss.beta: unknown option"),
    ],
)
def test_invalid_options(options, message):
    assert_invalid_option("nwj", options, message)


def test_built_through_the_registry():
    loss = LOSSES.build({"name": "nwj", "similarity": "dot", "tau": 2.0, "learn_offset": False}, key="loss", dim=3)
    assert isinstance(loss, NWJ) and loss.config_key == "loss"
    assert "similarity='dot', tau=2, offset=0, learn_offset=False, negatives='symmetric'" in repr(loss)
    doc = NWJ.__doc__
    assert "Nguyen, Wainwright & Jordan" in doc and "lower bound on I(z; z+) for any critic" in doc
