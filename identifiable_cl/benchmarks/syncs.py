"""Host synchronisations counted on any device, the CPU included.

On a GPU the host waits for the device whenever a value computed there decides what the host does next:
a scalar read (``.item()``, ``float(t)``, ``bool(t)``, ``if t:``, all reaching
``aten._local_scalar_dense``) and an operation whose output shape depends on the data (boolean-mask
indexing, ``nonzero``: torch tags them ``dynamic_output_shape`` or ``data_dependent_output``). A dispatch
mode sees the same operations on the CPU, so a CPU test can count what would stall a GPU.

:func:`host_syncs` counts those the package's own code (``dgp`` and ``identifiable_cl``) issues, except two
kinds that cost a GPU nothing: torch's optimizers reading their host-resident step counters, and the loss's C
kernels (:mod:`identifiable_cl.losses.native`), which run on the CPU only.
"""

from __future__ import annotations

import traceback
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

OWN = tuple(str(Path(__file__).resolve().parents[2] / package) for package in ("dgp", "identifiable_cl"))
"""The folders of the package's own code, whose calls are counted."""
HARMLESS = (str(Path(torch.optim.__file__).parent), str(Path(__file__).resolve().parents[1] / "losses" / "native.py"))
"""Code whose scalar reads cost a GPU nothing (see the module docstring)."""
SCALAR_READ = torch.ops.aten._local_scalar_dense.default


def _synchronises(func: Any) -> bool:
    tags = getattr(func, "tags", ())
    return func is SCALAR_READ or torch.Tag.dynamic_output_shape in tags or torch.Tag.data_dependent_output in tags


def _uploads(func: Any) -> bool:
    return func is torch.ops.aten.lift_fresh.default


class _Counting(TorchDispatchMode):
    def __init__(self, counted: Callable[[Any], bool]) -> None:
        super().__init__()
        self.counted = counted
        self.where: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[override]
        if self.counted(func):
            stack = traceback.extract_stack()[:-1]
            own = [i for i, f in enumerate(stack) if f.filename.startswith(OWN) and f.filename != __file__]
            if own and not any(f.filename.startswith(HARMLESS) for f in stack[own[0]:]):
                frame = stack[own[-1]]
                self.where[f"{Path(frame.filename).name}:{frame.lineno} {frame.name} ({func.__name__})"] += 1
        return func(*args, **(kwargs or {}))


def host_syncs(fn: Callable[[], Any]) -> Counter[str]:
    """Run ``fn`` once; the host synchronisations the package's own code issued in it, by the innermost line of
    that code (``file:line function (operation)``) with their count."""
    with _Counting(_synchronises) as mode:
        fn()
    return mode.where


def host_uploads(fn: Callable[[], Any]) -> Counter[str]:
    """Run ``fn`` once; the tensors the package's own code made from host data in it (``torch.tensor`` or
    ``torch.as_tensor`` of Python numbers, ``aten.lift_fresh``), by line as :func:`host_syncs` counts. On a GPU
    each is a copy from the host, which a step recorded as a CUDA graph cannot hold (a Python number passed to an
    operation as a scalar is none: it travels with the kernel)."""
    with _Counting(_uploads) as mode:
        fn()
    return mode.where
