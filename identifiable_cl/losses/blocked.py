"""The memory-light core of every InfoNCE-family loss: row-blocked log-sum-exp, analytic gradient.

For anchor rows a_i (R, d) and candidate rows c_j (N, d), the logits are

    l_ij = s · sim(a_i, c_j),   sim = aᵀc (``dot``) or -Σ_k |a_k - c_k|^p (``l1``, ``l2``, ``l3``),

with a scale s (1/τ; a tensor when τ is learnt). Every loss of the family needs, per anchor and
for a few multipliers c_m (1 for InfoNCE; β + 1 and β for hard-negative weighting),

    lse_im = log Σ_{j not excluded} exp(c_m l_ij),                                        (1)

and then a per-row loss ``row_loss(pos_i, lse_i·, s)`` of the anchor's positive logit pos_i.
A negative set may pool several (anchors, candidates) pairings into one sum (1); see
``identifiable_cl.losses.base.contrastive_loss`` for the five sets.

The (R, N) logit matrix is held whole only where its buffers fit a memory budget
(:func:`loss_memory`, a run's ``train.loss_memory``); rows are processed in blocks of ``b`` rows
(:func:`block_rows`: as many as the budget holds on an accelerator, and b · N ≈ ``BLOCK_ENTRIES`` at
most on a CPU, whose caches favour small blocks). Within a block every row is complete, so (1) is the
usual max-shifted sum,
and the per-row loss and its derivatives (by autograd on the small (b,) tensors) are known at
once. The gradient of the mean loss L = Σ_i row_i / count is then accumulated in the same pass,

    ∂L/∂l_ij = Σ_m (∂L/∂lse_im) · c_m · softmax_j(c_m l_i·),      G_ij = s · ∂L/∂l_ij,
    ∂L/∂a_i = Σ_j G_ij ∂sim_ij/∂a_i,   ∂L/∂c_j = Σ_i G_ij ∂sim_ij/∂c_j,   ∂L/∂s = Σ_ij (∂L/∂l_ij) sim_ij,

with ∂sim/∂a = c (dot) or -p sign(a - c)|a - c|^{p-1} (Lp), so the backward pass only scales the
stored gradients by the incoming one. Exponentials are taken once per entry (the softmax weights
are the stored shifted exponentials divided by their sum); shifted logits are floored at
:func:`exp_floor` first, far below anything that changes (1) and above the slow subnormal path
of CPU ``exp``. Excluded pairs get weight exactly 0.

Peak extra memory: a few (b, N) buffers per pairing, O(b · N) whatever the batch; no
(b, N, d) difference tensor is formed (the Lp kernels loop over the d coordinates). The C kernels'
buffers stay allocated in each thread that used them, for the next evaluation.

Kernels: ``native`` runs each block's forward (similarities, row maxima, exponentials, row sums)
and backward (weights, gradients of anchors, candidates and scale) as the fused C kernels of
``identifiable_cl.losses.native`` (CPU, float32/float64); ``eager`` runs :func:`block_forward`
and :func:`block_backward` as torch operations (any device and dtype; the path on a GPU).
``fused`` computes each pairing's lse over all rows in one operation and its gradients in another
(:mod:`identifiable_cl.losses.fused`: one Triton kernel each on CUDA, nothing of size b × N in memory). ``auto``
(default) takes ``native`` where it applies, else ``fused`` on a GPU where Triton is installed, else ``eager``.
The native and eager kernels compute the same Lp similarities bit for bit (the eager dot product is a matrix
product); sums may be added in another order. Choose with :func:`use_kernels` or the environment variable
``ICL_KERNELS``.
"""

from __future__ import annotations

import contextlib
import functools
import contextvars
import math
import os
import threading
from dataclasses import dataclass
from typing import Callable, Iterator, NamedTuple, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable

from identifiable_cl.config import LOSS_MEMORY_MIB
from identifiable_cl.losses import fused, native

KIND = ("dot", "l1", "l2", "l3")
KERNELS = ("auto", "eager", "native", "fused")
BLOCK_ENTRIES = 1 << 20
"""Most logits per row block (b · N) on a CPU; 4 MiB per (b, N) buffer in float32."""

_KERNELS: contextvars.ContextVar[str | None] = contextvars.ContextVar("icl_kernels", default=None)
_BLOCK_ROWS: contextvars.ContextVar[int | None] = contextvars.ContextVar("icl_block_rows", default=None)
_SIZED_FOR: contextvars.ContextVar[str | None] = contextvars.ContextVar("icl_sized_for", default=None)
_MEMORY_MIB: contextvars.ContextVar[int] = contextvars.ContextVar("icl_loss_memory", default=LOSS_MEMORY_MIB)


def kernels() -> str:
    """The kernel choice in force: :func:`use_kernels`, else ``ICL_KERNELS``, else ``auto``."""
    choice = _KERNELS.get() or os.environ.get("ICL_KERNELS", "auto")
    if choice not in KERNELS:
        raise ValueError(f"ICL_KERNELS={choice!r} is invalid: allowed: {', '.join(KERNELS)}")
    return choice


@contextlib.contextmanager
def use_kernels(choice: str | None = None, block_rows: int | None = None,
                sized_for: str | None = None) -> Iterator[None]:
    """Within the block, use ``choice`` kernels and/or exactly ``block_rows`` rows per block, and/or size the blocks
    as :func:`block_rows` does on the device type ``sized_for`` (``cuda``: the memory budget alone, wherever the
    tensors are; how :mod:`identifiable_cl.benchmarks.step_cost` counts a GPU's step on a CPU)."""
    if choice is not None and choice not in KERNELS:
        raise ValueError(f"kernels={choice!r} is invalid: allowed: {', '.join(KERNELS)}")
    if block_rows is not None and (isinstance(block_rows, bool) or not isinstance(block_rows, int) or block_rows < 1):
        raise ValueError(f"block_rows={block_rows!r} is invalid: expected a positive integer")
    if sized_for is not None and sized_for not in ("cpu", "cuda"):
        raise ValueError(f"sized_for={sized_for!r} is invalid: allowed: cpu, cuda")
    tokens = _KERNELS.set(choice), _BLOCK_ROWS.set(block_rows), _SIZED_FOR.set(sized_for)
    try:
        yield
    finally:
        for variable, token in zip((_KERNELS, _BLOCK_ROWS, _SIZED_FOR), tokens):
            variable.reset(token)


@contextlib.contextmanager
def loss_memory(mib: int) -> Iterator[None]:
    """Within the block, a block's (b, N) buffers may take ``mib`` MiB together (:func:`block_rows`)."""
    token = _MEMORY_MIB.set(mib)
    try:
        yield
    finally:
        _MEMORY_MIB.reset(token)


class Pairing(NamedTuple):
    """Anchors ``tensors[anchors]`` (R, d) against candidates ``tensors[candidates]`` (N, d).

    ``exclude``: ``none``; ``diagonal`` (j = i); ``views`` (j ≡ i mod N/2: with both views
    stacked, a row's own sample in either view).
    """

    anchors: int
    candidates: int
    exclude: str = "none"


RowLoss = Callable[[Tensor, Tensor, Tensor], Tensor]
"""``row_loss(pos (b,), lse (b, M), scale ()) -> (b,)``, differentiable in all three."""


@dataclass(frozen=True)
class Plan:
    """What to compute: pairings, the groups of pairings pooled per row, and the row loss.

    ``groups[g]`` lists pairing indices whose sums (1) add up to row ``i``'s negative set;
    the loss is Σ_g Σ_i row_loss(pos_i, lse_gi, s) / count.
    """

    kind: str
    pairings: tuple[Pairing, ...]
    groups: tuple[tuple[int, ...], ...]
    multipliers: tuple[float, ...]
    row_loss: RowLoss
    count: int


def _power(x: Tensor, p: int) -> Tensor:
    return x.abs() if p == 1 else x * x if p == 2 else x * x * x.abs()


def _power_slope(x: Tensor, p: int) -> Tensor:
    """d|x|^p/dx."""
    return torch.sign(x) if p == 1 else 2 * x if p == 2 else 3 * x * x.abs()


def similarity(a: Tensor, cT: Tensor, kind: str) -> Tensor:
    """sim(a_i, c_j) (b, N) of a (b, d) and cT = cᵀ (d, N); Lp from differences, coordinate by coordinate."""
    if kind == "dot":
        return a @ cT
    p = int(kind[1])
    total = _power(a[:, 0:1] - cT[0], p)
    for k in range(1, a.shape[1]):
        total = total + _power(a[:, k : k + 1] - cT[k], p)
    return -total


def similarity_gradients(g: Tensor, a: Tensor, cT: Tensor, kind: str) -> tuple[Tensor, Tensor]:
    """(Σ_j g_ij ∂sim_ij/∂a_i as (b, d), Σ_i g_ij ∂sim_ij/∂c_j as (d, N)) for g (b, N)."""
    if kind == "dot":
        return g @ cT.transpose(0, 1), a.transpose(0, 1) @ g
    if kind == "l2":  # Σ_j g_ij · -2(a_i - c_j) and Σ_i g_ij · 2(a_i - c_j), as matrix products
        rows, cols = g.sum(1, keepdim=True), g.sum(0, keepdim=True)
        return 2 * (g @ cT.transpose(0, 1) - rows * a), 2 * (a.transpose(0, 1) @ g - cols * cT)
    p = int(kind[1])
    grad_a, grad_cT = [], []
    for k in range(a.shape[1]):
        w = g * _power_slope(a[:, k : k + 1] - cT[k], p)
        grad_a.append(-w.sum(1))
        grad_cT.append(w.sum(0))
    return torch.stack(grad_a, 1), torch.stack(grad_cT, 0)


def exp_floor(dtype: torch.dtype) -> float:
    """Shifted logits are floored here before exp: 0.9 · log(smallest normal), e.g. -78.6 in float32.

    Far enough above the subnormal range that CPU ``exp`` stays on its fast path; the floor
    changes a row's sum (at least 1) by less than N · e^floor.
    """
    return 0.9 * math.log(torch.finfo(dtype).tiny)


def left_out(excluded: Tensor, columns: int) -> Tensor:
    """(b, columns) bool, True at the columns ``excluded`` (b, k) names per row (-1 = none); built by a scatter,
    without reading the indices on the host (boolean indexing would make a GPU wait)."""
    mask = torch.zeros(excluded.shape[0], columns + 1, dtype=torch.bool, device=excluded.device)
    return mask.scatter_(1, torch.where(excluded >= 0, excluded, columns), True)[:, :columns]


def block_forward(
    a: Tensor, cT: Tensor, scale: Tensor, excluded: Tensor | None,
    kind: str, multipliers: tuple[float, ...], keep_similarity: bool,
    workspace: dict[str, Tensor] | None = None,
) -> tuple[Tensor | None, Sequence[Tensor], Tensor, Tensor]:
    """Similarities (b, N) (None unless ``keep_similarity``), shifted exponentials ``E_m`` (b, N),
    row sums (b, M) and lse (b, M) of one block.

    ``excluded``: (b, 2) int64, the columns each row leaves out (-1 = none), or None.
    ``workspace``: buffers the C kernels may reuse from the previous block (see ``native.forward``).
    """
    floor = exp_floor(a.dtype)
    if _native(a, cT):
        sim, exps, top, sums = native.forward(
            a, cT, scale, multipliers, excluded, floor, kind, keep_similarity, workspace
        )
        return sim, exps, sums, top + sums.log()
    sim = similarity(a, cT, kind)
    if excluded is not None:
        excluded = left_out(excluded, sim.shape[1])
    exps, sums, lses = [], [], []
    for c in multipliers:
        logits = sim * (scale * c)
        if excluded is not None:
            logits.masked_fill_(excluded, -math.inf)
        top = logits.amax(1, keepdim=True) if logits.shape[1] else logits.new_full((logits.shape[0], 1), -math.inf)
        e = logits.sub_(top).clamp_min_(floor).exp_()
        if excluded is not None:
            e.masked_fill_(excluded, 0.0)
        total = e.sum(1, keepdim=True)
        exps.append(e)
        sums.append(total)
        lses.append(top + total.log())
    return sim if keep_similarity else None, exps, torch.cat(sums, 1), torch.cat(lses, 1)


def block_backward(
    sim: Tensor | None, exps: Sequence[Tensor], weights: Tensor, scale: Tensor, a: Tensor, cT: Tensor,
    kind: str,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """Gradients (of a (b, d), of cT (d, N), of the scale when ``sim`` is given) from the row weights (b, M).

    ``weights[:, m]`` = c_m · ∂L/∂lse_m / (row sum of E_m), so ∂L/∂l = Σ_m weights_m · E_m.
    May overwrite ``exps``.
    """
    if isinstance(exps, Tensor) and _native(exps, weights, a, cT):
        return native.backward(exps, weights.contiguous(), sim, scale, a, cT, kind)
    dlogits = exps[0].mul_(weights[:, 0:1])
    for m in range(1, len(exps)):
        dlogits = dlogits.add_(exps[m].mul_(weights[:, m : m + 1]))
    d_scale = None if sim is None else (dlogits * sim).sum()
    grad_a, grad_cT = similarity_gradients(dlogits.mul_(scale), a, cT, kind)
    return grad_a, grad_cT, d_scale


def _native(*tensors: Tensor) -> bool:
    """Whether the C kernels compute this block (see the module docstring)."""
    choice = kernels()
    if choice in ("eager", "fused"):
        return False
    ok = native.supports(*tensors)
    if choice == "native" and not ok:
        raise RuntimeError(
            "ICL_KERNELS=native, but the C kernels do not apply here (they need CPU float32/float64 "
            "tensors and a C compiler); use auto or eager"
        )
    return ok


def excluded_columns(exclude: str, start: int, rows: int, n: int, device: torch.device) -> Tensor | None:
    """(rows, 2) int64: the columns that rows start..start+rows leave out (-1 = none), or None."""
    if exclude == "none":
        return None
    own = torch.arange(start, start + rows, device=device)
    if exclude == "diagonal":
        return torch.stack([own, torch.full_like(own, -1)], 1)
    own = own % (n // 2)
    return torch.stack([own, own + n // 2], 1)


def block_rows(rows: int, columns: int, device: torch.device | None = None, buffers: int = 1,
               itemsize: int = 4) -> int:
    """Rows per block of ``rows`` anchors against ``columns`` candidates: the :func:`use_kernels` override, else as
    many as ``buffers`` (b, columns) buffers of ``itemsize`` bytes hold within the :func:`loss_memory` budget, and
    on a CPU (``device`` None or of type cpu, unless :func:`use_kernels` sizes for another) at most
    ``BLOCK_ENTRIES`` / columns; at least one."""
    forced = _BLOCK_ROWS.get()
    if forced is None:
        forced = (_MEMORY_MIB.get() << 20) // max(columns * buffers * itemsize, 1)
        kind = _SIZED_FOR.get() or ("cpu" if device is None else torch.device(device).type)
        if kind == "cpu":
            forced = min(forced, BLOCK_ENTRIES // max(columns, 1))
    return max(1, min(rows, forced))


_LOCAL = threading.local()


def _workspaces(count: int) -> list[dict[str, Tensor]]:
    """This thread's C-kernel buffers for ``count`` pairings (see ``native.forward``), kept from one loss
    evaluation to the next: the buffers of a block (4 MiB each in float32) are fresh pages otherwise, and
    faulting them in every step doubled the forward kernel's time inside training (batch 512)."""
    held = getattr(_LOCAL, "workspaces", None)
    if held is None:
        held = _LOCAL.workspaces = []
    held.extend({} for _ in range(count - len(held)))
    return held[:count]


class _BlockedLoss(torch.autograd.Function):
    """The loss (0-dim) and, as outputs autograd does not differentiate, its gradients (∂L/∂s, ∂L/∂pos,
    ∂L/∂tensors; none where ``needs`` asks for none), computed together in the forward pass; under ``vmap`` (a
    pack's runs along a run axis) the fused operations take every run in one call (:meth:`vmap`)."""

    @staticmethod
    def forward(plan: Plan, needs: tuple[bool, ...], scale: Tensor, pos: Tensor,  # type: ignore[override]
                *tensors: Tensor) -> tuple[Tensor, ...]:
        if _fused(plan, pos, *tensors):
            outputs = _fused_pass(plan, needs, scale.reshape(1), pos[None], [t[None] for t in tensors])
            return tuple(x[0] for x in outputs)
        return _blocked_pass(plan, needs, scale, pos, tensors)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        ctx.mark_non_differentiable(*output[1:])
        ctx.save_for_backward(*output[1:])

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor, *_: Tensor):  # type: ignore[override]
        grad_scale, grad_pos, *grads = ctx.saved_tensors
        return (None, None, grad * grad_scale, grad * grad_pos, *(grad * g for g in grads))

    @staticmethod
    def vmap(info, in_dims, plan: Plan, needs: tuple[bool, ...], scale: Tensor, pos: Tensor, *tensors: Tensor):
        """K = ``info.batch_size`` runs: with the fused operations, all runs in one call each
        (:class:`_RunAxisLoss`); else each run's own pass in turn."""
        runs = info.batch_size
        scale, pos, *tensors = (x.movedim(d, 0) if d is not None else x.expand(runs, *x.shape)
                                for x, d in zip((scale, pos, *tensors), in_dims[2:]))
        needs = _needs(scale, pos, *tensors)  # vmap's wrappers hide whether the tensors need gradients
        if _fused(plan, pos, *tensors):
            outputs = _RunAxisLoss.apply(plan, needs, scale, pos, *tensors)
        else:
            each = [_BlockedLoss.apply(plan, needs, scale[k], pos[k], *(t[k] for t in tensors)) for k in range(runs)]
            outputs = tuple(torch.stack(parts) for parts in zip(*each))
        return outputs, (0,) * len(outputs)


class _RunAxisLoss(torch.autograd.Function):
    """K runs' losses (K,) and gradients from inputs with a leading run axis (scale (K,), pos (K, R), tensors
    (K, ·, d)), by the fused operations (:func:`_fused_pass`)."""

    @staticmethod
    def forward(ctx, plan: Plan, needs: tuple[bool, ...], scale: Tensor, pos: Tensor,  # type: ignore[override]
                *tensors: Tensor) -> tuple[Tensor, ...]:
        outputs = _fused_pass(plan, needs, scale, pos, tensors)
        ctx.mark_non_differentiable(*outputs[1:])
        ctx.save_for_backward(*outputs[1:])
        return outputs

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor, *_: Tensor):  # type: ignore[override]
        grad_scale, grad_pos, *grads = ctx.saved_tensors
        return (None, None, grad * grad_scale, grad[:, None] * grad_pos, *(grad[:, None, None] * g for g in grads))


def _blocked_pass(plan: Plan, needs: tuple[bool, ...], scale: Tensor, pos: Tensor, tensors: Sequence[Tensor]):
    """(loss, and with ``needs``: ∂L/∂s, ∂L/∂pos, ∂L/∂tensors) in row blocks (module docstring)."""
    want_grad = any(needs)
    rows = pos.shape[0]
    device, dtype = pos.device, pos.dtype
    tensors = tuple(t.contiguous() for t in tensors)
    transposed = [t.transpose(0, 1).contiguous() for t in tensors]
    columns = max(tensors[p.candidates].shape[0] for p in plan.pairings)
    buffers = len(plan.pairings) * (len(plan.multipliers) + 2)  # per pairing: similarities, E_m, a temporary
    size = block_rows(rows, columns, device, buffers, pos.element_size())
    grads = [torch.zeros_like(t) for t in tensors] if want_grad else []
    grads_T = [torch.zeros_like(t) for t in transposed] if want_grad else []
    grad_pos = torch.zeros_like(pos) if want_grad else None
    grad_scale = torch.zeros((), dtype=dtype, device=device)
    total = torch.zeros((), dtype=dtype, device=device)
    mults = torch.stack([pos.new_full((), m) for m in plan.multipliers])  # filled on the device, not uploaded
    workspaces = _workspaces(len(plan.pairings))
    done = 0
    while done < rows:
        start = min(done, rows - size)  # the last block overlaps: every block has `size` rows
        fresh = slice(done - start, size)
        stats = []
        for pairing, workspace in zip(plan.pairings, workspaces):
            a = tensors[pairing.anchors][start : start + size]
            cT = transposed[pairing.candidates]
            excluded = excluded_columns(pairing.exclude, start, size, cT.shape[1], device)
            stats.append(block_forward(a, cT, scale, excluded, plan.kind, plan.multipliers, needs[0], workspace))
        row_grads = _rows(plan, stats, pos[start : start + size][fresh], scale, fresh, want_grad)
        total += row_grads[0]
        if want_grad:
            grad_pos[start : start + size][fresh] += row_grads[1]
            grad_scale += row_grads[2]
            for pairing, (sim, exps, sums, _), weights in zip(plan.pairings, stats, row_grads[3]):
                if weights is None:
                    continue
                a = tensors[pairing.anchors][start : start + size]
                cT = transposed[pairing.candidates]
                w = weights * mults / sums
                ga, gcT, gs = block_backward(sim, exps, w, scale, a, cT, plan.kind)
                grads[pairing.anchors][start : start + size] += ga
                grads_T[pairing.candidates] += gcT
                if gs is not None:
                    grad_scale += gs
        done = start + size
    if want_grad:
        for g, gT in zip(grads, grads_T):
            g += gT.transpose(0, 1)
        return (total / plan.count, grad_scale / plan.count, grad_pos / plan.count, *(g / plan.count for g in grads))
    return (total / plan.count,)


def _fused_pass(plan: Plan, needs: tuple[bool, ...], scale: Tensor, pos: Tensor, tensors: Sequence[Tensor]):
    """(losses (K,), and with ``needs``: ∂L/∂s (K,), ∂L/∂pos (K, R), ∂L/∂tensors) of K runs, inputs with a
    leading run axis, by the operations of :mod:`identifiable_cl.losses.fused`: every row at once, one lse call and
    one gradient call per pairing for all runs."""
    want_grad = any(needs)
    mults = list(plan.multipliers)
    lses = [fused.pair_lse(tensors[p.anchors], tensors[p.candidates], scale, mults, p.exclude, plan.kind)
            for p in plan.pairings]
    with torch.enable_grad():
        leaves = [x.detach().requires_grad_(want_grad) for x in (pos, scale, *lses)]
        totals = torch.func.vmap(functools.partial(_total, plan))(*leaves)
        if not want_grad:
            return (totals.detach() / plan.count,)
        d_pos, d_scale, *d_lses = torch.autograd.grad(totals.sum(), leaves, allow_unused=True)
    grads = [torch.zeros_like(t) for t in tensors]
    grad_scale = torch.zeros_like(scale) if d_scale is None else d_scale
    factors = torch.stack([pos.new_full((), m) for m in plan.multipliers])  # filled on the device, not uploaded
    for pairing, lse, weights in zip(plan.pairings, lses, d_lses):
        if weights is None:
            continue
        ga, gc, gs = fused.pair_grads(tensors[pairing.anchors], tensors[pairing.candidates], scale, mults,
                                      pairing.exclude, plan.kind, lse, weights * factors)
        grads[pairing.anchors] += ga
        grads[pairing.candidates] += gc
        grad_scale = grad_scale + gs
    return (totals.detach() / plan.count, grad_scale / plan.count, d_pos / plan.count,
            *(g / plan.count for g in grads))


def _fused(plan: Plan, pos: Tensor, *tensors: Tensor) -> bool:
    """Whether the fused operations compute the loss: chosen (``fused``), or ``auto`` where they run Triton on a
    GPU's tensors."""
    choice = kernels()
    if choice == "fused":
        return True
    return choice == "auto" and pos.device.type == "cuda" and fused.runs_triton(pos, *tensors,
                                                                               multipliers=plan.multipliers)


def _total(plan: Plan, pos: Tensor, scale: Tensor, *lses: Tensor) -> Tensor:
    """Σ_g Σ_i row_loss(pos_i, lse_gi, s) over the rows of ``pos`` (R,) and the pairings' lse (R, M) (0-dim)."""
    total = pos.new_zeros(())
    for group in plan.groups:
        parts = [lses[i] for i in group]
        pooled = parts[0] if len(parts) == 1 else torch.logsumexp(torch.stack(parts), 0)
        total = total + plan.row_loss(pos, pooled, scale).sum()
    return total


def _rows(plan: Plan, stats, pos: Tensor, scale: Tensor, fresh: slice, want_grad: bool):
    """Σ of the fresh rows' losses; with gradients: ∂/∂pos, ∂/∂scale and ∂/∂lse per pairing (rows of the block)."""
    with torch.enable_grad():
        pos_leaf = pos.detach().requires_grad_(want_grad)
        scale_leaf = scale.detach().requires_grad_(want_grad)
        lse_leaves = [s[3][fresh].detach().requires_grad_(want_grad) for s in stats]
        total = _total(plan, pos_leaf, scale_leaf, *lse_leaves)
        if not want_grad:
            return (total.detach(),)
        outs = torch.autograd.grad(total, [pos_leaf, scale_leaf, *lse_leaves], allow_unused=True)
    # zeros for the block's rows before the fresh ones; None for a pairing no group pools
    per_pairing = [None if g is None else F.pad(g, (0, 0, fresh.start, 0)) for g in outs[2:]]
    return total.detach(), outs[0], pos.new_zeros(()) if outs[1] is None else outs[1], per_pairing


def blocked_loss(plan: Plan, tensors: Sequence[Tensor], pos: Tensor, scale: Tensor | float) -> Tensor:
    """Σ_g Σ_i plan.row_loss(pos_i, lse_gi, s) / plan.count (a scalar) in O(b · N) memory.

    ``tensors``: the (·, d) inputs that ``plan.pairings`` index; ``pos`` (R,): each row's
    positive logit; ``scale``: s, a float or a 0-dim tensor (gradients flow into it).
    """
    if plan.kind not in KIND:
        raise ValueError(f"unknown similarity {plan.kind!r} for the blocked core; allowed: {', '.join(KIND)}")
    scale = scale_tensor(scale, pos)
    return _BlockedLoss.apply(plan, _needs(scale, pos, *tensors), scale, pos, *tensors)[0]


def _needs(*tensors: Tensor) -> tuple[bool, ...]:
    """Which of ``tensors`` autograd will ask a gradient of."""
    return tuple(torch.is_grad_enabled() and t.requires_grad for t in tensors)


def scale_tensor(scale: Tensor | float, like: Tensor) -> Tensor:
    """The scale s as a 0-dim tensor of ``like``'s dtype and device (gradients flow through a tensor); a float is
    filled in on the device rather than copied from the host, which a step recorded as a CUDA graph cannot hold."""
    return scale.to(like.dtype) if isinstance(scale, Tensor) else like.new_full((), scale)


def _reference_blocks(a: Tensor, c: Tensor, exclude: str):
    """(start, anchors block, cᵀ, excluded columns) of one run, in row blocks of the memory budget."""
    cT = c.transpose(0, 1).contiguous()
    size = block_rows(a.shape[0], c.shape[0], a.device, 4, a.element_size())
    for start in range(0, a.shape[0], size):
        rows = min(size, a.shape[0] - start)
        yield start, a[start : start + rows], cT, excluded_columns(exclude, start, rows, c.shape[0], a.device)


def _reference_lse(a: Tensor, c: Tensor, scale: Tensor, multipliers: list[float], exclude: str, kind: str) -> Tensor:
    """:func:`identifiable_cl.losses.fused.pair_lse` by the eager block kernels, run by run."""
    out = a.new_empty(a.shape[0], a.shape[1], len(multipliers))
    for run in range(a.shape[0]):
        for start, block, cT, excluded in _reference_blocks(a[run], c[run], exclude):
            lse = block_forward(block, cT, scale[run], excluded, kind, tuple(multipliers), False)[3]
            out[run, start : start + block.shape[0]] = lse
    return out


def _reference_grads(a: Tensor, c: Tensor, scale: Tensor, multipliers: list[float], exclude: str, kind: str,
                     lse: Tensor, w: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`identifiable_cl.losses.fused.pair_grads` by the eager block kernels, run by run (``lse`` is recomputed
    with each block's own shift)."""
    grad_a, grad_c, grad_s = torch.empty_like(a), torch.empty_like(c), a.new_zeros(a.shape[0])
    for run in range(a.shape[0]):
        grad_cT = torch.zeros_like(c[run].transpose(0, 1))
        for start, block, cT, excluded in _reference_blocks(a[run], c[run], exclude):
            sim, exps, sums, _ = block_forward(block, cT, scale[run], excluded, kind, tuple(multipliers), True)
            rows = slice(start, start + block.shape[0])
            ga, gcT, gs = block_backward(sim, exps, w[run, rows] / sums, scale[run], block, cT, kind)
            grad_a[run, rows] = ga
            grad_cT += gcT
            grad_s[run] += gs
        grad_c[run] = grad_cT.transpose(0, 1)
    return grad_a, grad_c, grad_s


fused.register_reference(_reference_lse, _reference_grads)
