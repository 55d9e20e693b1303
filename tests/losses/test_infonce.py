"""InfoNCE against a plain per-anchor reference, the three reference codes, and its limits."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.special import logsumexp

from identifiable_cl.losses import AnInfoNCE, Ensemble, InfoNCE
from identifiable_cl.losses.base import DECOUPLED, NEGATIVE_SETS, REDUCTIONS, SIMILARITIES
from identifiable_cl.losses import LOSSES


def sim(a: np.ndarray, b: np.ndarray, kind: str) -> float:
    if kind == "cosine":
        return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
    if kind == "dot":
        return float(a @ b)
    return -float(np.sum(np.abs(a - b) ** int(kind[1])))


def row_loss(pos: float, negs: list[float], reduction: str) -> float:
    """-pos + log sum (or mean) of exp over the positive and the negatives; the decoupled
    reductions take it over the negatives alone."""
    values = np.array(negs if reduction.startswith("decoupled") else [pos, *negs])
    out = -pos + logsumexp(values)
    return out - math.log(len(values)) if reduction.endswith("logmeanexp") else out


def reference(h, hp, hn, kind, tau, negatives, reduction) -> float:
    """Loops over anchors; builds each anchor's candidate list explicitly."""
    h, hp = h.numpy(), hp.numpy()
    B = len(h)
    s = lambda a, b: sim(a, b, kind) / tau  # noqa: E731
    rows = []
    for i in range(B):
        others = [j for j in range(B) if j != i]
        pos = s(h[i], hp[i])
        if negatives in ("symmetric", "r24"):
            negs = [s(h[i], h[j]) for j in others] + [s(h[i], hp[j]) for j in others]
            rows.append(row_loss(pos, negs, reduction))
            if negatives == "symmetric":
                negs = [s(hp[i], hp[j]) for j in others] + [s(hp[i], h[j]) for j in others]
                rows.append(row_loss(s(hp[i], h[i]), negs, reduction))
            else:
                negs = [s(hp[i], hp[j]) for j in others] + [s(h[i], hp[j]) for j in others]
                rows.append(row_loss(pos, negs, reduction))
        elif negatives == "one_sided":
            rows.append(row_loss(pos, [s(h[i], hp[j]) for j in others], reduction))
        elif negatives == "first_view":
            rows.append(row_loss(pos, [s(h[i], h[j]) for j in range(B)], reduction))
        elif negatives == "first_view_others":
            rows.append(row_loss(pos, [s(h[i], h[j]) for j in others], reduction))
        else:
            negs = hn.numpy() if hn.dim() == 2 else hn[i].numpy()
            rows.append(row_loss(pos, [s(h[i], n) for n in negs], reduction))
    return float(np.mean(rows))


def batch(B: int, d: int, seed: int, k: int | None = None, shared: int | None = None):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(B, d, generator=g, dtype=torch.float64)
    hp = h + 0.3 * torch.randn(B, d, generator=g, dtype=torch.float64)
    hn = None
    if k is not None:
        hn = torch.randn(B, k, d, generator=g, dtype=torch.float64)
    if shared is not None:
        hn = torch.randn(shared, d, generator=g, dtype=torch.float64)
    return h, hp, hn


SHAPES = [(2, 1, 1.0), (4, 3, 0.5), (7, 5, 2.0)]


@pytest.mark.parametrize("kind", SIMILARITIES)
@pytest.mark.parametrize("negatives", NEGATIVE_SETS)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("B,d,tau", SHAPES)
def test_matches_reference(kind, negatives, reduction, B, d, tau):
    loss = InfoNCE(dim=d, similarity=kind, tau=tau, negatives=negatives, reduction=reduction)
    for hn_shape in ({"shared": 6}, {"k": 3}) if negatives == "independent" else ({},):
        h, hp, hn = batch(B, d, seed=B * 100 + d, **hn_shape)
        got = loss(h, hp, hn)
        want = reference(h, hp, hn, kind, tau, negatives, reduction)
        assert got.dtype == torch.float64 and got.dim() == 0
        assert got.item() == pytest.approx(want, rel=1e-10, abs=1e-12)


def test_reference_can_fail():
    h, hp, _ = batch(5, 3, seed=1)
    sym = InfoNCE(dim=3, negatives="symmetric")(h, hp).item()
    r24 = InfoNCE(dim=3, negatives="r24")(h, hp).item()
    assert sym != pytest.approx(r24, rel=1e-6)
    want_sym = reference(h, hp, None, "cosine", 1.0, "symmetric", "logsumexp")
    assert want_sym == pytest.approx(sym, rel=1e-10) and want_sym != pytest.approx(r24, rel=1e-6)


def test_z21_cl_ica_formula():
    """cl-ica: z3 = roll(z1, 1); per anchor pos/τ + logsumexp(-[||z1_i - z3_k||_p^p, pos] / τ)."""
    h, hp, _ = batch(6, 4, seed=3)
    for p in (1, 2, 3):
        for tau in (1.0, 0.3):
            z3 = torch.roll(h, 1, 0)
            neg = (h[:, None, :] - z3[None, :, :]).abs().pow(p).sum(-1)
            pos = (h - hp).abs().pow(p).sum(-1)
            lse = torch.logsumexp(-torch.cat([neg, pos[:, None]], 1) / tau, 1)
            want = (2 * (0.5 * pos / tau + 0.5 * lse)).mean()
            got = InfoNCE(dim=4, similarity=f"l{p}", tau=tau, negatives="first_view")(h, hp)
            torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    u, up = torch.nn.functional.normalize(h, dim=1), torch.nn.functional.normalize(hp, dim=1)
    neg = u @ torch.roll(u, 1, 0).T
    pos = (u * up).sum(1)
    want = (-pos / 0.5 + torch.logsumexp(torch.cat([neg, pos[:, None]], 1) / 0.5, 1)).mean()
    for kind in ("dot", "cosine"):
        got = InfoNCE(dim=4, similarity=kind, tau=0.5, negatives="first_view")(u, up)
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_vk21_formula():
    """ssl_identifiability: fresh z3 batch, pos + logmeanexp(-[||z1_i - z3_k||², pos])."""
    h, hp, hn = batch(5, 4, seed=4, shared=5)
    neg = ((h[:, None, :] - hn[None, :, :]) ** 2).sum(-1)
    pos = ((h - hp) ** 2).sum(-1)
    lme = torch.logsumexp(-torch.cat([neg, pos[:, None]], 1), 1) - math.log(6)
    want = (pos + lme).mean()
    loss = InfoNCE(dim=4, similarity="l2", negatives="independent", reduction="logmeanexp")
    torch.testing.assert_close(loss(h, hp, hn), want, rtol=1e-12, atol=1e-12)


def test_symmetric_is_symmetric_in_the_views_and_batch_order():
    h, hp, _ = batch(6, 3, seed=5)
    perm = torch.randperm(6, generator=torch.Generator().manual_seed(0))
    for kind in SIMILARITIES:
        loss = InfoNCE(dim=3, similarity=kind, tau=0.7)
        torch.testing.assert_close(loss(h, hp), loss(hp, h), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(loss(h, hp), loss(h[perm], hp[perm]), rtol=1e-12, atol=1e-12)
    one_sided = InfoNCE(dim=3, negatives="one_sided")
    assert one_sided(h, hp).item() != pytest.approx(one_sided(hp, h).item(), rel=1e-6)


def test_cosine_ignores_scale_and_positive_pairs_lower_the_loss():
    h, hp, _ = batch(5, 4, seed=6)
    loss = InfoNCE(dim=4, tau=0.2)
    torch.testing.assert_close(loss(3 * h, 0.5 * hp), loss(h, hp))
    assert loss(h, h).item() < loss(h, torch.roll(h, 1, 0)).item()


@pytest.mark.parametrize("kind", SIMILARITIES)
@pytest.mark.parametrize("negatives,reduction", [(n, "logsumexp") for n in NEGATIVE_SETS] + [
    ("symmetric", "decoupled_logsumexp"), ("first_view", "decoupled_logmeanexp"),
    ("r24", "decoupled_logmeanexp"), ("independent", "decoupled_logsumexp"),
])
def test_gradcheck(kind, negatives, reduction):
    loss = InfoNCE(dim=3, similarity=kind, tau=0.7, learn_tau=True, negatives=negatives, reduction=reduction).double()
    h, hp, hn = batch(4, 3, seed=7, shared=3)
    inputs = [x.requires_grad_() for x in (h, hp, hn)]
    assert torch.autograd.gradcheck(lambda a, b, c: loss(a, b, c), inputs)
    loss(h, hp, hn).backward()
    grad = loss.temperature.log_tau.grad
    assert grad is not None and torch.isfinite(grad)


def test_learnable_temperature():
    loss = InfoNCE(dim=3, tau=0.25, learn_tau=True, lr=1e-2)
    assert loss.logs()["tau"] == pytest.approx(0.25)
    assert [g["lr"] for g in loss.param_groups()] == [1e-2]
    assert sum(p.numel() for p in loss.parameters()) == 1
    h, hp, _ = batch(8, 3, seed=8)
    fixed = InfoNCE(dim=3, tau=0.25)
    torch.testing.assert_close(loss.double()(h, hp), fixed(h, hp))
    assert fixed.param_groups() == [] and list(fixed.parameters()) == []


def test_masks_follow_the_batch_size():
    """Regression for a defect of the reference codes: loss masks hard-coded to one device and batch size.
    One module, B = 4 then 7."""
    for negatives in NEGATIVE_SETS:
        loss = InfoNCE(dim=3, similarity="l2", negatives=negatives)
        for B in (4, 7, 4):
            h, hp, hn = batch(B, 3, seed=B, shared=2 * B)
            want = reference(h, hp, hn, "l2", 1.0, negatives, "logsumexp")
            assert loss(h, hp, hn).item() == pytest.approx(want, rel=1e-10)


def test_float32_on_the_inputs_device():
    h, hp, _ = batch(5, 3, seed=9)
    loss = InfoNCE(dim=3, similarity="l3", learn_tau=True)
    out = loss(h.float(), hp.float())
    assert out.dtype == torch.float32 and out.device == h.device
    assert out.item() == pytest.approx(loss.double()(h, hp).item(), rel=1e-5)


def test_flags_and_negatives_handling():
    assert InfoNCE(dim=2).needs_unit_norm and not InfoNCE(dim=2).requires_negatives
    assert not InfoNCE(dim=2, similarity="l1").needs_unit_norm
    assert InfoNCE(dim=2, negatives="independent").requires_negatives
    h, hp, hn = batch(4, 2, seed=10, shared=3)
    in_batch = InfoNCE(dim=2)
    assert in_batch(h, hp, hn).item() == in_batch(h, hp).item()
    with pytest.raises(ValueError, match="loss.negatives='independent' needs"):
        InfoNCE(dim=2, negatives="independent")(h, hp)
    with pytest.raises(ValueError, match="h_neg must have shape"):
        InfoNCE(dim=2, negatives="independent")(h, hp, hn[None].expand(2, 3, 2))
    with pytest.raises(ValueError, match="h_neg must have shape"):
        InfoNCE(dim=2, negatives="independent")(h, hp, torch.randn(3, 5, dtype=torch.float64))
    with pytest.raises(ValueError, match="at least 2 samples"):
        in_batch(h[:1], hp[:1])
    with pytest.raises(ValueError, match="built for dim=2"):
        in_batch(torch.randn(4, 3), torch.randn(4, 3))


@pytest.mark.parametrize(
    "options,key",
    [
        ({"tau": 0.0}, "loss.tau"),
        ({"tau": -1.0}, "loss.tau"),
        ({"tau": float("nan")}, "loss.tau"),
        ({"similarity": "l4"}, "loss.similarity"),
        ({"similarity": "euclid"}, "loss.similarity"),
        ({"negatives": "all"}, "loss.negatives"),
        ({"reduction": "mean"}, "loss.reduction"),
        ({"learn_tau": "yes"}, "loss.learn_tau"),
        ({"lr": 0.0}, "loss.lr"),
        ({"p": 2}, "loss.p: unknown option"),
    ],
)
def test_invalid_options(options, key):
    for name in ("infonce", "hard_negative"):
        with pytest.raises(ValueError, match=key.replace(".", r"\.")):
            LOSSES.build({"name": name, **options}, key="loss", dim=3)


# --- decoupled reductions: the positive left out of the denominator ---


def torch_sim(a: torch.Tensor, b: torch.Tensor, kind: str) -> torch.Tensor:
    if kind == "cosine":
        return a @ b / (a.norm() * b.norm())
    if kind == "dot":
        return a @ b
    return -(a - b).abs().pow(int(kind[1])).sum()


def decoupled_reference(h, hp, hn, logit, negatives, reduction) -> torch.Tensor:
    """Differentiable per-anchor loops: mean of -l(a, a+) + log sum (mean) over N(a) alone."""
    B = len(h)
    rows = []

    def add(pos, negs):
        lse = torch.logsumexp(torch.stack(negs), 0)
        if reduction == "decoupled_logmeanexp":
            lse = lse - math.log(len(negs))
        rows.append(lse - pos)

    for i in range(B):
        others = [j for j in range(B) if j != i]
        pos = logit(h[i], hp[i])
        if negatives in ("symmetric", "r24"):
            add(pos, [logit(h[i], h[j]) for j in others] + [logit(h[i], hp[j]) for j in others])
            if negatives == "symmetric":
                negs = [logit(hp[i], hp[j]) for j in others] + [logit(hp[i], h[j]) for j in others]
                add(logit(hp[i], h[i]), negs)
            else:
                negs = [logit(hp[i], hp[j]) for j in others] + [logit(h[i], hp[j]) for j in others]
                add(pos, negs)
        elif negatives == "one_sided":
            add(pos, [logit(h[i], hp[j]) for j in others])
        elif negatives == "first_view":
            add(pos, [logit(h[i], h[j]) for j in range(B)])
        elif negatives == "first_view_others":
            add(pos, [logit(h[i], h[j]) for j in others])
        else:
            add(pos, [logit(h[i], n) for n in (hn if hn.dim() == 2 else hn[i])])
    return torch.stack(rows).mean()


def values_and_grads(fn, xs):
    """fn(h, hp, hn) and its gradients in the tensors of xs (hn may be None)."""
    value = fn(*xs)
    return value.detach(), torch.autograd.grad(value, [x for x in xs if x is not None])


def assert_values_and_grads(got, want, rtol=1e-10):
    torch.testing.assert_close(got[0], want[0], rtol=rtol, atol=1e-12)
    for g, w in zip(got[1], want[1]):
        torch.testing.assert_close(g, w, rtol=rtol, atol=rtol * max(float(w.abs().max()), 1e-2))


@pytest.mark.parametrize("kind", SIMILARITIES)
@pytest.mark.parametrize("negatives", NEGATIVE_SETS)
@pytest.mark.parametrize("reduction", DECOUPLED)
def test_decoupled_values_and_gradients_match_reference(kind, negatives, reduction):
    tau = 0.6
    loss = InfoNCE(dim=3, similarity=kind, tau=tau, negatives=negatives, reduction=reduction)
    for hn_shape in ({"shared": 4}, {"k": 3}) if negatives == "independent" else ({},):
        h, hp, hn = batch(5, 3, seed=40, **hn_shape)
        xs = [None if x is None else x.requires_grad_() for x in (h, hp, hn)]

        def logit(a, b):
            return torch_sim(a, b, kind) / tau

        def plain(h, hp, hn):
            return decoupled_reference(h, hp, hn, logit, negatives, reduction)

        assert_values_and_grads(values_and_grads(loss, xs), values_and_grads(plain, xs))


@pytest.mark.parametrize("kind", SIMILARITIES)
@pytest.mark.parametrize("negatives", NEGATIVE_SETS)
def test_decoupled_identities(kind, negatives):
    """Per row L_decoupled = L_logsumexp - log(1 + e^{pos - lse}); the log-mean forms are shifts."""
    h, hp, hn = batch(6, 3, seed=41, shared=5)
    options = dict(dim=3, similarity=kind, tau=0.8, negatives=negatives)
    value = {r: InfoNCE(reduction=r, **options)(h, hp, hn) for r in REDUCTIONS}
    t = InfoNCE(**options).terms(h, hp, hn)
    gap = t.pos - torch.logsumexp(t.neg, 1)
    softplus = torch.logaddexp(torch.zeros_like(gap), gap)
    close = dict(rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(value["decoupled_logsumexp"], value["logsumexp"] - softplus.mean(), **close)
    torch.testing.assert_close(value["decoupled_logmeanexp"], value["decoupled_logsumexp"] - math.log(t.n_neg), **close)
    torch.testing.assert_close(value["logmeanexp"], value["logsumexp"] - math.log(1 + t.n_neg), **close)
    assert value["decoupled_logsumexp"] < value["logsumexp"]


@pytest.mark.parametrize("shape", [{"shared": 7}, {"k": 4}])
def test_decoupled_is_the_log_odds_of_the_positive(shape):
    """One anchor: L_logsumexp = -log p, L_decoupled = -log(p / (1 - p)) = log(e^{L_logsumexp} - 1)."""
    h, hp, hn = batch(1, 4, seed=42, **shape)
    for kind in SIMILARITIES:
        options = dict(dim=4, similarity=kind, tau=0.5, negatives="independent")
        coupled = InfoNCE(**options)(h, hp, hn)
        decoupled = InfoNCE(reduction="decoupled_logsumexp", **options)(h, hp, hn)
        torch.testing.assert_close(decoupled, torch.log(torch.expm1(coupled)), rtol=1e-10, atol=1e-12)


def test_z21_default_mode_formula():
    """cl-ica LpSimCLRLoss, simclr_compatibility_mode=False: pos/τ + logmeanexp(-||z1_i - z3_k||_p^p / τ),
    z3 = roll(z1, 1), the positive not among the logits."""
    h, hp, _ = batch(6, 4, seed=44)
    for p in (1, 2, 3):
        for tau in (1.0, 0.3):
            z3 = torch.roll(h, 1, 0)
            neg = (h[:, None, :] - z3[None, :, :]).abs().pow(p).sum(-1)
            pos = (h - hp).abs().pow(p).sum(-1)
            lme = torch.logsumexp(-neg / tau, 1) - math.log(6)
            want = (2 * (0.5 * pos / tau + 0.5 * lme)).mean()
            loss = InfoNCE(dim=4, similarity=f"l{p}", tau=tau, negatives="first_view", reduction="decoupled_logmeanexp")
            torch.testing.assert_close(loss(h, hp), want, rtol=1e-12, atol=1e-12)


def test_vk21_without_the_simclr_denominator_formula():
    """ssl_identifiability LpSimCLRLoss(simclr_denominator=False): pos + logmeanexp(-||z1_i - z3_k||²), fresh z3."""
    h, hp, hn = batch(5, 4, seed=45, shared=5)
    neg = ((h[:, None, :] - hn[None, :, :]) ** 2).sum(-1)
    pos = ((h - hp) ** 2).sum(-1)
    want = (pos + torch.logsumexp(-neg, 1) - math.log(5)).mean()
    loss = InfoNCE(dim=4, similarity="l2", negatives="independent", reduction="decoupled_logmeanexp")
    torch.testing.assert_close(loss(h, hp, hn), want, rtol=1e-12, atol=1e-12)


def test_cebra_infonce_formula():
    """CEBRA: max-shifted -mean(pos) + mean(logsumexp(neg)) over shared negatives; dot on unit vectors
    (FixedCosineInfoNCE) and the expanded negative squared distance (FixedEuclideanInfoNCE)."""
    h, hp, hn = batch(6, 3, seed=46, shared=8)
    tau = 0.4
    unit = [torch.nn.functional.normalize(x, dim=1) for x in (h, hp, hn)]

    def cebra(pos, neg):
        c = neg.max(1, keepdim=True).values
        return (-(pos - c[:, 0])).mean() + torch.logsumexp(neg - c, 1).mean()

    u, up, un = unit
    want = cebra((u * up).sum(1) / tau, u @ un.T / tau)
    for kind in ("dot", "cosine"):
        loss = InfoNCE(dim=3, similarity=kind, tau=tau, negatives="independent", reduction="decoupled_logsumexp")
        torch.testing.assert_close(loss(u, up, un), want, rtol=1e-12, atol=1e-12)
    sq = lambda x: (x ** 2).sum(1)  # noqa: E731
    pos = -(sq(h) + sq(hp) - 2 * (h * hp).sum(1)) / tau
    neg = -(sq(h)[:, None] + sq(hn)[None] - 2 * h @ hn.T) / tau
    loss = InfoNCE(dim=3, similarity="l2", tau=tau, negatives="independent", reduction="decoupled_logsumexp")
    torch.testing.assert_close(loss(h, hp, hn), cebra(pos, neg), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("negatives", NEGATIVE_SETS)
@pytest.mark.parametrize("reduction", DECOUPLED)
def test_aninfonce_decoupled_matches_reference(negatives, reduction):
    """AnInfoNCE takes the decoupled reductions from base.REDUCTIONS; values and gradients, Λ̂'s included."""
    loss = AnInfoNCE(dim=3, seed=2, negatives=negatives, reduction=reduction).double()
    assert loss.reduction == reduction
    h, hp, hn = batch(5, 3, seed=47, shared=4)
    xs = [x.requires_grad_() for x in (h, hp, hn)]
    params = [loss.raw_lambda, *xs]

    def logit(a, b):
        a, b = a / a.norm(), b / b.norm()
        return -loss.factor * (loss.lambda_hat * (a - b) ** 2).sum()

    value = loss(*xs)
    got = value.detach(), torch.autograd.grad(value, params, allow_unused=True)
    ref = decoupled_reference(*xs, logit, negatives, reduction)
    want = ref.detach(), torch.autograd.grad(ref, params, allow_unused=True)
    torch.testing.assert_close(got[0], want[0], rtol=1e-10, atol=1e-12)
    for g, w in zip(got[1], want[1]):
        if w is None:
            assert g is None or not g.any()
        else:
            torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)


def test_ensemble_members_take_decoupled_reductions():
    members = [
        {"name": "infonce", "similarity": "l2", "negatives": "independent", "reduction": "decoupled_logsumexp"},
        {"name": "hard_negative", "beta": 1.0, "reduction": "decoupled_logmeanexp", "weight": 0.5},
    ]
    ensemble = Ensemble(dim=3, members=members)
    h, hp, hn = batch(5, 3, seed=48, shared=6)
    want = (
        InfoNCE(dim=3, similarity="l2", negatives="independent", reduction="decoupled_logsumexp")(h, hp, hn)
        + 0.5 * LOSSES.build({"name": "hard_negative", "beta": 1.0, "reduction": "decoupled_logmeanexp"}, key="loss", dim=3)(h, hp)
    )
    torch.testing.assert_close(ensemble(h, hp, hn), want, rtol=1e-12, atol=1e-12)


def test_decoupled_options_and_limits():
    assert {"decoupled_logsumexp", "decoupled_logmeanexp"} == set(DECOUPLED) < set(REDUCTIONS)
    for name in ("infonce", "aninfonce", "hard_negative"):
        with pytest.raises(ValueError, match=r"loss\.reduction='decoupled' is invalid: allowed: .*'decoupled_logsumexp'"):
            LOSSES.build({"name": name, "reduction": "decoupled"}, key="loss", dim=3)
    h, hp, _ = batch(4, 3, seed=49)
    for reduction in DECOUPLED:
        loss = InfoNCE(dim=3, negatives="independent", reduction=reduction)
        for empty in (torch.zeros(0, 3, dtype=torch.float64), torch.zeros(4, 0, 3, dtype=torch.float64)):
            with pytest.raises(ValueError, match=f"reduction='{reduction}' .* needs at least one negative"):
                loss(h, hp, empty)
    # the smallest negative sets still work: one_sided with B = 2 has one negative per anchor
    h, hp, _ = batch(2, 3, seed=50)
    got = InfoNCE(dim=3, similarity="l1", negatives="one_sided", reduction="decoupled_logmeanexp")(h, hp)
    want = reference(h, hp, None, "l1", 1.0, "one_sided", "decoupled_logmeanexp")
    assert got.item() == pytest.approx(want, rel=1e-12)
