"""Hard-negative InfoNCE against a plain reference of Robinson et al.'s estimator."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from identifiable_cl.losses import Ensemble, HardNegativeInfoNCE, InfoNCE
from identifiable_cl.losses.base import DECOUPLED, NEGATIVE_SETS, REDUCTIONS, SIMILARITIES
from identifiable_cl.losses import LOSSES


def sim(a, b, kind):
    if kind == "cosine":
        return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
    if kind == "dot":
        return float(a @ b)
    return -float(np.sum(np.abs(a - b) ** int(kind[1])))


def rows_of(h, hp, hn, negatives):
    """(positive pair, negative pairs) of every anchor, as index-free vector pairs."""
    B = len(h)
    out = []
    for i in range(B):
        others = [j for j in range(B) if j != i]
        pos = (h[i], hp[i])
        if negatives in ("symmetric", "r24"):
            out.append((pos, [(h[i], h[j]) for j in others] + [(h[i], hp[j]) for j in others]))
            if negatives == "symmetric":
                cross = [(hp[i], h[j]) for j in others]
            else:
                cross = [(h[i], hp[j]) for j in others]
            out.append((pos, [(hp[i], hp[j]) for j in others] + cross))
        elif negatives == "one_sided":
            out.append((pos, [(h[i], hp[j]) for j in others]))
        elif negatives == "first_view":
            out.append((pos, [(h[i], h[j]) for j in range(B)]))
        elif negatives == "first_view_others":
            out.append((pos, [(h[i], h[j]) for j in others]))
        else:
            out.append((pos, [(h[i], n) for n in (hn if hn.ndim == 2 else hn[i])]))
    return out


def reference(h, hp, hn, kind, tau, beta, tau_plus, negatives, reduction, report=None):
    """Robinson et al.: G = N Σ w e^l / Σ w, w = e^{βl}; debiased and floored; plain exp/log."""
    h, hp = h.numpy(), hp.numpy()
    hn = None if hn is None else hn.numpy()
    losses = []
    for (a, b), negs in rows_of(h, hp, hn, negatives):
        lp = sim(a, b, kind) / tau
        ln = np.array([sim(x, y, kind) / tau for x, y in negs])
        N = len(ln)
        w = np.exp(beta * ln)
        g = N * np.sum(w * np.exp(ln)) / np.sum(w)
        if tau_plus > 0:
            raw = (g - tau_plus * N * np.exp(lp)) / (1 - tau_plus)
            g = max(raw, N * np.exp(-1 / tau))
            if report is not None:
                report.append(raw < N * np.exp(-1 / tau))
        if reduction.startswith("decoupled"):  # the positive left out of the denominator
            value = -lp + np.log(g)
            losses.append(value - math.log(N) if reduction == "decoupled_logmeanexp" else value)
            continue
        value = -lp + np.log(np.exp(lp) + g)
        losses.append(value - math.log(N + 1) if reduction == "logmeanexp" else value)
    return float(np.mean(losses))


def batch(B, d, seed, shared=None, noise=0.3):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(B, d, generator=g, dtype=torch.float64)
    hp = h + noise * torch.randn(B, d, generator=g, dtype=torch.float64)
    hn = None if shared is None else torch.randn(shared, d, generator=g, dtype=torch.float64)
    return h, hp, hn


@pytest.mark.parametrize("kind", SIMILARITIES)
@pytest.mark.parametrize("negatives", NEGATIVE_SETS)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("B,d,tau,beta", [(2, 2, 1.0, 0.5), (5, 3, 0.5, 1.0), (7, 4, 2.0, 3.0)])
def test_matches_reference(kind, negatives, reduction, B, d, tau, beta):
    h, hp, hn = batch(B, d, seed=B + d, shared=5)
    loss = HardNegativeInfoNCE(
        dim=d, beta=beta, similarity=kind, tau=tau, negatives=negatives, reduction=reduction
    )
    want = reference(h, hp, hn, kind, tau, beta, 0.0, negatives, reduction)
    assert loss(h, hp, hn).item() == pytest.approx(want, rel=1e-10, abs=1e-12)


@pytest.mark.parametrize("negatives", NEGATIVE_SETS)
@pytest.mark.parametrize("tau_plus,noise,floored", [(0.05, 1.0, False), (0.9, 0.05, True)])
def test_debiased_matches_reference(negatives, tau_plus, noise, floored):
    h, hp, hn = batch(6, 3, seed=20, shared=5, noise=noise)
    loss = HardNegativeInfoNCE(dim=3, beta=1.0, tau_plus=tau_plus, tau=0.5, negatives=negatives)
    report: list[bool] = []
    want = reference(h, hp, hn, "cosine", 0.5, 1.0, tau_plus, negatives, "logsumexp", report)
    assert any(report) if floored else not any(report)
    assert loss(h, hp, hn).item() == pytest.approx(want, rel=1e-10, abs=1e-12)


def test_robinson_vectorised_form():
    """The authors' SimCLR form: neg = exp(S/τ) off the two diagonals, imp = neg^β."""
    h, hp, _ = batch(5, 4, seed=21, noise=0.8)
    tau, beta, tau_plus = 0.5, 1.0, 0.1
    z = torch.nn.functional.normalize(torch.cat([h, hp]), dim=1)
    B = len(h)
    S = torch.exp(z @ z.T / tau)
    keep = ~torch.eye(2 * B, dtype=torch.bool)
    keep[torch.arange(B), torch.arange(B) + B] = False
    keep[torch.arange(B) + B, torch.arange(B)] = False
    neg = S[keep].view(2 * B, -1)
    pos = torch.exp((z[:B] * z[B:]).sum(1) / tau).repeat(2)
    N = 2 * B - 2
    imp = neg ** beta
    reweight = (imp * neg).sum(1) / imp.mean(1)
    ng = ((-tau_plus * N * pos + reweight) / (1 - tau_plus)).clamp(min=N * math.exp(-1 / tau))
    want = (-torch.log(pos / (pos + ng))).mean()
    got = HardNegativeInfoNCE(dim=4, beta=beta, tau_plus=tau_plus, tau=tau)(h, hp)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind", SIMILARITIES)
@pytest.mark.parametrize("negatives", NEGATIVE_SETS)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_beta_zero_is_infonce(kind, negatives, reduction):
    h, hp, hn = batch(6, 3, seed=22, shared=4)
    options = dict(similarity=kind, tau=0.4, negatives=negatives, reduction=reduction)
    hard = HardNegativeInfoNCE(dim=3, beta=0.0, tau_plus=0.0, **options)
    plain = InfoNCE(dim=3, **options)
    grads = []
    for loss in (hard, plain):
        inputs = [x.detach().clone().requires_grad_() for x in (h, hp, hn)]
        value = loss(*inputs)
        value.backward()
        grads.append((value.detach(), *(x.grad for x in inputs if x.grad is not None)))
    assert len(grads[0]) == len(grads[1]) >= 3
    for got, want in zip(*grads):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_beta_raises_the_weight_of_hard_negatives():
    h, hp, _ = batch(8, 3, seed=23)
    values = [HardNegativeInfoNCE(dim=3, beta=b, tau=0.5)(h, hp).item() for b in (0.0, 1.0, 3.0)]
    assert values[0] < values[1] < values[2]


def test_large_beta_is_stable_in_float32():
    h, hp, _ = batch(6, 3, seed=24)
    loss = HardNegativeInfoNCE(dim=3, beta=20.0, tau=0.05)
    got = loss(h.float(), hp.float())
    want = reference(h, hp, None, "cosine", 0.05, 20.0, 0.0, "symmetric", "logsumexp")
    assert torch.isfinite(got) and got.item() == pytest.approx(want, rel=1e-4)


@pytest.mark.parametrize("tau_plus,reduction", [(0.0, "logsumexp"), (0.1, "logsumexp"), (0.0, "decoupled_logsumexp"),
                                                (0.0, "decoupled_logmeanexp")])
@pytest.mark.parametrize("negatives", ["symmetric", "independent"])
def test_gradcheck(tau_plus, reduction, negatives):
    loss = HardNegativeInfoNCE(
        dim=3, beta=1.5, tau_plus=tau_plus, tau=0.6, learn_tau=True, negatives=negatives, reduction=reduction
    ).double()
    h, hp, hn = batch(4, 3, seed=25, shared=3, noise=1.0)
    inputs = [x.requires_grad_() for x in (h, hp, hn)]
    assert torch.autograd.gradcheck(lambda a, b, c: loss(a, b, c), inputs)
    log_tau = loss.temperature.log_tau.detach().clone().requires_grad_()
    args = tuple(x.detach() for x in inputs)

    def of_tau(t):
        return torch.func.functional_call(loss, {"temperature.log_tau": t}, args)

    assert torch.autograd.gradcheck(of_tau, (log_tau,))


def test_batch_sizes_4_then_7():
    loss = HardNegativeInfoNCE(dim=3, beta=1.0, tau_plus=0.1)
    for B in (4, 7):
        h, hp, _ = batch(B, 3, seed=B)
        want = reference(h, hp, None, "cosine", 1.0, 1.0, 0.1, "symmetric", "logsumexp")
        assert loss(h, hp).item() == pytest.approx(want, rel=1e-10)


@pytest.mark.parametrize(
    "options,key",
    [
        ({"beta": -0.1}, "loss.beta"),
        ({"tau_plus": -0.1}, "loss.tau_plus"),
        ({"tau_plus": 1.0}, "loss.tau_plus"),
        ({"tau_plus": 0.1, "similarity": "l2"}, "loss.tau_plus"),
        ({"tau": 0}, "loss.tau"),
        ({"negatives": "hard"}, "loss.negatives"),
    ],
)
def test_invalid_options(options, key):
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        LOSSES.build({"name": "hard_negative", **options}, key="loss", dim=3)


# --- decoupled reductions ---


@pytest.mark.parametrize("kind", SIMILARITIES)
@pytest.mark.parametrize("reduction", DECOUPLED)
def test_decoupled_with_per_anchor_negatives(kind, reduction):
    g = torch.Generator().manual_seed(30)
    h, hp, _ = batch(5, 3, seed=30)
    hn = torch.randn(5, 4, 3, generator=g, dtype=torch.float64)
    loss = HardNegativeInfoNCE(dim=3, beta=2.0, similarity=kind, tau=0.7, negatives="independent", reduction=reduction)
    want = reference(h, hp, hn, kind, 0.7, 2.0, 0.0, "independent", reduction)
    assert loss(h, hp, hn).item() == pytest.approx(want, rel=1e-10, abs=1e-12)


@pytest.mark.parametrize("negatives", NEGATIVE_SETS)
def test_decoupled_identity(negatives):
    """Per row L_decoupled = L_logsumexp - log(1 + e^{l+} / G), and the log-mean forms are shifts."""
    h, hp, hn = batch(6, 3, seed=31, shared=5)
    options = dict(dim=3, beta=1.5, similarity="l2", tau=0.5, negatives=negatives)
    value = {r: HardNegativeInfoNCE(reduction=r, **options)(h, hp, hn) for r in REDUCTIONS}
    t = HardNegativeInfoNCE(**options).terms(h, hp, hn)
    w = torch.softmax(1.5 * t.neg, 1)  # importance weights w_k / sum w, 0 on excluded pairs
    log_g = math.log(t.n_neg) + torch.logsumexp(t.neg + torch.log(w), 1)
    gap = t.pos - log_g
    softplus = torch.logaddexp(torch.zeros_like(gap), gap)
    close = dict(rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(value["decoupled_logsumexp"], value["logsumexp"] - softplus.mean(), **close)
    torch.testing.assert_close(value["decoupled_logmeanexp"], value["decoupled_logsumexp"] - math.log(t.n_neg), **close)


@pytest.mark.parametrize("reduction", DECOUPLED)
def test_debiasing_cannot_be_decoupled(reduction):
    message = (
        rf"loss\.reduction='{reduction}' is invalid: debiasing \(tau_plus=0\.1 > 0\) .*"
        r"allowed with tau_plus > 0: 'logsumexp', 'logmeanexp'"
    )
    with pytest.raises(ValueError, match=message):
        LOSSES.build({"name": "hard_negative", "tau_plus": 0.1, "reduction": reduction}, key="loss", dim=3)
    members = [{"name": "infonce"}, {"name": "hard_negative", "tau_plus": 0.1, "reduction": reduction}]
    with pytest.raises(ValueError, match=rf"loss\.members\[1\]\.reduction='{reduction}' is invalid"):
        LOSSES.build({"name": "ensemble", "members": members}, key="loss", dim=3)
    HardNegativeInfoNCE(dim=3, tau_plus=0.0, reduction=reduction)
    HardNegativeInfoNCE(dim=3, tau_plus=0.1, reduction="logmeanexp")
    h, hp, _ = batch(4, 3, seed=33)
    loss = HardNegativeInfoNCE(dim=3, negatives="independent", reduction=reduction)
    with pytest.raises(ValueError, match="needs at least one negative"):
        loss(h, hp, torch.zeros(0, 3, dtype=torch.float64))
    assert isinstance(Ensemble(dim=3, members=[{"name": "hard_negative", "reduction": reduction}]), Ensemble)
