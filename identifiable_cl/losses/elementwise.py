"""The memory-light core of the losses outside InfoNCE's family: row-blocked sums and row-wise choices.

InfoNCE's family reduces each row of logits by a log-sum-exp (:mod:`identifiable_cl.losses.blocked`). NCE,
NWJ, the spectral contrastive loss, the margin loss and the triplet loss over all negatives instead add an
elementwise function of each (anchor, negative) similarity, which may depend on the anchor's row (its
positive's similarity) and on parameters (a learnt offset):

    S = Σ_p  m_p  Σ_i Σ_{j not excluded}  φ(sim_p(a_i, c_j), e_i, θ),                           (1)

for the pairings p of a negative set (``Pairing`` of ``blocked``; m_p the number of row groups that pool
pairing p), row extras e (R,) and parameters θ. The triplet loss with mined negatives takes one negative a
row instead: the nearest (``hardest``), or the nearest farther than the positive (``semihard``):

    j*(i) = argmax_{j not excluded} sim(a_i, c_j)   [over sim(a_i, c_j) < e_i where there is one].     (2)

Neither holds the (R, N) matrix: :func:`blocked_sum` evaluates (1) on blocks of rows of about
the sizes of ``blocked.block_rows`` (the whole matrix where it fits ``train.loss_memory``), differentiating φ by
autograd on the block's (b, N) similarities (excluded
entries reach φ as 0 and contribute 0, with gradient 0) and the similarities analytically
(``blocked.similarity_gradients``), so its gradient costs one more pass over the block; :func:`nearest`
finds (2) block by block without a gradient, for the caller to score the chosen pairs alone. Ties go to the first pairing of a group, then the first column: the dense
matrix's order. Eager torch operations only: these losses are the comparison, not the scale.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from identifiable_cl.losses.blocked import (
    Pairing, block_rows, excluded_columns, left_out, similarity, similarity_gradients,
)

Phi = Callable[..., Tensor]
"""``phi(sim (b, N), extra (b, 1) or None, *params) -> (b, N)``, differentiable in all of them."""


def _kept(exclude: str, start: int, rows: int, n: int, device: torch.device) -> Tensor | None:
    """(rows, n) bool: False at the pairs rows start..start+rows leave out; None when none are."""
    excluded = excluded_columns(exclude, start, rows, n, device)
    if excluded is None:
        return None
    return ~left_out(excluded, n)


BUFFERS = 4
"""(b, N) buffers of a block alive at once: similarities, φ, and the two gradients of autograd's pass."""


def _blocks(rows: int, columns: int, device: torch.device, itemsize: int):
    size = block_rows(rows, columns, device, BUFFERS, itemsize)
    return [(start, min(size, rows - start)) for start in range(0, rows, size)]


class _BlockedSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, kind: str, pairings: tuple[Pairing, ...], weights: tuple[float, ...], phi: Phi,  # type: ignore[override]
                n_params: int, extras: Tensor | None, *inputs: Tensor) -> Tensor:
        params, tensors = inputs[:n_params], inputs[n_params:]
        want = any(ctx.needs_input_grad[5:])
        transposed = [t.transpose(0, 1).contiguous() for t in tensors]
        grads = [torch.zeros_like(t) for t in tensors]
        grads_T = [torch.zeros_like(t) for t in transposed]
        grad_extras = None if extras is None else torch.zeros_like(extras)
        grad_params = [torch.zeros_like(p) for p in params]
        total = tensors[0].new_zeros(())
        for pairing, weight in zip(pairings, weights):
            anchors, cT = tensors[pairing.anchors], transposed[pairing.candidates]
            for start, size in _blocks(anchors.shape[0], cT.shape[1], anchors.device, anchors.element_size()):
                a = anchors[start : start + size]
                kept = _kept(pairing.exclude, start, size, cT.shape[1], a.device)
                with torch.enable_grad():
                    sim = similarity(a, cT, kind).detach().requires_grad_(want)
                    extra = None if extras is None else extras[start : start + size, None].detach().requires_grad_(want)
                    leaves = [p.detach().requires_grad_(want) for p in params]
                    values = phi(sim if kept is None else torch.where(kept, sim, torch.zeros_like(sim)), extra, *leaves)
                    if kept is not None:
                        values = torch.where(kept, values, torch.zeros_like(values))
                    block = values.sum() * weight
                    if want:
                        wrt = [sim] + ([extra] if extra is not None else []) + leaves
                        found = torch.autograd.grad(block, wrt, allow_unused=True)
                total += block.detach()
                if not want:
                    continue
                g_sim, rest = found[0], list(found[1:])
                if extra is not None:
                    g_extra = rest.pop(0)
                    if g_extra is not None:
                        grad_extras[start : start + size] += g_extra[:, 0]
                for acc, g in zip(grad_params, rest):
                    if g is not None:
                        acc += g
                if g_sim is not None:
                    ga, gcT = similarity_gradients(g_sim, a, cT, kind)
                    grads[pairing.anchors][start : start + size] += ga
                    grads_T[pairing.candidates] += gcT
        for g, gT in zip(grads, grads_T):
            g += gT.transpose(0, 1)
        ctx.n_extras = extras is not None
        ctx.save_for_backward(*([grad_extras] if extras is not None else []), *grad_params, *grads)
        return total

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        saved = list(ctx.saved_tensors)
        grad_extras = saved.pop(0) * grad if ctx.n_extras else None
        return (None, None, None, None, None, grad_extras, *(grad * g for g in saved))


def blocked_sum(kind: str, pairings: Sequence[Pairing], weights: Sequence[float], tensors: Sequence[Tensor],
                extras: Tensor | None, params: Sequence[Tensor], phi: Phi) -> Tensor:
    """S of (1) (a scalar) in O(b · N) memory, differentiable in ``tensors``, ``extras`` and ``params``.

    ``tensors``: the (·, d) inputs that ``pairings`` index, every pairing's anchors with the rows of
    ``extras`` (R,) (or None); ``weights``: m_p per pairing; ``params``: 0-dim tensors θ.
    """
    return _BlockedSum.apply(kind, tuple(pairings), tuple(float(w) for w in weights), phi, len(params), extras,
                             *params, *tensors)


def nearest(kind: str, pairings: Sequence[Pairing], tensors: Sequence[Tensor], bound: Tensor | None) -> Tensor:
    """j*(i) of (2) over the pooled ``pairings`` (all with the same R anchor rows) as (R, 2) int64: the index of
    the pairing and the column; ``bound`` (R,): e_i for the semi-hard choice (None: the hardest). No gradient:
    the caller computes the chosen pairs' similarities. Every row must have a negative."""
    rows = tensors[pairings[0].anchors].shape[0]
    device = tensors[0].device
    with torch.no_grad():
        best = tensors[0].new_full((rows,), float("-inf"))
        below = tensors[0].new_full((rows,), float("-inf"))
        choice = torch.zeros(rows, 2, dtype=torch.long, device=device)
        choice_below = torch.full((rows, 2), -1, dtype=torch.long, device=device)
        for index, pairing in enumerate(pairings):
            cT = tensors[pairing.candidates].transpose(0, 1)
            for start, size in _blocks(rows, cT.shape[1], device, cT.element_size()):
                sim = similarity(tensors[pairing.anchors][start : start + size], cT, kind)
                kept = _kept(pairing.exclude, start, size, cT.shape[1], device)
                if kept is not None:
                    sim = sim.masked_fill(~kept, float("-inf"))
                _update(best, choice, sim, start, index)
                if bound is not None:
                    farther = sim.masked_fill(sim >= bound[start : start + size, None], float("-inf"))
                    _update(below, choice_below, farther, start, index)
        if bound is None:
            return choice
        return torch.where((choice_below[:, 0] >= 0)[:, None], choice_below, choice)


def _update(best: Tensor, choice: Tensor, sim: Tensor, start: int, index: int) -> None:
    """Rows start.. of ``best``/``choice`` take a block's row maxima that beat them strictly (ties: earlier)."""
    value, column = sim.max(1)
    rows = slice(start, start + sim.shape[0])
    better = value > best[rows]
    best[rows] = torch.where(better, value, best[rows])
    choice[rows, 0] = torch.where(better, index, choice[rows, 0])
    choice[rows, 1] = torch.where(better, column, choice[rows, 1])
