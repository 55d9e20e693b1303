"""InfoNCE against a plain per-anchor reference, the three reference codes, and its limits."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.special import logsumexp

from identifiable_cl.losses import InfoNCE
from identifiable_cl.losses.base import NEGATIVE_SETS, REDUCTIONS, SIMILARITIES
from identifiable_cl.losses import LOSSES


def sim(a: np.ndarray, b: np.ndarray, kind: str) -> float:
    if kind == "cosine":
        return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
    if kind == "dot":
        return float(a @ b)
    return -float(np.sum(np.abs(a - b) ** int(kind[1])))


def row_loss(pos: float, negs: list[float], reduction: str) -> float:
    values = np.array([pos, *negs])
    out = -pos + logsumexp(values)
    return out - math.log(len(values)) if reduction == "logmeanexp" else out


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
@pytest.mark.parametrize("negatives", NEGATIVE_SETS)
def test_gradcheck(kind, negatives):
    loss = InfoNCE(dim=3, similarity=kind, tau=0.7, learn_tau=True, negatives=negatives).double()
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
