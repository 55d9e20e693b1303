"""The blocked core's two passes as two operations, each one kernel on a GPU: nothing of size rows × candidates
is written to memory.

For K runs' anchors a (K, R, d), candidates c (K, N, d), scales s (K,), multipliers c_m (one or two) and an
exclusion rule, per run:

- :func:`pair_lse` → lse (K, R, M), lse_im = log Σ_{j kept} exp(c_m s sim(a_i, c_j));
- :func:`pair_grads` with w (K, R, M) (w_im = c_m ∂L/∂lse_im) → (∂L/∂a (K, R, d), ∂L/∂c (K, N, d), ∂L/∂s (K,)),
  through ∂L/∂l_ij = Σ_m w_im exp(c_m s sim_ij - lse_im) and l_ij = s sim_ij
  (:mod:`identifiable_cl.losses.blocked` has the equations).

A single run is K = 1; a pack of runs (:mod:`identifiable_cl.solvers.packed`) passes all of its runs in one call.

On CUDA they run the Triton kernels of :mod:`identifiable_cl.losses.triton_pairs` (flash-attention's scheme: the
similarities are recomputed in registers in each pass; about 3 reads of the (R, d) and (N, d) inputs a step).
Elsewhere they compute the same with the eager block kernels, or, inside :func:`interpreted`, run the Triton
kernels on CPU tensors in Triton's interpreter (how they are tested on a machine without a GPU).
Either way each is one registered operation (``torch.ops.icl``), so a count of the step's dispatch
(:mod:`identifiable_cl.benchmarks.step_cost`) sees one launch, as a GPU runs it.

:func:`runs_triton` says whether the Triton kernels compute for given tensors: CUDA (or the interpreter), float32 or
float64, Triton importable, at most two multipliers.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib.util
from typing import Any, Callable, Iterator, Sequence

import torch
from torch import Tensor

EXCLUDE = {"none": 0, "diagonal": 1, "views": 2}
POWERS = {"dot": 0, "l1": 1, "l2": 2, "l3": 3}
BLOCK_R = BLOCK_N = 64
"""Anchors × candidates per program's tile (4,096 pairs, 32 per thread with 4 warps)."""
_INTERPRET: contextvars.ContextVar[bool] = contextvars.ContextVar("icl_triton_interpret", default=False)


@functools.cache
def triton_available() -> bool:
    """Whether Triton can be imported (torch's CUDA wheels bring it on Linux; ``pip install identifiable-cl[gpu]``)."""
    return importlib.util.find_spec("triton") is not None


def runs_triton(*tensors: Tensor, multipliers: Sequence[float] = (1.0,)) -> bool:
    """Whether :func:`pair_lse` and :func:`pair_grads` run the Triton kernels on these tensors (module docstring)."""
    first = tensors[0]
    on_device = first.device.type == "cuda" or (first.device.type == "cpu" and _INTERPRET.get())
    return (on_device and first.dtype in (torch.float32, torch.float64) and len(multipliers) <= 2
            and all(t.dtype == first.dtype and t.device == first.device for t in tensors) and triton_available())


@contextlib.contextmanager
def interpreted() -> Iterator[None]:
    """Within the block, CPU tensors run the Triton kernels in Triton's interpreter. Triton decides when it is
    first imported: ``TRITON_INTERPRET=1`` must be set before (the test suite's conftest sets it where no GPU is)."""
    import triton.language.standard

    if type(triton.language.standard.sum).__name__ != "InterpretedFunction":
        raise RuntimeError("Triton was imported without TRITON_INTERPRET=1, so its kernels compile for a GPU; set "
                           "TRITON_INTERPRET=1 before the process first imports Triton to interpret them on a CPU")
    token = _INTERPRET.set(True)
    try:
        yield
    finally:
        _INTERPRET.reset(token)


def _kernels():
    from identifiable_cl.losses import triton_pairs

    return triton_pairs


def _launch_args(a: Tensor, c: Tensor, multipliers: Sequence[float], exclude: str, kind: str) -> tuple:
    c1 = float(multipliers[0])
    c2 = float(multipliers[1]) if len(multipliers) > 1 else 0.0
    return (a.shape[1], c.shape[1], a.shape[2], c1, c2), dict(
        M=len(multipliers), P=POWERS[kind], EXCLUDE=EXCLUDE[exclude], BLOCK_R=BLOCK_R, BLOCK_N=BLOCK_N)


_REFERENCE: dict[str, Callable[..., Any]] = {}
"""The operations' eager implementations, where Triton does not run (``lse``, ``grads``: same arguments and results
as :func:`pair_lse` and :func:`pair_grads`), registered by :mod:`identifiable_cl.losses.blocked` from its block
kernels (:func:`register_reference`)."""


def register_reference(lse: Callable[..., Tensor], grads: Callable[..., tuple[Tensor, Tensor, Tensor]]) -> None:
    """Register the eager implementations of :func:`pair_lse` and :func:`pair_grads`."""
    _REFERENCE.update(lse=lse, grads=grads)


@torch.library.custom_op("icl::pair_lse", mutates_args=())
def pair_lse(a: Tensor, c: Tensor, scale: Tensor, multipliers: list[float], exclude: str, kind: str) -> Tensor:
    """lse (K, R, M) of anchors a (K, R, d) against candidates c (K, N, d) at scales (K,) (module docstring)."""
    a, c, scale = a.contiguous(), c.contiguous(), scale.to(a.dtype).contiguous()
    if runs_triton(a, c, multipliers=multipliers):
        out = a.new_empty(a.shape[0], a.shape[1], len(multipliers))
        sizes, consts = _launch_args(a, c, multipliers, exclude, kind)
        _kernels().lse_kernel[(-(-a.shape[1] // BLOCK_R), a.shape[0])](a, c, scale, out, *sizes, **consts)
        return out
    return _REFERENCE["lse"](a, c, scale, multipliers, exclude, kind)


@torch.library.custom_op("icl::pair_grads", mutates_args=())
def pair_grads(a: Tensor, c: Tensor, scale: Tensor, multipliers: list[float], exclude: str, kind: str,
               lse: Tensor, w: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(∂L/∂a (K, R, d), ∂L/∂c (K, N, d), ∂L/∂s (K,)) from lse (K, R, M) and the row weights w (K, R, M) (module
    docstring)."""
    a, c, scale = a.contiguous(), c.contiguous(), scale.to(a.dtype).contiguous()
    lse, w = lse.contiguous(), w.contiguous()
    if runs_triton(a, c, lse, w, multipliers=multipliers):
        grad_a, grad_c = torch.empty_like(a), torch.empty_like(c)
        kernels = _kernels()
        scale_rows = a.new_empty(a.shape[:2])
        sizes, consts = _launch_args(a, c, multipliers, exclude, kind)
        consts["BLOCK_D"] = max(2, 1 << (a.shape[2] - 1).bit_length())
        runs = a.shape[0]
        kernels.row_grad_kernel[(-(-a.shape[1] // BLOCK_R), runs)](a, c, scale, lse, w, grad_a, scale_rows,
                                                                   *sizes, **consts)
        kernels.column_grad_kernel[(-(-c.shape[1] // BLOCK_N), runs)](a, c, scale, lse, w, grad_c, *sizes, **consts)
        return grad_a, grad_c, scale_rows.sum(1)
    return _REFERENCE["grads"](a, c, scale, multipliers, exclude, kind, lse, w)
