"""Binary NCE against a plain per-anchor reference: values, gradients, options and limits."""

from __future__ import annotations

import math

import pytest
import torch

import identifiable_cl.losses.nce  # noqa: F401  (registration)
from identifiable_cl.losses import LOSSES
from identifiable_cl.losses.base import SIMILARITIES
from identifiable_cl.losses.nce import NCE
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


def softplus(x: torch.Tensor) -> torch.Tensor:
    return torch.log1p(torch.exp(x))


def reference(h, hp, hn, kind, tau, offset, negatives) -> torch.Tensor:
    """Mean over rows of softplus(log ν - f+) + Σ_j softplus(f_j - log ν), f = sim / tau + offset."""
    f = critic(kind, tau, offset)
    values = []
    for pos, negs in candidate_rows(h, hp, hn, negatives):
        log_nu = math.log(len(negs))
        row = softplus(log_nu - f(pos))
        for pair in negs:
            row = row + softplus(f(pair) - log_nu)
        values.append(row)
    return sum(values) / len(values)


@pytest.mark.parametrize("B", BATCHES)
@pytest.mark.parametrize("negatives", CRITIC_NEGATIVES)
@pytest.mark.parametrize("kind", SIMILARITIES)
def test_values_and_gradients_match_reference(kind, negatives, B):
    check_critic_against_reference(NCE, reference, kind, negatives, B)


def test_reference_can_fail():
    check_critic_reference_can_fail(NCE, reference)


@pytest.mark.parametrize("shape", ["shared", "per_anchor"])
def test_logistic_form_of_gutmann_hyvarinen(shape):
    """-log r_ν(f+) - Σ_j log(1 - r_ν(f_j)), r_ν(u) = 1 / (1 + ν e^{-u}) (Gutmann & Hyvärinen 2012)."""
    h, hp, hn = dgp_views(shape)
    tau, c, nu = 3.0, -0.4, 6  # moderate logits: 1 - r(u) is computed as written
    loss = NCE(dim=4, similarity="dot", tau=tau, offset=c, negatives="independent").double()
    c = float(loss.offset.detach())  # -0.4 as the float32 parameter holds it
    pos, neg = dot_critic_matrices(h, hp, hn, tau, c)

    def r(u):
        return 1.0 / (1.0 + nu * torch.exp(-u))

    want = (-torch.log(r(pos)) - torch.log(1 - r(neg)).sum(1)).mean()
    torch.testing.assert_close(loss(h, hp, hn), want, rtol=1e-12, atol=1e-12)


def test_one_negative_is_the_2010_logistic_loss():
    """ν = 1 (one_sided, B = 2): no prior correction, -log σ(f+) - log(1 - σ(f-))."""
    h, hp = encodings(2, 3, 3)
    loss = NCE(dim=3, similarity="l2", tau=2.0, offset=0.5, negatives="one_sided").double()
    f = lambda a, b: -((a - b) ** 2).sum() / 2.0 + 0.5  # noqa: E731
    rows = [-torch.log(torch.sigmoid(f(h[i], hp[i]))) - torch.log(1 - torch.sigmoid(f(h[i], hp[1 - i]))) for i in (0, 1)]
    torch.testing.assert_close(loss(h, hp), (rows[0] + rows[1]) / 2, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind", SIMILARITIES)
@pytest.mark.parametrize("negatives", CRITIC_NEGATIVES)
def test_gradcheck(kind, negatives):
    check_critic_gradcheck(NCE, kind, negatives)


def test_terms_are_the_critic_values():
    h, hp = encodings(4, 3, 5)
    loss = NCE(dim=3, similarity="l1", tau=0.5, offset=-1.5, negatives="one_sided").double()
    t = loss.terms(h, hp)
    torch.testing.assert_close(t.pos, -(h - hp).abs().sum(1) / 0.5 - 1.5)
    assert t.n_neg == 3 and torch.isinf(t.neg.diagonal()).all() and torch.isfinite(t.neg).sum() == 12
    torch.testing.assert_close(t.neg[0, 1], -(h[0] - hp[1]).abs().sum() / 0.5 - 1.5)


def test_offset_learnt_or_fixed():
    learnt, h, hp = check_offset_learnt_or_fixed(NCE, 0.25, seed=6)
    # a step on the offset moves it, and the logged value follows
    opt = torch.optim.SGD(learnt.param_groups(), lr=0.5)
    learnt(h.float(), hp.float()).backward()
    opt.step()
    assert learnt.logs()["offset"] != 0.25 and learnt.logs()["offset"] == pytest.approx(float(learnt.offset.detach()))


def test_dtypes_devices_and_extreme_logits():
    h, hp = encodings(5, 3, 7)
    loss = NCE(dim=3, similarity="l3", offset=0.25)
    assert_float32_as_float64(loss, h, hp)
    assert loss.float()(h, hp).dtype == torch.float64  # float64 encodings are scored in float64
    # softplus is evaluated exactly: logits of ±1e4 in float32 give a finite value and gradients
    sharp = NCE(dim=3, similarity="cosine", tau=1e-4)
    x, xp = h.float().requires_grad_(), hp.float().requires_grad_()
    value = sharp(x, xp)
    value.backward()
    assert torch.isfinite(value) and torch.isfinite(x.grad).all() and torch.isfinite(sharp.offset.grad)


def test_flags_and_negatives_handling():
    assert NCE(dim=2).mi_bound is None  # NCE bounds no mutual information
    in_batch, independent, h, hp = check_critic_flags_and_negatives(NCE, "nce", "dot", seed=8)
    with pytest.raises(ValueError, match="h_neg must have shape"):
        independent(h, hp, torch.randn(4, 3, 5, dtype=torch.float64))
    with pytest.raises(ValueError, match="built for dim=2"):
        in_batch(torch.randn(4, 3), torch.randn(4, 3))


@pytest.mark.parametrize(
    "options,message",
    [
        ({"tau": 0.0}, "loss.tau"),
        ({"tau": -1.0}, "loss.tau"),
        ({"tau": float("nan")}, "loss.tau"),
        ({"tau": 1e-40}, "loss.tau"),
        ({"tau": 1e39}, "loss.tau"),
        ({"tau": "1"}, "loss.tau"),
        ({"similarity": "l4"}, "loss.similarity"),
        ({"negatives": "all"}, "loss.negatives"),
        ({"negatives": "first_view"}, r"loss.negatives='first_view' is invalid: .* own negative; allowed: 'symmetric'"),
        ({"offset": float("inf")}, "loss.offset"),
        ({"offset": float("nan")}, "loss.offset"),
        ({"offset": -1e39}, "loss.offset"),
        ({"offset": "0"}, "loss.offset"),
        ({"learn_offset": "yes"}, "loss.learn_offset"),
        ({"lr": 0.0}, "loss.lr"),
        ({"reduction": "logsumexp"}, "loss.reduction: unknown option"),
    ],
)
def test_invalid_options(options, message):
    assert_invalid_option("nce", options, message)


def test_built_through_the_registry():
    loss = LOSSES.build({"name": "nce", "similarity": "l2", "tau": 0.5, "offset": 1.0, "negatives": "r24"},
                        key="loss", dim=3)
    assert isinstance(loss, NCE) and loss.config_key == "loss"
    assert "similarity='l2', tau=0.5, offset=1, learn_offset=True, negatives='r24'" in repr(loss)
    doc = NCE.__doc__
    assert "Gutmann & Hyvärinen" in doc and "softplus(-(f(a, a+) - log ν))" in doc
