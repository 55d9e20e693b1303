"""The spectral contrastive loss (HaoChen et al. 2021) against a plain per-anchor reference."""

from __future__ import annotations

import pytest
import torch

import identifiable_cl.losses.scl  # noqa: F401  (registration)
from identifiable_cl.losses.base import NEGATIVE_SETS
from identifiable_cl.losses.scl import SpectralContrastive
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


def reference(h, hp, hn, negatives):
    """-2 · mean over rows of aᵀa+ + mean over every (row, negative) pair of (aᵀc)²."""
    rows = candidate_rows(h, hp, hn, negatives)
    positive = sum((a * p).sum() for (a, p), _ in rows) / len(rows)
    pairs = [((x * c).sum()) ** 2 for _, negs in rows for x, c, _ in negs]
    return -2 * positive + sum(pairs) / len(pairs)


@pytest.mark.parametrize("negatives", NEGATIVE_SETS)
@pytest.mark.parametrize("B", BATCHES)
def test_values_and_gradients_match_reference(negatives, B):
    loss = SpectralContrastive(dim=3, negatives=negatives)
    check_against_reference(loss, lambda a, b, c: reference(a, b, c, negatives), negatives, B, noise=0.5)


def test_authors_batch_estimate_is_one_sided():
    """-2/B Σ_i h_iᵀh+_i + 1/(B(B-1)) Σ_{i≠j} (h_iᵀh+_j)², the estimate of the authors' code."""
    B = 7
    h, hp = encodings(B, 4, 3, noise=0.5)
    gram = h @ hp.T
    off_diagonal = gram.square().sum() - gram.diagonal().square().sum()
    want = -2 * gram.diagonal().mean() + off_diagonal / (B * (B - 1))
    got = SpectralContrastive(dim=4, negatives="one_sided")(h, hp)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_first_view_adds_the_fourth_power_of_the_norms():
    """first_view = -2 mean hᵀh+ + (B - 1)/B · (first_view_others' negative term) + mean ||h||⁴ / B."""
    B = 5
    h, hp = encodings(B, 3, 4, noise=0.5)
    pull = -2 * (h * hp).sum(1).mean()
    first = SpectralContrastive(dim=3, negatives="first_view")(h, hp)
    others = SpectralContrastive(dim=3, negatives="first_view_others")(h, hp)
    want = pull + (B - 1) / B * (others - pull) + (h * h).sum(1).square().mean() / B
    torch.testing.assert_close(first, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("negatives", NEGATIVE_SETS)
def test_gradcheck(negatives):
    assert_gradcheck(SpectralContrastive(dim=3, negatives=negatives), *encodings(4, 3, 7, (3,), noise=0.5))


def test_gradcheck_per_anchor_negatives():
    assert_gradcheck(SpectralContrastive(dim=3, negatives="independent"), *encodings(3, 3, 8, (3, 4), noise=0.5))


@pytest.mark.parametrize("negatives", NEGATIVE_SETS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_finite_gradients_when_a_negative_coincides_with_its_anchor(negatives, dtype):
    loss = SpectralContrastive(dim=3, negatives=negatives)
    check_negative_on_its_anchor(loss, lambda *x: reference(*x, negatives), seed=9, dtype=dtype, noise=0.5)


def test_no_normalisation_and_quadratic_scaling():
    """Dot products of the raw encodings: scaling them by s scales the two terms by s² and s⁴."""
    h, hp = encodings(6, 3, 10, noise=0.5)
    loss = SpectralContrastive(dim=3)
    s = 1.7
    pull = -2 * (h * hp).sum(1).mean()
    push = loss(h, hp) - pull
    torch.testing.assert_close(loss(s * h, s * hp), s**2 * pull + s**4 * push, rtol=1e-12, atol=1e-12)
    assert not loss.needs_unit_norm


def test_symmetric_is_symmetric_in_the_views_and_batch_order():
    assert_symmetric_in_views_and_order(SpectralContrastive(dim=3), *encodings(6, 3, 11, noise=0.5))


def test_r24_pools_the_same_pairs_as_symmetric():
    """Each pair's term depends on the pair alone, so reassigning the cross pairs changes nothing."""
    loss_with = lambda negatives: SpectralContrastive(dim=3, negatives=negatives)  # noqa: E731
    assert_r24_as_symmetric(loss_with, *encodings(5, 3, 14, noise=0.5))


def test_errors_for_missing_or_empty_negatives():
    loss = SpectralContrastive(dim=3, negatives="independent")
    empty = r"loss\.negatives='independent': the spectral contrastive loss needs"
    assert_needs_independent_negatives(loss, *encodings(3, 3, 13, noise=0.5), empty)


def test_flags_and_logs():
    loss = check_built_parameter_free({"name": "scl"}, SpectralContrastive, "negatives='symmetric'", False)
    assert loss.negatives == "symmetric"


@pytest.mark.parametrize(
    "options,key",
    [
        ({"negatives": "batch"}, "loss.negatives"),
        ({"negatives": None}, "loss.negatives"),
        ({"tau": 1.0}, "loss.tau: unknown option"),
        ({"margin": 1.0}, "loss.margin: unknown option"),
    ],
)
def test_invalid_options(options, key):
    assert_invalid_option("scl", options, key)
