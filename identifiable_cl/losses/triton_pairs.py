"""Triton kernels of :mod:`identifiable_cl.losses.fused`: the blocked core's row statistics and gradients without
any (rows × candidates) buffer in memory.

Each program holds a tile of ``BLOCK_R`` anchors × ``BLOCK_N`` candidates in registers: it forms the similarities
coordinate by coordinate (in the order of :func:`identifiable_cl.losses.blocked.similarity`), and

- :func:`lse_kernel` keeps a running maximum and sum per row and multiplier (one pass over the candidates) and
  writes lse_im = log Σ_j exp(c_m s sim_ij) over the kept pairs;
- :func:`row_grad_kernel` recomputes the tile, forms ∂L/∂l_ij = Σ_m w_im exp(c_m s sim_ij - lse_im) and adds
  Σ_j s ∂L/∂l_ij ∂sim_ij/∂a_i to the anchors' gradient and Σ_j ∂L/∂l_ij sim_ij to the row's part of ∂L/∂s;
- :func:`column_grad_kernel` does the same per tile of candidates, summing over the anchors: Σ_i s ∂L/∂l_ij
  ∂sim_ij/∂c_j.

Similarity ``P``: 0 the dot product aᵀc, else -Σ_k |a_k - c_k|^P. Exclusion ``EXCLUDE``: 0 none, 1 the diagonal
(j = i), 2 the other view (j ≡ i mod N/2). Inputs carry a leading run axis: a (K, R, D), c (K, N, D), the scale
(K,), lse and w (K, R, M), each contiguous, of one dtype (float32 or float64); the grid's second axis is the run.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _power(x, P: tl.constexpr):
    if P == 1:
        return tl.abs(x)
    elif P == 2:
        return x * x
    else:
        return x * x * tl.abs(x)


@triton.jit
def _slope(x, P: tl.constexpr):
    """d|x|^P/dx."""
    if P == 1:
        return tl.where(x > 0, 1.0, tl.where(x < 0, -1.0, 0.0)).to(x.dtype)
    elif P == 2:
        return 2 * x
    else:
        return 3 * x * tl.abs(x)


@triton.jit
def _similarity(a_ptr, c_ptr, rows, cols, row_ok, col_ok, D, P: tl.constexpr,
                BLOCK_R: tl.constexpr, BLOCK_N: tl.constexpr):
    """sim (BLOCK_R, BLOCK_N) of the tile, summed over the coordinates in order."""
    total = tl.zeros([BLOCK_R, BLOCK_N], dtype=a_ptr.dtype.element_ty)
    for k in range(D):
        ak = tl.load(a_ptr + rows * D + k, mask=row_ok, other=0.0)
        ck = tl.load(c_ptr + cols * D + k, mask=col_ok, other=0.0)
        if P == 0:
            total += ak[:, None] * ck[None, :]
        else:
            total += _power(ak[:, None] - ck[None, :], P)
    if P == 0:
        return total
    return -total


@triton.jit
def _run(a_ptr, c_ptr, scale_ptr, lse_ptr, R, N, D, M: tl.constexpr):
    """The pointers moved to the run of the grid's second axis."""
    run = tl.program_id(1).to(tl.int64)
    return a_ptr + run * R * D, c_ptr + run * N * D, scale_ptr + run, lse_ptr + run * R * M


@triton.jit
def _kept(rows, cols, row_ok, col_ok, N, EXCLUDE: tl.constexpr):
    """(BLOCK_R, BLOCK_N) True where the pair is in range and not excluded."""
    keep = row_ok[:, None] & col_ok[None, :]
    if EXCLUDE == 1:
        keep = keep & (rows[:, None] != cols[None, :])
    elif EXCLUDE == 2:
        half = N // 2
        keep = keep & ((rows[:, None] % half) != (cols[None, :] % half))
    return keep


@triton.jit
def _tile(a_ptr, c_ptr, rows, cols, R, N, D, P: tl.constexpr, EXCLUDE: tl.constexpr,
          BLOCK_R: tl.constexpr, BLOCK_N: tl.constexpr):
    """(sim, keep) of the tile of ``rows`` × ``cols``: the similarities and which pairs count."""
    row_ok, col_ok = rows < R, cols < N
    sim = _similarity(a_ptr, c_ptr, rows, cols, row_ok, col_ok, D, P, BLOCK_R, BLOCK_N)
    return sim, _kept(rows, cols, row_ok, col_ok, N, EXCLUDE)


@triton.jit
def _accumulate(m, t, x):
    """Running (maximum, Σ exp(x - maximum)) per row after the tile ``x`` (-inf where not kept)."""
    top = tl.maximum(m, tl.max(x, 1))
    shift = tl.where(top == float("-inf"), 0.0, top)
    t = t * tl.exp(m - shift) + tl.sum(tl.exp(x - shift[:, None]), 1)
    return top, t


@triton.jit
def lse_kernel(a_ptr, c_ptr, scale_ptr, lse_ptr, R, N, D, c1, c2,
               M: tl.constexpr, P: tl.constexpr, EXCLUDE: tl.constexpr,
               BLOCK_R: tl.constexpr, BLOCK_N: tl.constexpr):
    a_ptr, c_ptr, scale_ptr, lse_ptr = _run(a_ptr, c_ptr, scale_ptr, lse_ptr, R, N, D, M)
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    row_ok = rows < R
    s = tl.load(scale_ptr)
    dtype = a_ptr.dtype.element_ty
    m1 = tl.full([BLOCK_R], float("-inf"), dtype)
    t1 = tl.zeros([BLOCK_R], dtype)
    m2 = tl.full([BLOCK_R], float("-inf"), dtype)
    t2 = tl.zeros([BLOCK_R], dtype)
    for start in range(0, N, BLOCK_N):
        sim, keep = _tile(a_ptr, c_ptr, rows, start + tl.arange(0, BLOCK_N), R, N, D, P, EXCLUDE, BLOCK_R, BLOCK_N)
        m1, t1 = _accumulate(m1, t1, tl.where(keep, sim * (s * c1), float("-inf")))
        if M == 2:
            m2, t2 = _accumulate(m2, t2, tl.where(keep, sim * (s * c2), float("-inf")))
    tl.store(lse_ptr + rows * M, m1 + tl.log(t1), mask=row_ok)
    if M == 2:
        tl.store(lse_ptr + rows * M + 1, m2 + tl.log(t2), mask=row_ok)


@triton.jit
def _dlogits(sim, keep, s, lse_ptr, w_ptr, rows, row_ok, c1, c2, M: tl.constexpr):
    """∂L/∂l (BLOCK_R, BLOCK_N) = Σ_m w_im exp(c_m s sim_ij - lse_im), 0 where not kept."""
    lse1 = tl.load(lse_ptr + rows * M, mask=row_ok, other=0.0)
    w1 = tl.load(w_ptr + rows * M, mask=row_ok, other=0.0)
    d = w1[:, None] * tl.exp(sim * (s * c1) - lse1[:, None])
    if M == 2:
        lse2 = tl.load(lse_ptr + rows * M + 1, mask=row_ok, other=0.0)
        w2 = tl.load(w_ptr + rows * M + 1, mask=row_ok, other=0.0)
        d += w2[:, None] * tl.exp(sim * (s * c2) - lse2[:, None])
    return tl.where(keep, d, 0.0)


@triton.jit
def row_grad_kernel(a_ptr, c_ptr, scale_ptr, lse_ptr, w_ptr, grad_ptr, scale_grad_ptr, R, N, D, c1, c2,
                    M: tl.constexpr, P: tl.constexpr, EXCLUDE: tl.constexpr,
                    BLOCK_R: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    a_ptr, c_ptr, scale_ptr, lse_ptr = _run(a_ptr, c_ptr, scale_ptr, lse_ptr, R, N, D, M)
    run = tl.program_id(1).to(tl.int64)
    w_ptr += run * R * M
    grad_ptr += run * R * D
    scale_grad_ptr += run * R
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    row_ok = rows < R
    dims = tl.arange(0, BLOCK_D)
    s = tl.load(scale_ptr)
    dtype = a_ptr.dtype.element_ty
    grad = tl.zeros([BLOCK_R, BLOCK_D], dtype)
    scale_part = tl.zeros([BLOCK_R], dtype)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        col_ok = cols < N
        sim, keep = _tile(a_ptr, c_ptr, rows, cols, R, N, D, P, EXCLUDE, BLOCK_R, BLOCK_N)
        d = _dlogits(sim, keep, s, lse_ptr, w_ptr, rows, row_ok, c1, c2, M)
        scale_part += tl.sum(d * sim, 1)
        g = d * s
        for k in range(D):
            ck = tl.load(c_ptr + cols * D + k, mask=col_ok, other=0.0)
            if P == 0:
                part = tl.sum(g * ck[None, :], 1)
            else:
                ak = tl.load(a_ptr + rows * D + k, mask=row_ok, other=0.0)
                part = -tl.sum(g * _slope(ak[:, None] - ck[None, :], P), 1)
            grad += tl.where(dims[None, :] == k, part[:, None], 0.0)
    tl.store(grad_ptr + rows[:, None] * D + dims[None, :], grad, mask=row_ok[:, None] & (dims[None, :] < D))
    tl.store(scale_grad_ptr + rows, scale_part, mask=row_ok)


@triton.jit
def column_grad_kernel(a_ptr, c_ptr, scale_ptr, lse_ptr, w_ptr, grad_ptr, R, N, D, c1, c2,
                       M: tl.constexpr, P: tl.constexpr, EXCLUDE: tl.constexpr,
                       BLOCK_R: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    a_ptr, c_ptr, scale_ptr, lse_ptr = _run(a_ptr, c_ptr, scale_ptr, lse_ptr, R, N, D, M)
    run = tl.program_id(1).to(tl.int64)
    w_ptr += run * R * M
    grad_ptr += run * N * D
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < N
    dims = tl.arange(0, BLOCK_D)
    s = tl.load(scale_ptr)
    grad = tl.zeros([BLOCK_N, BLOCK_D], a_ptr.dtype.element_ty)
    for start in range(0, R, BLOCK_R):
        rows = start + tl.arange(0, BLOCK_R)
        row_ok = rows < R
        sim, keep = _tile(a_ptr, c_ptr, rows, cols, R, N, D, P, EXCLUDE, BLOCK_R, BLOCK_N)
        g = _dlogits(sim, keep, s, lse_ptr, w_ptr, rows, row_ok, c1, c2, M) * s
        for k in range(D):
            ak = tl.load(a_ptr + rows * D + k, mask=row_ok, other=0.0)
            if P == 0:
                part = tl.sum(g * ak[:, None], 0)
            else:
                ck = tl.load(c_ptr + cols * D + k, mask=col_ok, other=0.0)
                part = tl.sum(g * _slope(ak[:, None] - ck[None, :], P), 0)
            grad += tl.where(dims[None, :] == k, part[:, None], 0.0)
    tl.store(grad_ptr + cols[:, None] * D + dims[None, :], grad, mask=col_ok[:, None] & (dims[None, :] < D))
