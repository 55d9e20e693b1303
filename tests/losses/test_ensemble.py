"""Ensemble: a weighted sum of members, heads on the shared encoder, nothing sliced off."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from identifiable_cl.losses import AnInfoNCE, Ensemble, InfoNCE
from identifiable_cl.losses import LOSSES


def batch(B, d, seed, shared=None):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(B, d, generator=g, dtype=torch.float64)
    hp = h + 0.3 * torch.randn(B, d, generator=g, dtype=torch.float64)
    hn = None if shared is None else torch.randn(shared, d, generator=g, dtype=torch.float64)
    return h, hp, hn


def build(members, dim=4, **options):
    return LOSSES.build({"name": "ensemble", "members": members, **options}, key="loss", dim=dim)


MEMBERS = [
    {"name": "infonce"},
    {"name": "infonce", "similarity": "l3", "tau": 0.3, "negatives": "first_view"},
    {"name": "infonce", "negatives": "independent", "reduction": "logmeanexp", "learn_tau": True},
    {"name": "aninfonce", "seed": 5, "negatives": "r24"},
    {"name": "hard_negative", "beta": 2.0, "tau_plus": 0.1},
]


@pytest.mark.parametrize("spec", MEMBERS)
@pytest.mark.parametrize("B", [3, 6])
def test_one_member_equals_the_member(spec, B):
    h, hp, hn = batch(B, 4, seed=B, shared=5)
    alone = LOSSES.build(spec, key="loss", dim=4).double()
    ensemble = build([spec]).double()
    assert ensemble.requires_negatives == alone.requires_negatives
    assert ensemble.needs_unit_norm == alone.needs_unit_norm
    torch.testing.assert_close(ensemble(h, hp, hn), alone(h, hp, hn), rtol=0, atol=0)


def mlp(x, layers):
    """Plain forward pass of Linear-LeakyReLU-...-Linear from (weight, bias) pairs."""
    for i, (w, b) in enumerate(layers):
        if i > 0:
            x = F.leaky_relu(x, 0.01)
        x = x @ w.T + b
    return x


def test_weighted_sum_with_heads():
    h, hp, hn = batch(5, 4, seed=1, shared=3)
    ensemble = build(
        [
            {"name": "infonce", "weight": 0.3, "similarity": "l2"},
            {
                "name": "aninfonce",
                "weight": 2.0,
                "head": [7, 3],
                "seed": 1,
                "negatives": "independent",
            },
        ]
    ).double()
    linears = [m for m in ensemble.heads[1] if isinstance(m, torch.nn.Linear)]
    assert [tuple(m.weight.shape) for m in linears] == [(7, 4), (3, 7)]
    layers = [(m.weight, m.bias) for m in linears]
    lam = ensemble.members[1].lambda_hat.detach()
    member = AnInfoNCE(dim=3, lambda_init=1.0, negatives="independent").double()
    member.raw_lambda.data = ensemble.members[1].raw_lambda.detach().clone()
    torch.testing.assert_close(member.lambda_hat, lam)
    projected = (mlp(x, layers) for x in (h, hp, hn))
    want = 0.3 * InfoNCE(dim=4, similarity="l2")(h, hp) + 2.0 * member(*projected)
    torch.testing.assert_close(ensemble(h, hp, hn), want, rtol=1e-12, atol=1e-12)


def test_every_parameter_reaches_the_optimizer():
    ensemble = build(
        [
            {"name": "infonce", "learn_tau": True, "lr": 0.5},
            {"name": "aninfonce", "head": [6, 5, 3]},
            {"name": "hard_negative", "head": [2], "learn_tau": True},
        ],
        lr=1e-2,
    )
    params = list(ensemble.parameters())
    groups = ensemble.param_groups()
    grouped = [p for g in groups for p in g["params"]]
    assert len(grouped) == len(params) == len({id(p) for p in grouped})
    assert {id(p) for p in grouped} == {id(p) for p in params}
    assert len(params) == 1 + (3 * 2 + 1) + (2 + 1)
    lrs = {id(p): g["lr"] for g in groups for p in g["params"]}
    assert lrs[id(ensemble.members[0].temperature.log_tau)] == 0.5
    assert lrs[id(ensemble.members[1].raw_lambda)] == 1e-2
    assert all(lrs[id(p)] == 1e-2 for p in ensemble.heads.parameters())
    h, hp, _ = batch(6, 4, seed=2)
    before = [p.detach().clone() for p in params]
    opt = torch.optim.Adam([{**g, "lr": g["lr"] or 1e-3} for g in groups])
    ensemble(h.float(), hp.float()).backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in params)
    opt.step()
    assert all(not torch.equal(b, p.detach()) for b, p in zip(before, params))


@pytest.mark.parametrize("head", [None, [3]])
def test_gradient_reaches_every_output_dimension(head):
    """Regression for a defect of a reference code: a combined loss sliced z[:, 0:-1] and dropped the last dimension."""
    h, hp, _ = batch(6, 4, seed=3)
    ensemble = build(
        [
            {"name": "infonce", "similarity": "l2", "head": head},
            {"name": "aninfonce", "weight": 0.5, "head": head},
        ]
    ).double()
    h.requires_grad_()
    ensemble(h, hp).backward()
    assert torch.all(h.grad.abs().sum(0) > 0)
    moved = h.detach().clone()
    moved[:, -1] += 1.0
    assert ensemble(moved, hp).item() != pytest.approx(ensemble(h.detach(), hp).item(), rel=1e-9)


def test_negatives_go_only_to_members_that_use_them():
    h, hp, hn = batch(5, 4, seed=4, shared=6)
    ensemble = build(
        [{"name": "infonce"}, {"name": "infonce", "negatives": "independent", "head": [3]}]
    )
    assert ensemble.requires_negatives
    assert not build([{"name": "infonce", "similarity": "l1"}]).requires_negatives
    with pytest.raises(ValueError, match=r"loss\.members\[1\]\.negatives='independent' needs"):
        ensemble(h.float(), hp.float())
    assert torch.isfinite(ensemble.double()(h, hp, hn))


def test_unit_norm_flag_only_for_members_without_head():
    assert build([{"name": "infonce", "similarity": "l2"}, {"name": "infonce"}]).needs_unit_norm
    with_head = build([{"name": "infonce", "similarity": "l2"}, {"name": "infonce", "head": [4]}])
    assert not with_head.needs_unit_norm


def test_nested_ensemble():
    h, hp, _ = batch(5, 4, seed=5)
    inner = [
        {"name": "infonce", "tau": 0.5},
        {"name": "infonce", "similarity": "l1", "weight": 2.0},
    ]
    nested = build([{"name": "ensemble", "members": inner, "weight": 0.5}, {"name": "infonce"}])
    nested = nested.double()
    inner_value = InfoNCE(dim=4, tau=0.5)(h, hp) + 2 * InfoNCE(dim=4, similarity="l1")(h, hp)
    want = 0.5 * inner_value + InfoNCE(dim=4)(h, hp)
    torch.testing.assert_close(nested(h, hp), want, rtol=1e-12, atol=1e-12)
    assert set(nested.logs()) == {
        "m0_m0_tau", "m0_m1_tau", "m1_tau", "m0_loss", "m1_loss", "m0_m0_loss", "m0_m1_loss"
    }
    bad = [{"name": "ensemble", "members": [{"name": "infonce"}, {"name": "infonce", "tau": -1}]}]
    with pytest.raises(ValueError, match=r"loss\.members\[0\]\.members\[1\]\.tau=-1"):
        build(bad)


def test_logs_are_prefixed():
    ensemble = build(
        [{"name": "infonce", "tau": 0.2}, {"name": "aninfonce", "lambda_init": 2.0, "head": [3]}]
    )
    logs = ensemble.logs()
    assert logs["m0_tau"] == pytest.approx(0.2)
    assert logs["m1_lambda_hat"] == pytest.approx([2.0] * 3)
    assert "m0_loss" not in logs
    h, hp, _ = batch(4, 4, seed=6)
    ensemble(h.float(), hp.float())
    logs = ensemble.logs()
    assert isinstance(logs["m0_loss"], float) and isinstance(logs["m1_loss"], float)


def test_batch_sizes_4_then_7_and_state_dict():
    def make(seed):
        return build([{"name": "infonce"}, {"name": "aninfonce", "head": [5, 3], "seed": seed}])

    ensemble = make(1).double()
    torch.manual_seed(123)
    copy = make(2).double()
    copy.load_state_dict(ensemble.state_dict())
    for B in (4, 7):
        h, hp, _ = batch(B, 4, seed=B)
        torch.testing.assert_close(copy(h, hp), ensemble(h, hp))


def test_gradcheck():
    ensemble = build(
        [
            {"name": "infonce", "similarity": "l2", "weight": 0.7},
            {"name": "hard_negative", "head": [3], "beta": 1.0},
        ]
    ).double()
    h, hp, _ = batch(4, 4, seed=7)
    inputs = (h.requires_grad_(), hp.requires_grad_())
    assert torch.autograd.gradcheck(lambda a, b: ensemble(a, b), inputs)


@pytest.mark.parametrize(
    "members,key",
    [
        ([], r"loss\.members=\[\]"),
        ({"name": "infonce"}, r"loss\.members="),
        ("infonce", r"loss\.members="),
        ([{"tau": 1.0}], r"loss\.members\[0\]="),
        ([{"name": "infonce"}, {"name": "infonce", "weight": -1.0}], r"loss\.members\[1\]\.weight"),
        ([{"name": "infonce", "head": [0]}], r"loss\.members\[0\]\.head\[0\]"),
        ([{"name": "infonce", "head": "64"}], r"loss\.members\[0\]\.head="),
        ([{"name": "infonce", "head": []}], r"loss\.members\[0\]\.head="),
        ([{"name": "infonce", "taux": 1.0}], r"loss\.members\[0\]\.taux: unknown option"),
        ([{"name": "infonce", "dim": 3}], r"loss\.members\[0\]\.dim: unknown option"),
        ([{"name": "nope"}], r"loss\.members\[0\]\.name: unknown name 'nope'"),
        ([{"name": "infonce", "tau": 0}], r"loss\.members\[0\]\.tau=0"),
        ([{"name": "aninfonce", "factor": -2}], r"loss\.members\[0\]\.factor"),
    ],
)
def test_invalid_members(members, key):
    with pytest.raises(ValueError, match=key):
        build(members)


def test_direct_construction_uses_the_loss_key():
    with pytest.raises(ValueError, match=r"loss\.lr"):
        Ensemble(dim=3, members=[{"name": "infonce"}], lr=0)
