"""AnInfoNCE against a plain reference, R24's official arrangement, and the InfoNCE limit."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.special import logsumexp

from identifiable_cl.losses import AnInfoNCE, InfoNCE
from identifiable_cl.losses.base import NEGATIVE_SETS, REDUCTIONS
from identifiable_cl.losses import LOSSES


def reference(h, hp, hn, lam, factor, negatives, reduction, unit_norm=True) -> float:
    """Per-anchor loops with l(a, b) = -factor * sum_k lam_k (a_k - b_k)^2."""
    unit = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True) if unit_norm else x  # noqa: E731
    h, hp = unit(h.numpy()), unit(hp.numpy())
    hn = None if hn is None else unit(hn.numpy())
    lam = lam.detach().numpy()
    s = lambda a, b: -factor * float(np.sum(lam * (a - b) ** 2))  # noqa: E731

    def row(pos, negs):
        values = np.array(negs if reduction.startswith("decoupled") else [pos, *negs])
        out = -pos + logsumexp(values)
        return out - math.log(len(values)) if reduction.endswith("logmeanexp") else out

    B = len(h)
    rows = []
    for i in range(B):
        others = [j for j in range(B) if j != i]
        pos = s(h[i], hp[i])
        if negatives in ("symmetric", "r24"):
            negs = [s(h[i], x) for x in h[others]] + [s(h[i], x) for x in hp[others]]
            rows.append(row(pos, negs))
            if negatives == "symmetric":
                cross = [s(hp[i], x) for x in h[others]]
            else:
                cross = [s(h[i], x) for x in hp[others]]
            rows.append(row(pos, [s(hp[i], x) for x in hp[others]] + cross))
        elif negatives == "one_sided":
            rows.append(row(pos, [s(h[i], hp[j]) for j in others]))
        elif negatives == "first_view":
            rows.append(row(pos, [s(h[i], h[j]) for j in range(B)]))
        elif negatives == "first_view_others":
            rows.append(row(pos, [s(h[i], h[j]) for j in others]))
        else:
            rows.append(row(pos, [s(h[i], n) for n in (hn if hn.ndim == 2 else hn[i])]))
    return float(np.mean(rows))


def batch(B, d, seed, shared=None):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(B, d, generator=g, dtype=torch.float64)
    hp = h + 0.3 * torch.randn(B, d, generator=g, dtype=torch.float64)
    hn = None if shared is None else torch.randn(shared, d, generator=g, dtype=torch.float64)
    return h, hp, hn


@pytest.mark.parametrize("negatives", NEGATIVE_SETS)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize(
    "B,d,factor,init", [(2, 2, 0.5, "random"), (5, 4, 1.0, 3.0), (7, 6, 0.5, 0.2)]
)
@pytest.mark.parametrize("unit_norm", [True, False])
def test_matches_reference(negatives, reduction, B, d, factor, init, unit_norm):
    loss = AnInfoNCE(
        dim=d, lambda_init=init, seed=B, factor=factor, negatives=negatives,
        reduction=reduction, unit_norm=unit_norm,
    ).double()
    h, hp, hn = batch(B, d, seed=d, shared=4)
    want = reference(h, hp, hn, loss.lambda_hat, factor, negatives, reduction, unit_norm)
    assert loss(h, hp, hn).item() == pytest.approx(want, rel=1e-10, abs=1e-12)


def official_r24(h, hp, lam):
    """R24's arrangement, written out: 2B rows; first-view rows compare h_i with h_j, hp_j
    (j != i); second-view rows compare hp_i with hp_j and h_i with hp_j (j != i); the
    positive -(1/2)(h_i - hp_i)ᵀΛ(h_i - hp_i) sits in every denominator; log-sum-exp."""
    h = h / h.norm(dim=1, keepdim=True)
    hp = hp / hp.norm(dim=1, keepdim=True)
    B = len(h)

    def quad(a, b):
        return 0.5 * (lam * (a[:, None, :] - b[None, :, :]) ** 2).sum(-1)

    off = ~torch.eye(B, dtype=torch.bool)
    pos = -0.5 * (lam * (h - hp) ** 2).sum(1)
    aa, bb, ab = (-quad(a, b)[off].view(B, B - 1) for a, b in ((h, h), (hp, hp), (h, hp)))
    first = torch.logsumexp(torch.cat([aa, ab, pos[:, None]], 1), 1)
    second = torch.logsumexp(torch.cat([bb, ab, pos[:, None]], 1), 1)
    return (torch.cat([first, second]) - torch.cat([pos, pos])).mean()


def test_reproduces_official_arrangement():
    h, hp, _ = batch(6, 5, seed=11)
    loss = AnInfoNCE(dim=5, negatives="r24", factor=0.5, seed=3).double()
    want = official_r24(h, hp, loss.lambda_hat)
    torch.testing.assert_close(loss(h, hp), want, rtol=1e-12, atol=1e-12)
    symmetric = AnInfoNCE(dim=5, negatives="symmetric", factor=0.5, seed=3).double()
    assert symmetric(h, hp).item() != pytest.approx(loss(h, hp).item(), rel=1e-6)


@pytest.mark.parametrize("negatives", NEGATIVE_SETS)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("tau", [0.1, 0.5, 1.0, 3.0])
def test_isotropic_limit_is_cosine_infonce(negatives, reduction, tau):
    """Λ̂ = I/(2τ), factor 1 (or Λ̂ = I/τ, factor 1/2) on unit-norm outputs: cosine InfoNCE at τ."""
    h, hp, hn = batch(5, 4, seed=12, shared=6)
    h, hp, hn = (torch.nn.functional.normalize(x, dim=1) for x in (h, hp, hn))
    cosine = InfoNCE(dim=4, similarity="cosine", tau=tau, negatives=negatives, reduction=reduction)
    want = cosine(h, hp, hn)
    for factor, lam in ((1.0, 1 / (2 * tau)), (0.5, 1 / tau)):
        an = AnInfoNCE(
            dim=4, lambda_init=lam, factor=factor, negatives=negatives, reduction=reduction
        )
        assert an.lambda_hat.tolist() == pytest.approx([lam] * 4, rel=1e-6)
        an = an.double()
        an.raw_lambda.data.fill_(lam + math.log(-math.expm1(-lam)))
        torch.testing.assert_close(an(h, hp, hn), want, rtol=1e-10, atol=1e-12)


def test_stable_for_large_lambda_and_equal_rows_give_zero():
    h, hp, _ = batch(6, 4, seed=13)
    loss = AnInfoNCE(dim=4, lambda_init=1e4, unit_norm=False, negatives="first_view").double()
    terms = loss.terms(100 * h, 100 * hp)
    assert torch.all(terms.pos <= 0) and torch.all(terms.neg <= 0)
    assert torch.all(torch.diagonal(terms.neg) == 0)
    value = loss(100 * h, 100 * hp)
    assert torch.isfinite(value)
    value.backward()
    assert torch.isfinite(loss.raw_lambda.grad).all()


def test_gradcheck_inputs_and_lambda():
    loss = AnInfoNCE(dim=3, seed=1, negatives="independent").double()
    h, hp, hn = batch(4, 3, seed=14, shared=3)
    inputs = [x.requires_grad_() for x in (h, hp, hn)]
    assert torch.autograd.gradcheck(lambda a, b, c: loss(a, b, c), inputs)
    raw = loss.raw_lambda.detach().clone().requires_grad_()
    args = tuple(x.detach() for x in (h, hp, hn))
    of_lambda = lambda r: torch.func.functional_call(loss, {"raw_lambda": r}, args)  # noqa: E731
    assert torch.autograd.gradcheck(of_lambda, (raw,))


def test_random_init_is_seeded_and_small():
    a = AnInfoNCE(dim=4000, seed=7).raw_lambda.detach()
    b = AnInfoNCE(dim=4000, seed=7).raw_lambda.detach()
    c = AnInfoNCE(dim=4000, seed=8).raw_lambda.detach()
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert abs(a.mean().item()) < 0.01 and a.std().item() == pytest.approx(0.1, rel=0.05)


def test_unseeded_init_draws_from_torchs_default_generator():
    torch.manual_seed(3)
    expected = 0.1 * torch.randn(6, dtype=torch.float64)
    torch.manual_seed(3)
    drawn = AnInfoNCE(dim=6).raw_lambda.detach().double()
    assert torch.allclose(drawn, expected.float().double())


def test_runs_draw_their_initial_lambda_from_the_root_seed():
    from identifiable_cl.components import models
    from identifiable_cl.components import load_config
    import dgp

    def initial(seed, **loss):
        config = load_config(None, {"seed": seed, "loss.name": "aninfonce", "loss.unit_norm": False,
                                    "dgp.mixing.cond_draws": 100, **loss})
        process = dgp.build_process(config["dgp"], seed=config["seed"])
        return models(config, process)[1].raw_lambda.detach()

    first, again, second = initial(0), initial(0), initial(1)
    assert torch.equal(first, again) and not torch.equal(first, second)
    explicit = [initial(seed, **{"loss.seed": 5}) for seed in (0, 1)]
    assert torch.equal(explicit[0], explicit[1])
    assert torch.equal(explicit[0], AnInfoNCE(dim=first.numel(), seed=5).raw_lambda.detach())


@pytest.mark.parametrize("value", [1e-3, 0.5, 1.0, 50.0])
def test_scalar_init_and_logs(value):
    loss = AnInfoNCE(dim=3, lambda_init=value, lr=1e-3)
    assert loss.logs()["lambda_hat"] == pytest.approx([value] * 3, rel=1e-5)
    assert loss.param_groups() == [{"params": [loss.raw_lambda], "lr": 1e-3}]
    assert loss.needs_unit_norm and not loss.requires_negatives


def test_lambda_is_trained_and_stays_positive():
    loss = AnInfoNCE(dim=3, lambda_init=1.0)
    opt = torch.optim.SGD(loss.parameters(), lr=50.0)
    h, hp, _ = batch(16, 3, seed=15)
    before = loss.lambda_hat.detach().clone()
    for _ in range(5):
        opt.zero_grad()
        loss(h.float(), hp.float()).backward()
        opt.step()
    assert not torch.equal(before, loss.lambda_hat.detach())
    assert torch.all(loss.lambda_hat > 0)


def test_batch_sizes_4_then_7():
    loss = AnInfoNCE(dim=3, seed=2).double()
    for B in (4, 7):
        h, hp, _ = batch(B, 3, seed=B)
        want = reference(h, hp, None, loss.lambda_hat, 0.5, "symmetric", "logsumexp")
        assert loss(h, hp).item() == pytest.approx(want, rel=1e-10)


@pytest.mark.parametrize(
    "options,key",
    [
        ({"lambda_init": 0.0}, "loss.lambda_init"),
        ({"lambda_init": -1.0}, "loss.lambda_init"),
        ({"lambda_init": "uniform"}, "loss.lambda_init"),
        ({"factor": 0}, "loss.factor"),
        ({"seed": -1}, "loss.seed"),
        ({"seed": 1.5}, "loss.seed"),
        ({"negatives": "z21"}, "loss.negatives"),
        ({"reduction": "sum"}, "loss.reduction"),
        ({"unit_norm": 1}, "loss.unit_norm"),
        ({"lr": -1e-3}, "loss.lr"),
        ({"tau": 1.0}, "loss.tau: unknown option"),
    ],
)
def test_invalid_options(options, key):
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        LOSSES.build({"name": "aninfonce", **options}, key="loss", dim=3)
