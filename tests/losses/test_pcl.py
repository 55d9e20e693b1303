"""PCL's loss against a plain per-pair reference: values, gradients, the fake pairs, the separable limit and the
options."""

from __future__ import annotations

import math

import pytest
import torch

from identifiable_cl.losses import LOSSES
from identifiable_cl.losses.pcl import PCL
from loss_reference import assert_invalid_option, dgp_views, encodings


def parameters(d, seed=7):
    """w₁, w₂, b, a (d,) and m (), float64, away from the starting values."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=g, dtype=torch.float64) for shape in [(d,)] * 4 + [()]]


def loaded(d, values, **options):
    loss = PCL(dim=d, **options).double()
    with torch.no_grad():
        for p, v in zip((loss.w1, loss.w2, loss.b, loss.a, loss.m), values):
            p.copy_(v)
    return loss


def reference_score(y1, y2, w1, w2, b, a, m):
    """r(y₁, y₂) = Σ_i [-|w₁ᵢ y₁ᵢ + w₂ᵢ y₂ᵢ + bᵢ| + aᵢ y₁ᵢ²] + m for one pair, written coordinate by coordinate."""
    total = m
    for i in range(len(y1)):
        total = total - torch.abs(w1[i] * y1[i] + w2[i] * y2[i] + b[i]) + a[i] * y1[i] ** 2
    return total


def reference_pairs(h, hp, hn, negatives):
    """(real, fake) lists of (current, past) pairs: real (h+_i, h_i); fake (h+_i, h_{i+1 mod B}) for ``rolled``,
    (h+_i, c) for every DGP negative c of anchor i for ``independent``."""
    B = len(h)
    real = [(hp[i], h[i]) for i in range(B)]
    if negatives == "rolled":
        return real, [(hp[i], h[(i + 1) % B]) for i in range(B)]
    pool = (lambda i: hn) if hn.dim() == 2 else (lambda i: hn[i])
    return real, [(hp[i], c) for i in range(B) for c in pool(i)]


def reference(h, hp, hn, negatives, *values):
    """mean over real pairs of log(1 + e^{-r}) + mean over fake pairs of log(1 + e^{r})."""
    real, fake = reference_pairs(h, hp, hn, negatives)
    real_terms = [torch.log1p(torch.exp(-reference_score(y1, y2, *values))) for y1, y2 in real]
    fake_terms = [torch.log1p(torch.exp(reference_score(y1, y2, *values))) for y1, y2 in fake]
    return sum(real_terms) / len(real_terms) + sum(fake_terms) / len(fake_terms)


CASES = [("rolled", None), ("independent", "shared"), ("independent", "per_anchor")]


def inputs(negatives, shape):
    if negatives == "rolled":
        h, hp = encodings(5, 3, seed=1)
        return h, hp, None
    return dgp_views(shape)


@pytest.mark.parametrize("negatives, shape", CASES)
def test_value_and_gradients_match_the_reference(negatives, shape):
    h, hp, hn = inputs(negatives, shape)
    d = h.shape[1]
    values = parameters(d)
    loss = loaded(d, values, negatives=negatives)
    leaves = [x.clone().requires_grad_() for x in (h, hp) + ((hn,) if hn is not None else ())]
    got = loss(leaves[0], leaves[1], leaves[2] if hn is not None else None)
    got.backward()
    refs = [x.detach().clone().requires_grad_() for x in leaves] + [v.clone().requires_grad_() for v in values]
    ref_hn = refs[2] if hn is not None else None
    expected = reference(refs[0], refs[1], ref_hn, negatives, *refs[-5:])
    expected.backward()
    assert got.item() == pytest.approx(expected.item(), rel=1e-12)
    for mine, theirs in zip(leaves + [loss.w1, loss.w2, loss.b, loss.a, loss.m], refs):
        assert torch.allclose(mine.grad, theirs.grad, rtol=1e-10, atol=1e-12)


def test_the_reference_can_fail():
    """Swapping the roles of the anchor and the positive (the a-term on the past point) changes the value."""
    h, hp = encodings(5, 3, seed=1)
    values = parameters(3)
    loss = loaded(3, values)
    assert loss(h, hp).item() != pytest.approx(reference(hp, h, None, "rolled", *values).item(), rel=1e-6)


@pytest.mark.parametrize("negatives, shape", CASES)
def test_gradcheck(negatives, shape):
    h, hp, hn = inputs(negatives, shape)
    loss = loaded(h.shape[1], parameters(h.shape[1]), negatives=negatives)
    args = tuple(x.clone().requires_grad_() for x in (h, hp) + ((hn,) if hn is not None else ()))
    assert torch.autograd.gradcheck(lambda *xs: loss(*xs), args)


def test_fake_pairs_are_the_current_points_with_the_next_rows_past():
    """The fake scores are exactly r(h+_i, h_{i+1 mod B}): each current point with another time point's past."""
    h, hp = encodings(4, 3, seed=3)
    values = parameters(3)
    loss = loaded(3, values)
    fakes = loss.fakes(h, hp, None)
    expected = torch.stack([reference_score(hp[i], h[(i + 1) % 4], *values) for i in range(4)])
    assert torch.allclose(fakes, expected, rtol=1e-12)
    assert torch.allclose(loss.score(hp, h), torch.stack([reference_score(hp[i], h[i], *values) for i in range(4)]))


def test_starting_parameters_are_the_official_ones():
    loss = PCL(dim=3)
    for p, v in ((loss.w1, 1.0), (loss.w2, -1.0), (loss.b, 0.0), (loss.a, 1.0), (loss.m, 0.0)):
        assert torch.equal(p.detach(), torch.full_like(p, v))
    assert [g["lr"] for g in loss.param_groups()] == [None]
    assert sum(p.numel() for p in loss.param_groups()[0]["params"]) == 4 * 3 + 1


def test_a_perfectly_separating_score_drives_the_loss_to_zero():
    """Real pairs h+ = h (w₁ = 1, w₂ = -1, b = 0: real scores m), fakes far apart: as the scale c of the
    encodings and m grow, both terms vanish."""
    h = torch.tensor([[1.0, -1.0], [-1.0, 1.0]], dtype=torch.float64)  # rolled pairs differ by 2 per coordinate
    losses = []
    for c in (1.0, 10.0, 100.0):
        loss = loaded(2, [torch.ones(2), -torch.ones(2), torch.zeros(2), torch.zeros(2), torch.tensor(2.0 * c)])
        losses.append(loss(c * h, c * h).item())
    assert losses[0] > losses[1] > losses[2] and losses[2] < 1e-80
    assert losses[2] == pytest.approx(2 * math.exp(-200.0), rel=1e-9)


def test_independent_negatives_are_required_and_checked():
    loss = PCL(dim=4, negatives="independent")
    assert loss.requires_negatives and not PCL(dim=4).requires_negatives and not loss.needs_unit_norm
    h, hp, _ = dgp_views("shared")
    with pytest.raises(ValueError, match="loss.negatives='independent' needs the encodings"):
        loss(h, hp)
    with pytest.raises(ValueError, match=r"h_neg must have shape"):
        loss(h, hp, torch.zeros(2, 6, 4, dtype=torch.float64))


def test_a_batch_of_one_cannot_roll():
    h, hp = encodings(1, 3, seed=0)
    with pytest.raises(ValueError, match="loss.negatives='rolled' draws negatives from the batch and needs at least 2"):
        PCL(dim=3)(h, hp)


def test_half_precision_inputs_are_computed_in_float32():
    h, hp = encodings(6, 3, seed=4)
    loss = PCL(dim=3)
    assert loss(h.bfloat16(), hp.bfloat16()).dtype == torch.float32


@pytest.mark.parametrize("options, message", [
    ({"negatives": "symmetric"}, "loss.negatives='symmetric' is invalid: allowed: 'rolled', 'independent'"),
    ({"lr": 0}, "loss.lr=0 is invalid: must be > 0"),
    ({"dim": 0}, "loss.dim=0 is invalid"),
    ({"tau": 1.0}, r"loss.tau: unknown option\(s\) for losses 'pcl'; allowed: negatives, lr"),
])
def test_invalid_options_give_one_line_naming_the_key(options, message):
    dim = options.pop("dim", 3)
    assert_invalid_option("pcl", options, message, dim=dim)


def test_registered():
    assert LOSSES.get("pcl") is PCL
