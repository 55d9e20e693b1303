"""Shared pieces of the tests of NCE, NWJ and the margin, triplet and spectral contrastive losses.

The test files import it as ``from loss_reference import ...``: pytest's default (prepend) import mode puts
the folder of a test file that is not in a package on ``sys.path`` first. What is here is plain torch: the
candidate pairs of every negative set are written out by hand, one anchor row at a time, and nothing calls the
library's own assembly of the logits, so a reference built on it stays independent of the code it checks.
The library is used only by the checks that exercise a loss (``loss(...)``, ``LOSSES.build``).
"""

from __future__ import annotations

import pytest
import torch
from torch.func import functional_call

from identifiable_cl.losses import LOSSES
from identifiable_cl.losses.base import NEGATIVE_SETS

CRITIC_NEGATIVES = ("symmetric", "r24", "one_sided", "first_view_others", "independent")
"""The negative sets of NCE and NWJ (no ``first_view``: a critic loss never scores an anchor against itself)."""
BATCHES = (1, 2, 5)
"""Batch sizes of the reference checks: 1 is too small for a negative set drawn from the batch."""
BATCH_NEGATIVES = [n for n in NEGATIVE_SETS if n != "independent"]
"""The negative sets drawn from the batch (every one but ``independent``)."""
DTYPES = (torch.float32, torch.float64)


# ----------------------------------------------------------------------------------------------- inputs


def encodings(B: int, d: int, seed: int, *hn_shapes, noise: float = 0.4):
    """``h, h+, *negatives``, float64: h ~ N(0, I) of shape (B, d), h+ = h + noise · N(0, I), then one draw
    N(0, I) of shape (*s, d) per shape s in ``hn_shapes`` (None for a shape gives None), all from one generator
    seeded with ``seed``, in that order."""
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(B, d, generator=g, dtype=torch.float64)
    hp = h + noise * torch.randn(B, d, generator=g, dtype=torch.float64)
    negatives = [None if s is None else torch.randn(*s, d, generator=g, dtype=torch.float64) for s in hn_shapes]
    return (h, hp, *negatives)


def hn_shapes(negatives: str, B: int) -> list:
    """The DGP negatives a reference check is run with, as shapes without d: a shared pool of 4 and 3 per
    anchor for ``independent``; none (a single None) for the negative sets drawn from the batch."""
    return [(4,), (B, 3)] if negatives == "independent" else [None]


def reference_cases(negatives: str, B: int, noise: float = 0.4, one_generator: bool = False) -> list:
    """The ``(h, h+, h_neg)`` of a reference check in d = 3, seeded with 10 B + len(negatives): one case per
    shape of ``hn_shapes``. Each case is drawn afresh from the seed, or, with ``one_generator``, h and h+ are
    drawn once and the pools one after the other from the same generator."""
    seed = 10 * B + len(negatives)
    if one_generator:
        h, hp, *pools = encodings(B, 3, seed, *hn_shapes(negatives, B), noise=noise)
        return [(h, hp, hn) for hn in pools]
    return [encodings(B, 3, seed, shape, noise=noise) for shape in hn_shapes(negatives, B)]


def coinciding_encodings(seed: int, dtype: torch.dtype, noise: float = 0.4):
    """Four anchors in d = 3 and a shared pool of 3 DGP negatives (``encodings``) where a negative sits on
    its anchor in each place: h[1] = h+[2] = h_neg[0] = h[0]; cast to ``dtype``, requiring gradients."""
    h, hp, hn = encodings(4, 3, seed, (3,), noise=noise)
    h[1] = h[0]
    hp[2] = h[0]
    hn[0] = h[0]
    return tuple(x.to(dtype).requires_grad_() for x in (h, hp, hn))


def dgp_views(shape: str, seed: int = 2):
    """Independent float64 h, h+ (3, 4) and DGP negatives: a shared pool (6, 4) or 6 per anchor (3, 6, 4)."""
    g = torch.Generator().manual_seed(seed)
    h, hp = (torch.randn(3, 4, generator=g, dtype=torch.float64) for _ in range(2))
    hn = torch.randn(*((6,) if shape == "shared" else (3, 6)), 4, generator=g, dtype=torch.float64)
    return h, hp, hn


# ------------------------------------------------------------------------------------- reference pieces


def candidate_rows(h, hp, hn, negatives: str) -> list:
    """Each anchor row as ``((a, a+), [(a, c, is_self), ...])``: its positive pair and its negative pairs,
    every pair written out by hand. ``is_self`` marks the anchor scored against itself (``first_view`` alone
    holds it); h_neg is a shared pool (M, d) or one per anchor (B, K, d)."""
    B = len(h)
    rows = []
    for i in range(B):
        others = [j for j in range(B) if j != i]
        if negatives in ("symmetric", "r24"):
            rows.append(((h[i], hp[i]), [(h[i], h[j], False) for j in others] + [(h[i], hp[j], False) for j in others]))
            if negatives == "symmetric":
                negs = [(hp[i], hp[j], False) for j in others] + [(hp[i], h[j], False) for j in others]
                rows.append(((hp[i], h[i]), negs))
            else:
                negs = [(hp[i], hp[j], False) for j in others] + [(h[i], hp[j], False) for j in others]
                rows.append(((h[i], hp[i]), negs))
        elif negatives == "one_sided":
            rows.append(((h[i], hp[i]), [(h[i], hp[j], False) for j in others]))
        elif negatives == "first_view":
            rows.append(((h[i], hp[i]), [(h[i], h[j], j == i) for j in range(B)]))
        elif negatives == "first_view_others":
            rows.append(((h[i], hp[i]), [(h[i], h[j], False) for j in others]))
        else:
            pool = hn if hn.dim() == 2 else hn[i]
            rows.append(((h[i], hp[i]), [(h[i], c, False) for c in pool]))
    return rows


def sim(a: torch.Tensor, b: torch.Tensor, kind: str) -> torch.Tensor:
    """The similarity ``kind`` of two vectors: cosine, dot, or minus the sum of |a - b|^p for lp."""
    if kind == "cosine":
        return a @ b / (a.norm() * b.norm())
    if kind == "dot":
        return a @ b
    return -(a - b).abs().pow(int(kind[1])).sum()


def critic(kind: str, tau: float, offset):
    """The critic f(pair) = sim(a, b) / tau + offset of a candidate pair ``(a, b, ...)``."""

    def f(pair):
        return sim(pair[0], pair[1], kind) / tau + offset

    return f


def dot_critic_matrices(h, hp, hn, tau: float, c: float):
    """Dot-product critics with DGP negatives written with matrices: f+ (B,) and f- (B, K), for a shared pool
    h_neg (K, d) or one per anchor (B, K, d)."""
    pos = (h * hp).sum(1) / tau + c
    neg = (h @ hn.T if hn.dim() == 2 else (h[:, None, :] * hn).sum(-1)) / tau + c
    return pos, neg


# ------------------------------------------------------------------------------- comparisons and checks


def value_and_grads(fn, inputs, allow_unused: bool = False):
    """``fn()`` detached and its gradients with respect to ``inputs``."""
    value = fn()
    return value.detach(), torch.autograd.grad(value, inputs, allow_unused=allow_unused)


def assert_same_value_and_gradients(got, want, value_rtol: float = 1e-12) -> None:
    """Two ``value_and_grads``: values within ``value_rtol`` (atol 1e-12), gradients within rtol 1e-10, atol
    1e-12; a gradient missing from ``want`` (an input it does not use, allow_unused) counts as zero."""
    torch.testing.assert_close(got[0], want[0], rtol=value_rtol, atol=1e-12)
    for g, w in zip(got[1], want[1]):
        w = torch.zeros_like(g) if w is None else w
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)


def assert_matches_reference(loss, reference, h, hp, hn, params=(), value_rtol=1e-12, allow_unused=False) -> None:
    """``loss(h, h+, h_neg)`` is a float64 scalar equal to ``reference(h, h+, h_neg)``, and so are its
    gradients with respect to the encodings given (h_neg may be None) and ``params``."""
    xs = [None if x is None else x.clone().requires_grad_() for x in (h, hp, hn)]
    inputs = [x for x in xs if x is not None] + list(params)
    got = value_and_grads(lambda: loss(*xs), inputs, allow_unused)
    want = value_and_grads(lambda: reference(*xs), inputs, allow_unused)
    assert got[0].dtype == torch.float64 and got[0].dim() == 0
    assert_same_value_and_gradients(got, want, value_rtol)


def check_against_reference(
    loss, reference, negatives, B, *, too_small=None, noise=0.4, one_generator=False, **options
) -> None:
    """The reference check on each of ``reference_cases``: a batch of one raises ``too_small`` (a pattern;
    by default "loss.negatives='<negatives>' ... at least 2 samples") for a negative set drawn from the batch;
    otherwise ``assert_matches_reference`` (``options``: its params, value_rtol, allow_unused)."""
    if too_small is None:
        too_small = rf"loss\.negatives='{negatives}' .*at least 2 samples"
    for h, hp, hn in reference_cases(negatives, B, noise, one_generator):
        if B == 1 and negatives in BATCH_NEGATIVES:
            with pytest.raises(ValueError, match=too_small):
                loss(h, hp, hn)
            continue
        assert_matches_reference(loss, reference, h, hp, hn, **options)


def assert_gradcheck(loss, h, hp, hn=None, learnt_offset: bool = False) -> None:
    """``torch.autograd.gradcheck`` of the loss in the encodings given, and in its offset with
    ``learnt_offset`` (through ``functional_call``, h_neg given)."""
    xs = [x.clone().requires_grad_() for x in (h, hp, hn) if x is not None]
    if not learnt_offset:
        assert torch.autograd.gradcheck(lambda *a: loss(*a), xs)
        return
    offset = loss.offset.detach().clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b, n, c: functional_call(loss, {"offset": c}, (a, b, n)), xs + [offset])


def check_negative_on_its_anchor(loss, reference, seed, dtype, noise=0.4, abs_tol=None) -> None:
    """On ``coinciding_encodings`` the value and every gradient are finite and, unless ``reference`` is None,
    the value is ``reference`` of the float64 encodings (rel 1e-5 in float32, 1e-12 in float64; ``abs_tol``
    is pytest.approx's ``abs``)."""
    h, hp, hn = coinciding_encodings(seed, dtype, noise)
    value = loss(h, hp, hn)
    grads = torch.autograd.grad(value, [h, hp, hn], allow_unused=True)
    assert torch.isfinite(value)
    assert all(g is None or torch.isfinite(g).all() for g in grads)
    if reference is None:
        return
    want = reference(*(x.detach().double() for x in (h, hp, hn)))
    assert value.item() == pytest.approx(want.item(), rel=1e-5 if dtype == torch.float32 else 1e-12, abs=abs_tol)


def assert_symmetric_in_views_and_order(loss, h, hp) -> None:
    """Swapping the views or permuting the batch (a fixed permutation) leaves the loss as it is."""
    perm = torch.randperm(len(h), generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(loss(h, hp), loss(hp, h), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(loss(h, hp), loss(h[perm], hp[perm]), rtol=1e-12, atol=1e-12)


def assert_r24_as_symmetric(loss_with, h, hp) -> None:
    """``loss_with(negatives)`` on ``r24`` has the value and gradients it has on ``symmetric``."""
    xs = [x.requires_grad_() for x in (h, hp)]
    sym, r24 = (value_and_grads(lambda: loss_with(n)(*xs), xs) for n in ("symmetric", "r24"))
    assert_same_value_and_gradients(sym, r24)


MISSING_NEGATIVES = r"loss\.negatives='independent' needs the encodings"


def assert_needs_independent_negatives(loss, h, hp, empty, missing=MISSING_NEGATIVES) -> None:
    """An ``independent`` loss raises ``missing`` without h_neg and ``empty`` (patterns) for a shared pool
    (0, d) and a per-anchor one (B, 0, d)."""
    with pytest.raises(ValueError, match=missing):
        loss(h, hp)
    B, d = h.shape
    for pool in (torch.zeros(0, d, dtype=h.dtype), torch.zeros(B, 0, d, dtype=h.dtype)):
        with pytest.raises(ValueError, match=empty):
            loss(h, hp, pool)


def check_built_parameter_free(options: dict, loss_class, in_repr: str, unit_norm: bool):
    """The loss built from the registry with ``options`` is a ``loss_class`` that needs no DGP negatives, asks
    for unit-norm encodings as ``unit_norm`` says, shows ``in_repr`` in its repr and has nothing to learn or log
    and no bound on the mutual information; its ``independent`` form asks for DGP negatives. Returns it."""
    loss = LOSSES.build(options, key="loss", dim=3)
    assert isinstance(loss, loss_class)
    assert not loss.requires_negatives and bool(loss.needs_unit_norm) == unit_norm
    assert LOSSES.build({"name": options["name"], "negatives": "independent"}, key="loss", dim=3).requires_negatives
    assert loss.logs() == {} and loss.mi_bound is None  # no bound: none declared
    assert list(loss.parameters()) == [] and loss.param_groups() == []
    assert in_repr in repr(loss)
    return loss


def assert_invalid_option(name: str, options: dict, message: str, dim: int = 3) -> None:
    """Building loss ``name`` with ``options`` raises a ValueError matching ``message``: taken literally
    (dots escaped) unless it holds ``*``, then as the pattern written."""
    with pytest.raises(ValueError, match=message.replace(".", r"\.") if "*" not in message else message):
        LOSSES.build({"name": name, **options}, key="loss", dim=dim)


# ------------------------------------------------------------------------------ NCE and NWJ (critic losses)


def check_critic_against_reference(loss_class, reference, kind, negatives, B) -> None:
    """A critic loss (tau 0.7, offset 0.3, float64) against ``reference(h, h+, h_neg, kind, tau, offset,
    negatives)``, value (rel 1e-11) and gradients, the learnt offset's included."""
    tau = 0.7
    loss = loss_class(dim=3, similarity=kind, tau=tau, offset=0.3, negatives=negatives).double()
    too_small = f"loss.negatives='{negatives}' draws negatives from the batch and needs at least 2"
    check_against_reference(
        loss, lambda a, b, c: reference(a, b, c, kind, tau, loss.offset, negatives), negatives, B,
        too_small=too_small, one_generator=True, params=[loss.offset], value_rtol=1e-11,
    )


def check_critic_reference_can_fail(loss_class, reference) -> None:
    """The reference tells the negative sets apart and sees the offset. ``symmetric`` and ``r24`` hold the
    same pairs, only the cross-view ones in other rows, so a loss summed pair by pair is the same on both."""
    h, hp = encodings(5, 3, 1)
    values = {n: loss_class(dim=3, negatives=n).double()(h, hp).item() for n in CRITIC_NEGATIVES[:-1]}
    assert values["symmetric"] == pytest.approx(values["r24"], rel=1e-12)
    assert len({round(v, 8) for v in values.values()}) == len(values) - 1
    want = reference(h, hp, None, "cosine", 1.0, 0.0, "symmetric").item()
    assert values["symmetric"] == pytest.approx(want, rel=1e-12)
    assert reference(h, hp, None, "cosine", 1.0, 0.1, "symmetric").item() != pytest.approx(want, rel=1e-6)


def check_critic_gradcheck(loss_class, kind, negatives) -> None:
    """gradcheck of a critic loss (tau 0.8, offset 0.2) in the encodings and its offset, with DGP negatives
    (the per-anchor pool for ``independent``, 3 unseeded ones that the batch sets ignore otherwise)."""
    loss = loss_class(dim=3, similarity=kind, tau=0.8, offset=0.2, negatives=negatives).double()
    h, hp, *pools = encodings(4, 3, 4, *hn_shapes(negatives, 4))
    hn = pools[-1] if negatives == "independent" else torch.randn(3, 3, dtype=torch.float64)
    assert_gradcheck(loss, h, hp, hn, learnt_offset=True)


def check_offset_learnt_or_fixed(loss_class, offset: float, seed: int):
    """The offset is a parameter with its own learning rate, or a fixed buffer with the same value; both are
    logged. Returns the learnt loss and the float64 h, h+ (6, 3) the two were compared on."""
    learnt = loss_class(dim=3, offset=offset, lr=1e-2)
    assert [g["lr"] for g in learnt.param_groups()] == [1e-2]
    assert [p is learnt.offset for p in learnt.parameters()] == [True]
    assert learnt.logs() == {"tau": 1.0, "offset": offset}
    fixed = loss_class(dim=3, offset=offset, learn_offset=False, tau=0.5)
    assert fixed.param_groups() == [] and list(fixed.parameters()) == []
    assert "offset" in fixed.state_dict() and fixed.logs() == {"tau": 0.5, "offset": offset}
    h, hp = encodings(6, 3, seed)
    torch.testing.assert_close(fixed.double()(h, hp), loss_class(dim=3, offset=offset, tau=0.5).double()(h, hp))
    return learnt, h, hp


def assert_float32_as_float64(loss, h, hp) -> None:
    """On float32 encodings the loss is a float32 on their device, within 1e-5 of its value on the float64
    ones; the loss is left in float64."""
    out = loss(h.float(), hp.float())
    assert out.dtype == torch.float32 and out.device == h.device
    assert out.item() == pytest.approx(loss.double()(h, hp).item(), rel=1e-5)


def check_critic_flags_and_negatives(loss_class, name: str, other_similarity: str, seed: int):
    """Flags (unit norm for cosine alone, DGP negatives for ``independent`` alone); a batch negative set
    ignores h_neg; an ``independent`` one needs a non-empty h_neg. Returns the in-batch and independent losses
    (float64, d = 2) and the h, h+ (4, 2) they were called with."""
    assert loss_class(dim=2).needs_unit_norm and not loss_class(dim=2).requires_negatives
    assert not loss_class(dim=2, similarity=other_similarity).needs_unit_norm
    assert loss_class(dim=2, negatives="independent").requires_negatives
    g = torch.Generator().manual_seed(seed)
    h, hp, hn = (torch.randn(n, 2, generator=g, dtype=torch.float64) for n in (4, 4, 3))
    in_batch = loss_class(dim=2).double()
    assert in_batch(h, hp, hn).item() == in_batch(h, hp).item()
    independent = loss_class(dim=2, negatives="independent").double()
    empty = f"loss.name='{name}' needs at least one negative per anchor"
    assert_needs_independent_negatives(independent, h, hp, empty, missing="loss.negatives='independent' needs")
    return in_batch, independent, h, hp
