"""Linear layers whose float32 products on a CPU may run through oneDNN instead of torch's BLAS.

torch computes a float32 ``nn.Linear`` on a CPU with its BLAS (MKL in the x86 wheels), which leaves
the 512-bit units of AMD CPUs with AVX-512 unused; oneDNN (the library torch already uses for bf16)
uses them (``icl bench --only precision`` prints the training step with either backend; docs/benchmarks.md
has the figures).

``train.matmul`` chooses the backend of :class:`Linear` (the encoder's layers):

- ``blas``: torch's own ``F.linear``.
- ``onednn``: the three products of a layer, forward and backward, through oneDNN's matrix product
  (``torch.ops.mkldnn._linear_pointwise``); ∂b = Σ_rows g.
- ``auto`` (default): ``onednn`` on AMD CPUs with AVX-512 where torch has the oneDNN operator,
  ``blas`` elsewhere.

The backend changes only the order in which float32 sums are rounded (about 1e-7 relative, as
between two CPUs), never what is computed. Inputs that are not 2-D float32 CPU tensors, layers under
autocast (bf16) and the batched encoder pass of packed runs (:func:`blas_only`) always use
``F.linear``. The oneDNN backward has no derivative of its own: a second derivative through it is
an error (use ``blas`` for those).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from pathlib import Path
from typing import Iterator

import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable
from torch.nn import functional as F

from identifiable_cl.config import MATMUL_BACKENDS

_BLAS_ONLY: contextvars.ContextVar[bool] = contextvars.ContextVar("icl_blas_only", default=False)


def _operator():
    """oneDNN's ``_linear_pointwise`` (x, W, b, "none", [], "") -> x Wᵀ + b, or None where torch lacks it."""
    try:
        return torch.ops.mkldnn._linear_pointwise if torch.backends.mkldnn.is_available() else None
    except (AttributeError, RuntimeError):
        return None


def prefers_onednn(cpuinfo: str) -> bool:
    """Whether ``auto`` picks oneDNN on a CPU with this ``/proc/cpuinfo`` text: an AMD CPU with AVX-512."""
    first = cpuinfo.split("\n\n", 1)[0]
    fields = {key.strip(): value for key, value in (line.split(":", 1) for line in first.splitlines() if ":" in line)}
    return fields.get("vendor_id", "").strip() == "AuthenticAMD" and "avx512f" in fields.get("flags", "").split()


@functools.lru_cache(maxsize=None)
def _auto() -> str:
    try:
        fast = _operator() is not None and prefers_onednn(Path("/proc/cpuinfo").read_text())
    except OSError:
        fast = False
    return "onednn" if fast else "blas"


def resolve(backend: str) -> str:
    """The backend ``backend`` stands for on this machine: ``blas`` or ``onednn``.

    ``onednn`` where torch lacks the operator is a ValueError naming ``train.matmul``.
    """
    if backend not in MATMUL_BACKENDS:
        raise ValueError(f"train.matmul={backend!r} is invalid: allowed: {', '.join(MATMUL_BACKENDS)}")
    if backend == "auto":
        return _auto()
    if backend == "onednn" and _operator() is None:
        raise ValueError("train.matmul='onednn' is invalid here: this torch has no oneDNN (mkldnn) CPU "
                         "operator; use auto or blas")
    return backend


@contextlib.contextmanager
def blas_only() -> Iterator[None]:
    """Within the block every :class:`Linear` uses ``F.linear`` (e.g. under ``torch.func.vmap``)."""
    token = _BLAS_ONLY.set(True)
    try:
        yield
    finally:
        _BLAS_ONLY.reset(token)


@contextlib.contextmanager
def tensor_float32(enabled: bool) -> Iterator[None]:
    """Within the block, when ``enabled``, CUDA's float32 matrix products and convolutions run on its tensor cores
    as TensorFloat-32 (inputs rounded to 10-bit mantissas, sums in float32: ``train.precision: tf32``); the flags
    are restored after. A CPU computes them in float32 either way."""
    if not enabled:
        yield
        return
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def _autocast_on_cpu() -> bool:
    try:
        return torch.is_autocast_enabled("cpu")
    except TypeError:  # torch < 2.4
        return torch.is_autocast_cpu_enabled()


class _OneDNNLinear(torch.autograd.Function):
    """y = x Wᵀ + b for x (N, in), W (out, in), b (out,) or None; backward ∂x = g W, ∂W = gᵀ x, ∂b = Σ_n g."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:  # type: ignore[override]
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return _operator()(x, weight, bias, "none", [], "")

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        x, weight = ctx.saved_tensors
        product = _operator()
        grad = grad.contiguous()
        needs = ctx.needs_input_grad
        grad_x = product(grad, weight.t(), None, "none", [], "") if needs[0] else None
        grad_w = product(grad.t(), x.t(), None, "none", [], "") if needs[1] else None
        grad_b = grad.sum(0) if ctx.has_bias and needs[2] else None
        return grad_x, grad_w, grad_b


class Linear(nn.Linear):
    """``nn.Linear`` (same parameters and state dict) whose float32 CPU products use ``backend``
    (``auto``, ``blas`` or ``onednn``; see the module docstring)."""

    backend: str = "auto"

    def forward(self, x: Tensor) -> Tensor:
        if self._onednn(x):
            return _OneDNNLinear.apply(x, self.weight, self.bias)
        return F.linear(x, self.weight, self.bias)

    def _onednn(self, x: Tensor) -> bool:
        return (
            x.dim() == 2
            and x.dtype == torch.float32
            and self.weight.dtype == torch.float32
            and x.device.type == "cpu"
            and not _autocast_on_cpu()
            and not _BLAS_ONLY.get()
            and resolve(self.backend) == "onednn"
        )


def use_backend(module: nn.Module, backend: str) -> str:
    """Set ``backend`` on every :class:`Linear` inside ``module``; returns what it resolves to here."""
    resolved = resolve(backend)
    for layer in module.modules():
        if isinstance(layer, Linear):
            layer.backend = backend
    return resolved
