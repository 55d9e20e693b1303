"""The margin contrastive loss (Hadsell et al. 2006) against a plain per-anchor reference."""

from __future__ import annotations

import pytest
import torch

import identifiable_cl.losses.margin  # noqa: F401  (registration)
from identifiable_cl.losses.base import NEGATIVE_SETS
from identifiable_cl.losses.margin import MarginContrastive, safe_sqrt
from loss_reference import (
    BATCHES,
    DTYPES,
    assert_gradcheck,
    assert_invalid_option,
    assert_needs_independent_negatives,
    assert_r24_as_symmetric,
    assert_symmetric_in_views_and_order,
    candidate_rows,
    check_against_reference,
    check_built_parameter_free,
    check_negative_on_its_anchor,
    encodings,
)


def reference(h, hp, hn, negatives, margin):
    """Mean over anchors of ||a - a+||² + mean_c max(0, m - ||a - c||)²; the anchor itself (first_view)
    sits at distance 0 and adds the constant m²."""
    out = []
    for (a, p), negs in candidate_rows(h, hp, hn, negatives):
        terms = []
        for x, c, is_self in negs:
            if is_self:
                terms.append(torch.tensor(margin**2, dtype=h.dtype))
            else:
                dist = torch.sqrt(((x - c) ** 2).sum())
                terms.append(torch.clamp(margin - dist, min=0) ** 2)
        out.append(((a - p) ** 2).sum() + sum(terms) / len(terms))
    return sum(out) / len(out)


@pytest.mark.parametrize("negatives", NEGATIVE_SETS)
@pytest.mark.parametrize("B", BATCHES)
@pytest.mark.parametrize("margin", [1.0, 2.5])
def test_values_and_gradients_match_reference(negatives, B, margin):
    loss = MarginContrastive(dim=3, margin=margin, negatives=negatives)
    check_against_reference(loss, lambda a, b, c: reference(a, b, c, negatives, margin), negatives, B)


def test_reference_sees_active_and_inactive_hinges():
    """The inputs above straddle the margin, so both branches of the hinge are compared."""
    h, hp = encodings(5, 3, 59)
    dist = torch.cdist(h, torch.cat([h, hp]))
    assert (dist < 1.0).sum() > 5 + 2 and (dist > 2.5).any()


def test_hand_computed_value():
    """1-d: a = 0, a+ = 0.5, negatives 0.25 and 3, m = 1: 0.25 + ((1 - 0.25)² + 0) / 2 = 0.53125."""
    h, hp = torch.tensor([[0.0]], dtype=torch.float64), torch.tensor([[0.5]], dtype=torch.float64)
    hn = torch.tensor([[0.25], [3.0]], dtype=torch.float64)
    loss = MarginContrastive(dim=1, negatives="independent")
    assert loss(h, hp, hn).item() == pytest.approx(0.53125, rel=1e-14)
    assert loss(h, hp, hn[None]).item() == pytest.approx(0.53125, rel=1e-14)


@pytest.mark.parametrize("negatives", NEGATIVE_SETS)
def test_gradcheck(negatives):
    assert_gradcheck(MarginContrastive(dim=3, margin=2.0, negatives=negatives), *encodings(4, 3, 7, (3,)))


def test_gradcheck_per_anchor_negatives():
    assert_gradcheck(MarginContrastive(dim=3, margin=2.0, negatives="independent"), *encodings(3, 3, 8, (3, 4)))


@pytest.mark.parametrize("negatives", NEGATIVE_SETS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_finite_gradients_when_a_negative_coincides_with_its_anchor(negatives, dtype):
    # at distance 0 the hinge term is m² (value exact) and contributes no gradient
    loss = MarginContrastive(dim=3, negatives=negatives)
    check_negative_on_its_anchor(loss, lambda *x: reference(*x, negatives, 1.0), seed=9, dtype=dtype)


def test_safe_sqrt_value_and_gradient():
    x = torch.tensor([0.0, 1e-300, 4.0], dtype=torch.float64, requires_grad=True)
    y = safe_sqrt(x)
    torch.testing.assert_close(y.detach(), torch.tensor([0.0, 1e-150, 2.0], dtype=torch.float64))
    (grad,) = torch.autograd.grad(y.sum(), x)
    assert grad[0] == 0 and torch.isfinite(grad).all() and grad[2] == 0.25


def test_symmetric_is_symmetric_in_the_views_and_batch_order():
    assert_symmetric_in_views_and_order(MarginContrastive(dim=3, margin=2.0), *encodings(6, 3, 11))


def test_first_view_self_pair_is_a_constant():
    """first_view = (B - 1)/B · (first_view_others hinge term) + m²/B, same positive term."""
    B, m = 5, 1.5
    h, hp = encodings(B, 3, 12)
    pull = ((h - hp) ** 2).sum(1).mean()
    first = MarginContrastive(dim=3, margin=m, negatives="first_view")(h, hp)
    others = MarginContrastive(dim=3, margin=m, negatives="first_view_others")(h, hp)
    torch.testing.assert_close(first, pull + (B - 1) / B * (others - pull) + m**2 / B, rtol=1e-12, atol=1e-12)


def test_r24_pools_the_same_pairs_as_symmetric():
    """Each pair's term depends on the pair alone, so reassigning the cross pairs changes nothing."""
    loss_with = lambda negatives: MarginContrastive(dim=3, margin=2.0, negatives=negatives)  # noqa: E731
    assert_r24_as_symmetric(loss_with, *encodings(5, 3, 14))


def test_errors_for_missing_or_empty_negatives():
    loss = MarginContrastive(dim=3, negatives="independent")
    empty = r"loss\.negatives='independent': the margin loss needs at least one"
    assert_needs_independent_negatives(loss, *encodings(3, 3, 13), empty)


def test_flags_and_logs():
    loss = check_built_parameter_free({"name": "margin", "margin": 0.5}, MarginContrastive, "margin=0.5", False)
    assert loss.margin == 0.5


@pytest.mark.parametrize(
    "options,key",
    [
        ({"margin": 0.0}, "loss.margin"),
        ({"margin": -1.0}, "loss.margin"),
        ({"margin": float("nan")}, "loss.margin"),
        ({"margin": "1"}, "loss.margin"),
        ({"negatives": "all"}, "loss.negatives"),
        ({"dim": 0}, "dim"),
        ({"tau": 1.0}, "loss.tau: unknown option"),
    ],
)
def test_invalid_options(options, key):
    dim = options.pop("dim", 3)
    assert_invalid_option("margin", options, key, dim=dim)
