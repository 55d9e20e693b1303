"""GCL's loss against a plain per-pair reference: values, gradients, the fake pairs, the separable limit and the
options."""

from __future__ import annotations

import math

import pytest
import torch

from identifiable_cl.losses import LOSSES
from identifiable_cl.losses.gcl import GCL
from loss_reference import assert_invalid_option

FEATURE_FUNCTIONS = {"identity": lambda y: y, "abs": lambda y: abs(y), "square": lambda y: y * y}
"""φ written for one number at a time."""
BASES = [["identity", "square"], ["abs"], ["square", "abs", "identity"]]


def batch(B=6, d=3, S=4, seed=1):
    """h, h+ ``(B, d)`` float64 and labels u ``(B,)`` in 0..S-1, not all equal."""
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(B, d, generator=g, dtype=torch.float64)
    hp = torch.randn(B, d, generator=g, dtype=torch.float64)
    u = torch.randint(S, (B,), generator=g)
    u[0], u[1] = 0, 1
    return h, hp, u


def loaded(d, S, basis, seed=7):
    """The loss with its table W (S, d, K) and offsets c (S,) drawn from ``seed``, float64."""
    loss = GCL(dim=d, segments=S, basis=basis).double()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        loss.table.copy_(torch.randn(S, d, len(basis), generator=g, dtype=torch.float64))
        loss.offset.copy_(torch.randn(S, generator=g, dtype=torch.float64))
    return loss


def reference_score(y, label, W, c, basis):
    """r(x, u) = Σ_i Σ_k W[u, i, k] φ_k(y_i) + c[u] for one row y = h(x), one coordinate and function at a time."""
    total = c[label]
    for i in range(len(y)):
        for k, name in enumerate(basis):
            total = total + W[label, i, k] * FEATURE_FUNCTIONS[name](y[i])
    return total


def reference(h, hp, u, W, c, basis):
    """mean over real pairs (y, u_j) of log(1 + e^{-r}) + mean over fake pairs (y, u_{j+1 mod B}) of
    log(1 + e^{r}), for y the anchor h_j and the positive h+_j of each row j."""
    B = h.shape[0]
    rows = [(y[j], j) for y in (h, hp) for j in range(B)]
    real = [torch.log1p(torch.exp(-reference_score(y, int(u[j]), W, c, basis))) for y, j in rows]
    fake = [torch.log1p(torch.exp(reference_score(y, int(u[(j + 1) % B]), W, c, basis))) for y, j in rows]
    return sum(real) / (2 * B) + sum(fake) / (2 * B)


@pytest.mark.parametrize("basis", BASES)
def test_value_and_gradients_match_the_reference(basis):
    h, hp, u = batch()
    loss = loaded(3, 4, basis)
    leaves = [x.clone().requires_grad_() for x in (h, hp)]
    got = loss(*leaves, u=u)
    got.backward()
    refs = [x.clone().requires_grad_() for x in (h, hp)]
    W = loss.table.detach().clone().requires_grad_()
    c = loss.offset.detach().clone().requires_grad_()
    expected = reference(*refs, u, W, c, basis)
    expected.backward()
    assert got.item() == pytest.approx(expected.item(), rel=1e-12)
    for mine, theirs in (*zip(leaves, refs), (loss.table, W), (loss.offset, c)):
        assert torch.allclose(mine.grad, theirs.grad, rtol=1e-10, atol=1e-12)


def test_the_reference_can_fail():
    """Fake pairs with the previous row's label (a roll the other way), or the anchors alone, change the value."""
    h, hp, u = batch()
    loss = loaded(3, 4, BASES[0])
    W, c = loss.table.detach(), loss.offset.detach()
    value = loss(h, hp, u=u).item()
    assert value == pytest.approx(reference(h, hp, u, W, c, BASES[0]).item(), rel=1e-12)
    assert value != pytest.approx(reference(h, hp, u.flip(0), W, c, BASES[0]).item(), rel=1e-6)
    assert value != pytest.approx(reference(h, h, u, W, c, BASES[0]).item(), rel=1e-6)
    flipped = reference(h.flip(0), hp.flip(0), u.flip(0), W, c, BASES[0])  # the fake labels of the other roll
    assert value != pytest.approx(flipped.item(), rel=1e-6)


@pytest.mark.parametrize("basis", BASES)
def test_gradcheck(basis):
    h, hp, u = batch(B=5, seed=2)
    loss = loaded(3, 4, basis)
    inputs = (h.clone().requires_grad_(), hp.clone().requires_grad_())
    assert torch.autograd.gradcheck(lambda x, y: loss(x, y, u=u), inputs)


def test_scores_are_the_per_segment_table_over_the_basis():
    h, hp, u = batch()
    loss = loaded(3, 4, BASES[0])
    W, c = loss.table.detach(), loss.offset.detach()
    for labels in (u, u.roll(-1)):
        expected = torch.stack([reference_score(h[j], int(labels[j]), W, c, BASES[0]) for j in range(6)])
        assert torch.allclose(loss.score(h, labels), expected, rtol=1e-12)


def test_anchors_and_positives_are_scored_alike_and_separate_negatives_are_not_read():
    h, hp, u = batch()
    loss = loaded(3, 4, BASES[0])
    value = loss(h, hp, u=u).item()
    assert loss(hp, h, u=u).item() == pytest.approx(value, rel=1e-14)
    assert loss(h, hp, torch.ones(2, 3, dtype=torch.float64), u=u).item() == value


def test_a_perfectly_separating_score_drives_the_loss_to_zero():
    """h one-hot codes of the segment, W[u, i] = 2c on the code's own coordinate and c = -c: real scores +c, fake
    scores (another segment's label) -c, so the loss is 2 log(1 + e^{-c})."""
    S = 3
    u = torch.tensor([0, 1, 2, 1])  # every rolled label differs from its row's
    h = torch.eye(S, dtype=torch.float64)[u]
    for strength in (1.0, 10.0, 50.0):
        loss = GCL(dim=S, segments=S, basis=["identity"]).double()
        with torch.no_grad():
            loss.table.copy_(2 * strength * torch.eye(S).unsqueeze(-1))
            loss.offset.fill_(-strength)
        assert loss(h, h, u=u).item() == pytest.approx(2 * math.log1p(math.exp(-strength)), rel=1e-12)


def test_the_table_starts_at_zero_so_the_first_loss_is_2_log_2():
    h, hp, u = batch()
    loss = GCL(dim=3, segments=4, lr=0.01).double()
    assert not loss.table.any() and not loss.offset.any() and loss.table.shape == (4, 3, 2)
    assert loss(h, hp, u=u).item() == pytest.approx(2 * math.log(2), rel=1e-15)
    assert loss.param_groups() == [{"params": [loss.table, loss.offset], "lr": 0.01}]
    assert loss.uses_aux and loss.mi_bound is None and not loss.requires_negatives and not loss.needs_unit_norm


def test_the_labels_are_required_and_a_batch_of_one_cannot_roll():
    h, hp, u = batch()
    loss = GCL(dim=3, segments=4).double()
    with pytest.raises(ValueError, match=r"^loss\.name='gcl' is invalid: it reads each anchor's segment u, and none "
                                         "was given"):
        loss(h, hp)
    with pytest.raises(ValueError, match=r"u must hold \(B=6,\) int64 segment labels"):
        loss(h, hp, u=u[:3])
    with pytest.raises(ValueError, match="pairs each row with the next row's label u and needs at least 2 samples"):
        loss(h[:1], hp[:1], u=u[:1])


def test_half_precision_inputs_are_computed_in_float32():
    h, hp, u = batch()
    assert GCL(dim=3, segments=4)(h.bfloat16(), hp.bfloat16(), u=u).dtype == torch.float32


@pytest.mark.parametrize("options, message", [
    ({"segments": 1}, "loss.segments=1 is invalid: must be an integer >= 2"),
    ({"basis": "square"}, "loss.basis='square' is invalid: a non-empty list of the pointwise functions"),
    ({"basis": []}, r"loss.basis=\[\] is invalid: a non-empty list"),
    ({"basis": ["cube"]}, "loss.basis='cube' is invalid: allowed: 'identity', 'abs', 'square'"),
    ({"basis": ["abs", "abs"]}, r"loss.basis=\['abs', 'abs'\] is invalid: names a function twice"),
    ({"lr": -1}, "loss.lr=-1 is invalid: must be > 0"),
    ({"negatives": "rolled"}, r"loss.negatives: unknown option\(s\) for losses 'gcl'; allowed: segments, basis, lr"),
])
def test_invalid_options_give_one_line_naming_the_key(options, message):
    assert_invalid_option("gcl", options, message)


def test_registered():
    assert LOSSES.get("gcl") is GCL
