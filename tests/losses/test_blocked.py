"""The row-blocked core against the dense logit matrices, for every similarity, negative set and kernel."""

from __future__ import annotations

import math

import pytest
import torch

from identifiable_cl.losses import AnInfoNCE, HardNegativeInfoNCE, InfoNCE, blocked, native
from identifiable_cl.losses.base import DECOUPLED, NEGATIVE_SETS, SIMILARITIES

KERNELS = ["eager"] + (["native"] if native.available() else [])


def dense_infonce(loss: InfoNCE | AnInfoNCE, h, hp, hn=None):
    """The plain computation: every logit materialised by ``terms``, then the row formula (for the
    decoupled reductions the positive kept out of the logsumexp)."""
    t = loss.terms(h, hp, hn)
    if loss.reduction in DECOUPLED:
        rows = torch.logsumexp(t.neg, 1) - t.pos
        return (rows - math.log(t.n_neg) if loss.reduction == "decoupled_logmeanexp" else rows).mean()
    rows = torch.logaddexp(t.pos, torch.logsumexp(t.neg, 1)) - t.pos
    if loss.reduction == "logmeanexp":
        rows = rows - math.log(1 + t.n_neg)
    return rows.mean()


def inputs(B: int, d: int, seed: int, dtype=torch.float64, shared: int | None = None):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(B, d, generator=g, dtype=dtype)
    hp = h + 0.4 * torch.randn(B, d, generator=g, dtype=dtype)
    hn = None if shared is None else torch.randn(shared, d, generator=g, dtype=dtype)
    return [x if x is None else x.requires_grad_() for x in (h, hp, hn)]


def value_and_grads(fn, xs):
    xs = [x for x in xs if x is not None]
    value = fn()
    grads = torch.autograd.grad(value, xs)
    return value.detach(), grads


def assert_same(got, want, rtol):
    torch.testing.assert_close(got[0], want[0], rtol=rtol, atol=rtol)
    for g, w in zip(got[1], want[1]):
        torch.testing.assert_close(g, w, rtol=rtol, atol=rtol * float(w.abs().max()))


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("kind", SIMILARITIES)
@pytest.mark.parametrize("negatives", NEGATIVE_SETS)
@pytest.mark.parametrize("B,block_rows", [(2, 1), (5, 2), (7, 3), (33, 8), (33, None)])
def test_values_and_gradients_equal_the_dense_form(kernels, kind, negatives, B, block_rows):
    """Block sizes that do and do not divide the rows; the last block overlaps the one before."""
    loss = InfoNCE(dim=4, similarity=kind, tau=0.3, negatives=negatives).double()
    xs = inputs(B, 4, seed=B, shared=2 * B + 1 if negatives == "independent" else None)
    want = value_and_grads(lambda: dense_infonce(loss, *xs), xs)
    with blocked.use_kernels(kernels, block_rows=block_rows):
        got = value_and_grads(lambda: loss(*xs), xs)
    assert_same(got, want, 1e-10)


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("kind", SIMILARITIES)
def test_learnt_temperature_gradient(kernels, kind):
    loss = InfoNCE(dim=3, similarity=kind, tau=0.5, learn_tau=True).double()
    xs = inputs(9, 3, seed=2)
    log_tau = loss.temperature.log_tau
    want = torch.autograd.grad(dense_infonce(loss, *xs), [log_tau, *xs[:2]])
    with blocked.use_kernels(kernels, block_rows=4):
        got = torch.autograd.grad(loss(*xs), [log_tau, *xs[:2]])
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("negatives,reduction", [(n, "logsumexp") for n in ("symmetric", "r24", "independent")]
                         + [(n, r) for n in NEGATIVE_SETS for r in DECOUPLED])
def test_aninfonce_and_lambda_gradient(kernels, negatives, reduction):
    loss = AnInfoNCE(dim=4, negatives=negatives, reduction=reduction, unit_norm=True, seed=3).double()
    xs = inputs(11, 4, seed=4, shared=6 if negatives == "independent" else None)
    params = [loss.raw_lambda, *[x for x in xs if x is not None]]
    want = torch.autograd.grad(dense_infonce(loss, *xs), params)
    with blocked.use_kernels(kernels, block_rows=5):
        value = loss(*xs)
        got = torch.autograd.grad(value, params)
    torch.testing.assert_close(value.detach(), dense_infonce(loss, *xs).detach(), rtol=1e-10, atol=1e-12)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)


def dense_hard_negative(loss: HardNegativeInfoNCE, h, hp, hn=None):
    """Robinson et al.'s reweighting on the dense logits, written out independently."""
    t = loss.terms(h, hp, hn)
    finite = torch.isfinite(t.neg)
    w = torch.where(finite, torch.exp(loss.beta * t.neg), torch.zeros_like(t.neg))
    g = t.n_neg * (w * torch.where(finite, torch.exp(t.neg), torch.zeros_like(t.neg))).sum(1) / w.sum(1)
    if loss.tau_plus > 0:
        tau = loss.temperature.value()
        floor = t.n_neg * torch.exp(torch.as_tensor(-1.0 / tau, dtype=g.dtype))
        g = torch.maximum((g - loss.tau_plus * t.n_neg * torch.exp(t.pos)) / (1 - loss.tau_plus), floor)
    if loss.reduction.startswith("decoupled"):  # -l+ + log G, minus log N for the log-mean
        rows = torch.log(g) - t.pos
        return (rows - math.log(t.n_neg) if loss.reduction == "decoupled_logmeanexp" else rows).mean()
    return (torch.log(torch.exp(t.pos) + g) - t.pos).mean()


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("kind", SIMILARITIES)
@pytest.mark.parametrize("beta,tau_plus", [(0.0, 0.0), (1.5, 0.0), (0.7, 0.1)])
def test_hard_negative_two_multipliers(kernels, kind, beta, tau_plus):
    if tau_plus > 0 and kind != "cosine":
        pytest.skip("debiasing needs cosine similarity")
    loss = HardNegativeInfoNCE(dim=3, similarity=kind, beta=beta, tau_plus=tau_plus, tau=0.8, learn_tau=True).double()
    xs = inputs(10, 3, seed=5)
    params = [loss.temperature.log_tau, *xs[:2]]
    want = torch.autograd.grad(dense_hard_negative(loss, *xs), params)
    with blocked.use_kernels(kernels, block_rows=3):
        value = loss(*xs)
        got = torch.autograd.grad(value, params)
    torch.testing.assert_close(value.detach(), dense_hard_negative(loss, *xs).detach(), rtol=1e-10, atol=1e-12)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-11)


@pytest.mark.skipif(not native.available(), reason="no C compiler for the native kernels")
@pytest.mark.parametrize("kind", SIMILARITIES)
@pytest.mark.parametrize("negatives", ["symmetric", "r24", "first_view", "independent"])
def test_native_equals_eager_in_float32(kind, negatives):
    """The C kernels compute the eager kernels' similarities; the sums may differ in order only."""
    loss = InfoNCE(dim=10, similarity=kind, tau=0.1, negatives=negatives)
    xs = inputs(300, 10, seed=6, dtype=torch.float32, shared=257 if negatives == "independent" else None)
    with blocked.use_kernels("eager"):
        want = value_and_grads(lambda: loss(*xs), xs)
    with blocked.use_kernels("native"):
        got = value_and_grads(lambda: loss(*xs), xs)
    assert_same(got, want, 2e-5)


@pytest.mark.skipif(not native.available(), reason="no C compiler for the native kernels")
def test_native_kernels_flush_subnormals_only_inside_the_call():
    """Widely spread logits (dot products / 0.1) floor most exponentials, whose products with the row
    weights are subnormal: the kernels flush them (no slow path) and leave the caller's mode as it was."""
    loss = InfoNCE(dim=10, similarity="dot", tau=0.1)
    xs = [x * 3 for x in inputs(300, 10, seed=13, dtype=torch.float32)[:2]]
    with blocked.use_kernels("eager"):
        want = value_and_grads(lambda: loss(*xs), xs)
    with blocked.use_kernels("native"):
        got = value_and_grads(lambda: loss(*xs), xs)
    assert_same(got, want, 2e-5)
    tiny = torch.finfo(torch.float32).tiny
    assert (torch.tensor(tiny) * torch.tensor(0.25)).item() == pytest.approx(tiny / 4)  # still subnormal


def test_batch_of_one_and_two():
    shared = InfoNCE(dim=3, similarity="l1", negatives="independent")
    h, hp, hn = inputs(1, 3, seed=7, shared=1)
    for kernels in KERNELS:
        with blocked.use_kernels(kernels):
            torch.testing.assert_close(shared(h, hp, hn), dense_infonce(shared, h, hp, hn), rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="at least 2 samples"):
        InfoNCE(dim=3)(h, hp)
    h, hp, _ = inputs(2, 3, seed=8)
    for negatives in ("symmetric", "r24", "one_sided", "first_view"):
        loss = InfoNCE(dim=3, similarity="l2", negatives=negatives)
        torch.testing.assert_close(loss(h, hp), dense_infonce(loss, h, hp), rtol=1e-12, atol=1e-12)


@pytest.mark.integration  # about 10-20 s on 2 cores: with the end-to-end set CI runs beside the default one
def test_large_batch_in_float32():
    """B = 6144 (Z21's batch): 2B × 2B = 151 M logits, never held at once."""
    loss = InfoNCE(dim=10, similarity="cosine", tau=0.1)
    xs = inputs(6144, 10, seed=9, dtype=torch.float32)
    want = value_and_grads(lambda: dense_infonce(loss, *xs), xs)
    got = value_and_grads(lambda: loss(*xs), xs)
    assert_same(got, want, 1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["l1", "l2", "l3"])
def test_large_batch_lp_in_float32(kind):
    loss = InfoNCE(dim=10, similarity=kind, tau=1.0, negatives="one_sided")
    xs = inputs(6144, 10, seed=10, dtype=torch.float32)
    want = value_and_grads(lambda: dense_infonce(loss, *xs), xs)
    got = value_and_grads(lambda: loss(*xs), xs)
    assert_same(got, want, 1e-4)


def test_block_rows_follow_the_budget():
    assert blocked.block_rows(12288, 12288) == blocked.BLOCK_ENTRIES // 12288
    assert blocked.block_rows(3, 10) == 3
    with blocked.use_kernels(block_rows=5):
        assert blocked.block_rows(100, 100) == 5
    assert blocked.block_rows(100, 100) == 100
    cpu, gpu = torch.device("cpu"), torch.device("cuda")  # a device's type, nothing allocated on it
    assert blocked.block_rows(12288, 12288, cpu) == blocked.BLOCK_ENTRIES // 12288
    assert blocked.block_rows(12288, 12288, gpu, buffers=3) == 12288  # the whole matrix: 1.7 GiB of 4 GiB
    assert blocked.block_rows(12288, 12288, gpu, buffers=3, itemsize=8) == 12288
    with blocked.loss_memory(1024):
        assert blocked.block_rows(12288, 12288, gpu, buffers=3) == (1 << 30) // (12288 * 3 * 4)
        assert blocked.block_rows(12288, 12288, cpu, buffers=3) == blocked.BLOCK_ENTRIES // 12288
    with blocked.loss_memory(1):
        assert blocked.block_rows(12288, 12288, cpu, buffers=3) == (1 << 20) // (12288 * 3 * 4)
        assert blocked.block_rows(10 ** 6, 10 ** 6, gpu) == 1
    assert blocked.block_rows(100, 100, gpu) == 100
    with blocked.use_kernels(block_rows=5):
        assert blocked.block_rows(100, 100, gpu) == 5


def test_without_gradients_nothing_is_accumulated():
    loss = InfoNCE(dim=3, similarity="l1")
    h, hp, _ = inputs(6, 3, seed=11)
    with torch.no_grad():
        value = loss(h, hp)
    assert not value.requires_grad
    torch.testing.assert_close(value, dense_infonce(loss, h, hp).detach(), rtol=1e-12, atol=1e-12)


def test_bfloat16_inputs_are_reduced_in_float32():
    loss = InfoNCE(dim=4, similarity="l1", tau=0.2)
    h, hp, _ = inputs(16, 4, seed=12, dtype=torch.float32)
    got = loss(h.detach().bfloat16(), hp.detach().bfloat16())
    assert got.dtype == torch.float32
    want = loss(h.detach().bfloat16().float(), hp.detach().bfloat16().float())
    torch.testing.assert_close(got, want)


def test_invalid_kernel_choice(monkeypatch):
    with pytest.raises(ValueError, match="kernels='fast'"):
        with blocked.use_kernels("fast"):
            pass
    with pytest.raises(ValueError, match="block_rows=0"):
        with blocked.use_kernels(block_rows=0):
            pass
    monkeypatch.setenv("ICL_KERNELS", "fast")
    with pytest.raises(ValueError, match="ICL_KERNELS='fast'.*allowed: auto, eager, native"):
        InfoNCE(dim=2)(torch.randn(3, 2), torch.randn(3, 2))


def test_native_on_an_unsupported_dtype_is_a_clear_error():
    loss = InfoNCE(dim=2, similarity="l1")
    x = torch.randn(3, 2, dtype=torch.float16)
    with blocked.use_kernels("native"):
        with pytest.raises(RuntimeError, match="ICL_KERNELS=native"):
            blocked.block_forward(x, x.T.contiguous(), torch.tensor(1.0), None, "l1", (1.0,), False)
    assert torch.isfinite(loss(x, x))


# --- decoupled reductions: lse over the negatives alone, minus the positive ---


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("kind", SIMILARITIES)
@pytest.mark.parametrize("negatives", NEGATIVE_SETS)
@pytest.mark.parametrize("reduction", DECOUPLED)
@pytest.mark.parametrize("B,block_rows", [(5, 2), (33, 8)])
def test_decoupled_values_and_gradients_equal_the_dense_form(kernels, kind, negatives, reduction, B, block_rows):
    loss = InfoNCE(dim=4, similarity=kind, tau=0.3, negatives=negatives, reduction=reduction, learn_tau=True).double()
    xs = inputs(B, 4, seed=B + 1, shared=2 * B + 1 if negatives == "independent" else None)
    params = [loss.temperature.log_tau, *[x for x in xs if x is not None]]
    want = torch.autograd.grad(dense_infonce(loss, *xs), params)
    with blocked.use_kernels(kernels, block_rows=block_rows):
        value = loss(*xs)
        got = torch.autograd.grad(value, params)
    torch.testing.assert_close(value.detach(), dense_infonce(loss, *xs).detach(), rtol=1e-10, atol=1e-12)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-10 * float(w.abs().max()))


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("kind", SIMILARITIES)
@pytest.mark.parametrize("reduction", DECOUPLED)
@pytest.mark.parametrize("negatives", ["symmetric", "first_view", "independent"])
def test_hard_negative_decoupled(kernels, kind, reduction, negatives):
    loss = HardNegativeInfoNCE(
        dim=3, similarity=kind, beta=1.5, tau=0.8, learn_tau=True, negatives=negatives, reduction=reduction
    ).double()
    xs = inputs(10, 3, seed=5, shared=7 if negatives == "independent" else None)
    params = [loss.temperature.log_tau, *[x for x in xs if x is not None]]
    want = torch.autograd.grad(dense_hard_negative(loss, *xs), params)
    with blocked.use_kernels(kernels, block_rows=3):
        value = loss(*xs)
        got = torch.autograd.grad(value, params)
    torch.testing.assert_close(value.detach(), dense_hard_negative(loss, *xs).detach(), rtol=1e-10, atol=1e-12)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-11)


@pytest.mark.skipif(not native.available(), reason="no C compiler")
def test_kernel_buffers_are_kept_between_evaluations_in_each_thread():
    import threading

    loss = InfoNCE(dim=4, similarity="l1", tau=0.1, negatives="r24")

    def value(B, seed):
        xs = inputs(B, 4, seed=seed, dtype=torch.float32)[:2]
        with blocked.use_kernels("native"):
            out = loss(*xs)
        return out.detach(), dense_infonce(loss, *xs).detach()

    first, want = value(40, 0)
    torch.testing.assert_close(first, want, rtol=1e-5, atol=1e-6)
    kept = [w["e"].data_ptr() for w in blocked._workspaces(3)]
    for B, seed in ((7, 1), (40, 0)):  # a smaller batch fits in the kept buffers; the first one again
        got, want = value(B, seed)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        assert [w["e"].data_ptr() for w in blocked._workspaces(3)] == kept
    assert torch.equal(got, first)
    other: list[int] = []
    thread = threading.Thread(target=lambda: (value(40, 0), other.extend(w["e"].data_ptr() for w in blocked._workspaces(3))))
    thread.start()
    thread.join()
    assert len(other) == 3 and not set(other) & set(kept)  # another thread, buffers of its own


def test_left_out_marks_exactly_the_named_columns():
    from identifiable_cl.losses.blocked import left_out

    excluded = torch.tensor([[-1, 0], [2, -1], [-1, -1], [3, 3], [0, 4]])
    want = torch.zeros(5, 5, dtype=torch.bool)
    for row, columns in enumerate(excluded.tolist()):
        for column in columns:
            if column >= 0:
                want[row, column] = True
    assert torch.equal(left_out(excluded, 5), want)


@pytest.mark.parametrize("kernels", ["eager", "native"])
def test_shared_negatives_of_none_give_every_kernel_the_same_answer(kernels):
    """With 0 shared negatives the denominator holds the positive alone (InfoNCE: 0), a decoupled reduction and
    the hard-negative reweighting have nothing to work on (one clear error), on either kernel."""
    h = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    none = torch.zeros(0, 3, dtype=torch.float64)
    with blocked.use_kernels(kernels):
        value = InfoNCE(dim=3, negatives="independent")(h, h + 0.1, none)
        value.backward()
        assert value.item() == 0.0 and torch.equal(h.grad, torch.zeros_like(h))
        with pytest.raises(ValueError, match="leaves the positive out of the denominator and needs at least one"):
            InfoNCE(dim=3, negatives="independent", reduction="decoupled_logsumexp")(h, h, none)
        with pytest.raises(ValueError, match="^loss.name='hard_negative' reweights the negatives and needs at least"):
            HardNegativeInfoNCE(dim=3, negatives="independent")(h, h, none)
