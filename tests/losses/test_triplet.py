"""FaceNet's triplet loss against a plain per-anchor reference, for each mining mode."""

from __future__ import annotations

import pytest
import torch

import identifiable_cl.losses.triplet  # noqa: F401  (registration)
from identifiable_cl.losses.base import NEGATIVE_SETS
from identifiable_cl.losses.triplet import MINING, Triplet
from loss_reference import (
    BATCHES,
    DTYPES,
    assert_gradcheck,
    assert_invalid_option,
    assert_needs_independent_negatives,
    assert_symmetric_in_views_and_order,
    candidate_rows,
    check_against_reference,
    check_built_parameter_free,
    check_negative_on_its_anchor,
    encodings,
)


def unit(x):
    return None if x is None else x / torch.sqrt((x * x).sum(-1, keepdim=True))


def reference(h, hp, hn, negatives, margin, mining, normalize):
    """Mean over anchors of the triplet hinge max(0, d²(a, a+) - d²(a, c) + m) over the mined negatives."""
    if normalize:
        h, hp, hn = unit(h), unit(hp), unit(hn)
    out = []
    for (a, p), negs in candidate_rows(h, hp, hn, negatives):
        d_pos = ((a - p) ** 2).sum()
        d_neg = [((x - c) ** 2).sum() for x, c, _ in negs]
        if mining == "all":
            out.append(sum(torch.clamp(d_pos - d + margin, min=0) for d in d_neg) / len(d_neg))
            continue
        hardest = min(range(len(d_neg)), key=lambda k: d_neg[k].item())
        chosen = hardest
        if mining == "semihard":
            farther = [k for k in range(len(d_neg)) if d_neg[k].item() > d_pos.item()]
            if farther:
                chosen = min(farther, key=lambda k: d_neg[k].item())
        out.append(torch.clamp(d_pos - d_neg[chosen] + margin, min=0))
    return sum(out) / len(out)


@pytest.mark.parametrize("negatives", NEGATIVE_SETS)
@pytest.mark.parametrize("mining", MINING)
@pytest.mark.parametrize("B", BATCHES)
@pytest.mark.parametrize("normalize", [True, False])
def test_values_and_gradients_match_reference(negatives, mining, B, normalize):
    margin = 0.5 if normalize else 2.0
    loss = Triplet(dim=3, margin=margin, mining=mining, normalize=normalize, negatives=negatives)
    ref = lambda a, b, c: reference(a, b, c, negatives, margin, mining, normalize)  # noqa: E731
    check_against_reference(loss, ref, negatives, B, noise=0.5, allow_unused=True)


def selection_gaps(h, hp, hn, negatives, mining, normalize):
    """The smallest gap, over anchors, between the mined negative's d² and the quantities the choice
    compares it with (the next candidate, the positive's d²): small gaps make the choice ambiguous."""
    if normalize:
        h, hp, hn = unit(h), unit(hp), unit(hn)
    gaps = []
    for (a, p), negs in candidate_rows(h, hp, hn, negatives):
        d_pos = ((a - p) ** 2).sum().item()
        d_neg = sorted(((x - c) ** 2).sum().item() for x, c, _ in negs)
        gaps += [abs(x - y) for x, y in zip(d_neg, d_neg[1:])]
        if mining == "semihard":
            gaps += [abs(d - d_pos) for d in d_neg]
    return min(gaps)


@pytest.mark.parametrize("negatives", NEGATIVE_SETS)
@pytest.mark.parametrize("mining", MINING)
@pytest.mark.parametrize("normalize", [True, False])
def test_gradcheck(negatives, mining, normalize):
    margin = 1.0 if normalize else 4.0
    loss = Triplet(dim=3, margin=margin, mining=mining, normalize=normalize, negatives=negatives)
    h, hp, hn = encodings(4, 3, 21, (3,) if negatives == "independent" else None, noise=0.5)
    if mining != "all":
        # the mined negative must be clear-cut: no near-tie with another candidate or the positive
        assert selection_gaps(h, hp, hn, negatives, mining, normalize) > 1e-3
    assert loss(h, hp, hn).item() > 0
    assert_gradcheck(loss, h, hp, hn)


@pytest.mark.parametrize("mining", MINING)
def test_gradcheck_per_anchor_negatives(mining):
    loss = Triplet(dim=3, margin=4.0, mining=mining, normalize=False, negatives="independent")
    h, hp, hn = encodings(3, 3, 22, (3, 4), noise=0.5)
    assert selection_gaps(h, hp, hn, "independent", mining, False) > 1e-3
    assert_gradcheck(loss, h, hp, hn)


@pytest.mark.parametrize("negatives", NEGATIVE_SETS)
@pytest.mark.parametrize("mining", MINING)
@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("dtype", DTYPES)
def test_finite_gradients_when_a_negative_coincides_with_its_anchor(negatives, mining, normalize, dtype):
    loss = Triplet(dim=3, mining=mining, normalize=normalize, negatives=negatives)
    ref = lambda *x: reference(*x, negatives, 0.2, mining, normalize)  # noqa: E731
    # hp[2] = h[0] also puts a negative (h[0] or hn[0]) at exactly the positive's distance from the anchor
    # h[2]: whether it is 'farther' is decided by rounding, so semihard is only checked for finiteness
    reference_or_none = None if mining == "semihard" else ref
    check_negative_on_its_anchor(loss, reference_or_none, seed=23, dtype=dtype, noise=0.5, abs_tol=1e-6)


def test_hand_computed_mining():
    """1-d, a = 0, a+ = 1 (d²+ = 1), negatives at 0.5, 2, 3 (d² 0.25, 4, 9), m = 0.5."""
    h, hp = torch.tensor([[0.0]], dtype=torch.float64), torch.tensor([[1.0]], dtype=torch.float64)
    hn = torch.tensor([[2.0], [0.5], [3.0]], dtype=torch.float64)
    want = {
        "all": (1.25 + 0 + 0) / 3,  # max(0, 1 - 0.25 + 0.5), max(0, 1 - 4 + 0.5), max(0, 1 - 9 + 0.5)
        "hardest": 1.25,  # the negative at 0.5
        "semihard": 0.0,  # the negative at 2: closest with d² > 1, outside the margin
    }
    for mining, value in want.items():
        loss = Triplet(dim=1, margin=0.5, mining=mining, normalize=False, negatives="independent")
        assert loss(h, hp, hn).item() == pytest.approx(value, abs=1e-14)
    # with m = 3.5 the semi-hard negative is inside the margin: 1 - 4 + 3.5
    loss = Triplet(dim=1, margin=3.5, mining="semihard", normalize=False, negatives="independent")
    assert loss(h, hp, hn).item() == pytest.approx(0.5, abs=1e-14)


def test_semihard_falls_back_to_the_hardest():
    """No negative farther than the positive: semihard = hardest."""
    h, hp = torch.tensor([[0.0]], dtype=torch.float64), torch.tensor([[3.0]], dtype=torch.float64)
    hn = torch.tensor([[1.0], [-2.0], [0.5]], dtype=torch.float64)
    options = dict(dim=1, margin=0.5, normalize=False, negatives="independent")
    semihard = Triplet(mining="semihard", **options)(h, hp, hn)
    assert semihard.item() == pytest.approx(9 - 0.25 + 0.5)
    assert semihard.item() == Triplet(mining="hardest", **options)(h, hp, hn).item()


def test_first_view_hardest_is_the_anchor_itself():
    """first_view: the anchor is its own hardest negative (d² = 0): hardest = mean d²(a, a+) + m."""
    h, hp = encodings(5, 3, 24, noise=0.5)
    loss = Triplet(dim=3, margin=0.3, mining="hardest", normalize=False, negatives="first_view")
    want = ((h - hp) ** 2).sum(1).mean() + 0.3
    torch.testing.assert_close(loss(h, hp), want, rtol=1e-12, atol=1e-12)


def test_normalize_ignores_scale_and_sets_the_unit_norm_flag():
    h, hp = encodings(5, 3, 25, noise=0.5)
    loss = Triplet(dim=3, margin=1.0)
    torch.testing.assert_close(loss(3 * h, 0.5 * hp), loss(h, hp), rtol=1e-12, atol=1e-12)
    assert loss.needs_unit_norm and not Triplet(dim=3, normalize=False).needs_unit_norm
    raw = Triplet(dim=3, margin=1.0, normalize=False)
    assert raw(3 * h, 3 * hp).item() != pytest.approx(raw(h, hp).item())


def test_symmetric_is_symmetric_in_the_views_and_batch_order():
    h, hp = encodings(6, 3, 26, noise=0.5)
    for mining in MINING:
        assert_symmetric_in_views_and_order(Triplet(dim=3, margin=1.0, mining=mining), h, hp)


def test_errors_for_missing_or_empty_negatives():
    loss = Triplet(dim=3, negatives="independent")
    empty = r"loss\.negatives='independent': the triplet loss needs at least one"
    assert_needs_independent_negatives(loss, *encodings(3, 3, 27, noise=0.5), empty)


def test_flags_and_logs():
    loss = check_built_parameter_free({"name": "triplet", "mining": "semihard"}, Triplet, "mining='semihard'", True)
    assert loss.margin == 0.2 and loss.normalize and loss.mining == "semihard"


@pytest.mark.parametrize(
    "options,key",
    [
        ({"margin": 0.0}, "loss.margin"),
        ({"margin": -0.2}, "loss.margin"),
        ({"margin": float("inf")}, "loss.margin"),
        ({"mining": "random"}, "loss.mining"),
        ({"mining": None}, "loss.mining"),
        ({"normalize": "yes"}, "loss.normalize"),
        ({"normalize": 1}, "loss.normalize"),
        ({"negatives": "hardest"}, "loss.negatives"),
        ({"tau": 1.0}, "loss.tau: unknown option"),
    ],
)
def test_invalid_options(options, key):
    assert_invalid_option("triplet", options, key)
