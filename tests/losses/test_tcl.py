"""TCL's loss against a plain per-row reference: values, gradients, the features, the separable limit and the
options."""

from __future__ import annotations

import math

import pytest
import torch

from identifiable_cl.losses import LOSSES
from identifiable_cl.losses.tcl import TCL
from loss_reference import assert_invalid_option

FEATURE_FUNCTIONS = {"identity": lambda y: y, "abs": lambda y: abs(y), "square": lambda y: y * y}
"""φ written for one number at a time."""


def batch(B=6, d=3, S=4, seed=1):
    """h, h+ ``(B, d)`` float64 and labels u ``(B,)`` in 0..S-1 covering every segment when B >= S."""
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(B, d, generator=g, dtype=torch.float64)
    hp = torch.randn(B, d, generator=g, dtype=torch.float64)
    u = torch.arange(B) % S
    return h, hp, u


def loaded(d, S, seed=7, **options):
    """The loss with W (S, d) and b (S,) drawn from ``seed``, float64."""
    loss = TCL(dim=d, segments=S, **options).double()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        loss.regression.weight.copy_(torch.randn(S, d, generator=g, dtype=torch.float64))
        loss.regression.bias.copy_(torch.randn(S, generator=g, dtype=torch.float64))
    return loss


def reference(h, hp, u, W, b, feature):
    """mean over the rows y of h and of h+, each labelled u_j, of -logit_{u_j}(y) + log Σ_τ exp logit_τ(y),
    logit_τ(y) = Σ_k W[τ, k] φ(y_k) + b[τ], written one row and one segment at a time."""
    phi = FEATURE_FUNCTIONS[feature]
    total = 0.0
    for y, label in [(h[j], int(u[j])) for j in range(len(h))] + [(hp[j], int(u[j])) for j in range(len(hp))]:
        logits = [b[t] + sum(W[t, k] * phi(y[k]) for k in range(len(y))) for t in range(W.shape[0])]
        total = total - logits[label] + torch.log(sum(torch.exp(logit) for logit in logits))
    return total / (2 * len(h))


@pytest.mark.parametrize("feature", ["abs", "square", "identity"])
def test_value_and_gradients_match_the_reference(feature):
    h, hp, u = batch()
    loss = loaded(3, 4, feature=feature)
    leaves = [x.clone().requires_grad_() for x in (h, hp)]
    got = loss(*leaves, u=u)
    got.backward()
    refs = [x.clone().requires_grad_() for x in (h, hp)]
    W = loss.regression.weight.detach().clone().requires_grad_()
    b = loss.regression.bias.detach().clone().requires_grad_()
    expected = reference(*refs, u, W, b, feature)
    expected.backward()
    assert got.item() == pytest.approx(expected.item(), rel=1e-12)
    for mine, theirs in (*zip(leaves, refs), (loss.regression.weight, W), (loss.regression.bias, b)):
        assert torch.allclose(mine.grad, theirs.grad, rtol=1e-10, atol=1e-12)


def test_the_reference_can_fail():
    """The reference with another feature, or with the labels rolled, gives another value."""
    h, hp, u = batch()
    loss = loaded(3, 4)
    W, b = loss.regression.weight.detach(), loss.regression.bias.detach()
    value = loss(h, hp, u=u).item()
    assert value == pytest.approx(reference(h, hp, u, W, b, "abs").item(), rel=1e-12)
    assert value != pytest.approx(reference(h, hp, u, W, b, "identity").item(), rel=1e-6)
    assert value != pytest.approx(reference(h, hp, u.roll(1), W, b, "abs").item(), rel=1e-6)
    assert value != pytest.approx(reference(h, h, u, W, b, "abs").item(), rel=1e-6)  # the positives are read


@pytest.mark.parametrize("feature", ["abs", "square", "identity"])
def test_gradcheck(feature):
    h, hp, u = batch(B=5, seed=2)
    loss = loaded(3, 4, feature=feature)
    inputs = (h.clone().requires_grad_(), hp.clone().requires_grad_())
    assert torch.autograd.gradcheck(lambda x, y: loss(x, y, u=u), inputs)


def test_anchors_and_positives_are_classified_alike_and_separate_negatives_are_not_read():
    h, hp, u = batch()
    loss = loaded(3, 4)
    value = loss(h, hp, u=u).item()
    assert loss(hp, h, u=u).item() == pytest.approx(value, rel=1e-14)
    assert loss(h, hp, torch.ones(5, 3, dtype=torch.float64), u=u).item() == value


def test_a_perfectly_separating_regression_drives_the_loss_to_zero():
    """Features that are one-hot codes of the segment and W = c·I: the loss is log(1 + (S - 1) e^{-c}) -> 0."""
    S = 3
    u = torch.tensor([0, 1, 2, 1])
    h = torch.eye(S, dtype=torch.float64)[u]
    for c in (1.0, 10.0, 50.0):
        loss = TCL(dim=S, segments=S, feature="identity").double()
        with torch.no_grad():
            loss.regression.weight.copy_(c * torch.eye(S))
            loss.regression.bias.zero_()
        assert loss(h, h, u=u).item() == pytest.approx(math.log1p((S - 1) * math.exp(-c)), rel=1e-12)


def test_the_regression_starts_as_torchs_linear_layer_and_learns_at_its_lr():
    torch.manual_seed(0)
    loss = TCL(dim=3, segments=5, lr=0.01)
    torch.manual_seed(0)
    layer = torch.nn.Linear(3, 5)
    assert torch.equal(loss.regression.weight, layer.weight) and torch.equal(loss.regression.bias, layer.bias)
    assert loss.param_groups() == [{"params": [loss.regression.weight, loss.regression.bias], "lr": 0.01}]
    assert loss.uses_aux and loss.mi_bound is None and not loss.requires_negatives and not loss.needs_unit_norm


def test_the_labels_are_required_and_checked():
    h, hp, u = batch()
    loss = TCL(dim=3, segments=4).double()
    with pytest.raises(ValueError, match=r"^loss\.name='tcl' is invalid: it reads each anchor's segment u, and none "
                                         "was given"):
        loss(h, hp)
    with pytest.raises(ValueError, match=r"u must hold \(B=6,\) int64 segment labels; got shape \(6, 1\)"):
        loss(h, hp, u=u[:, None])
    with pytest.raises(ValueError, match=r"u must hold .* got shape \(6,\) and torch\.float64"):
        loss(h, hp, u=u.double())


def test_half_precision_inputs_are_computed_in_float32():
    h, hp, u = batch()
    assert TCL(dim=3, segments=4)(h.bfloat16(), hp.bfloat16(), u=u).dtype == torch.float32


@pytest.mark.parametrize("options, message", [
    ({"segments": 1}, "loss.segments=1 is invalid: must be an integer >= 2"),
    ({"feature": "relu"}, "loss.feature='relu' is invalid: allowed: 'identity', 'abs', 'square'"),
    ({"lr": 0}, "loss.lr=0 is invalid: must be > 0"),
    ({"dim": 0}, "loss.dim=0 is invalid"),
    ({"tau": 1.0}, r"loss.tau: unknown option\(s\) for losses 'tcl'; allowed: segments, feature, lr"),
])
def test_invalid_options_give_one_line_naming_the_key(options, message):
    dim = options.pop("dim", 3)
    assert_invalid_option("tcl", options, message, dim=dim)


def test_registered():
    assert LOSSES.get("tcl") is TCL
