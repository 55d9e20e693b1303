"""Synthetic data-generating processes for identifiability studies.

Standalone: this package never imports ``identifiable_cl``. Build a process
from a plain config dict with :func:`build_process`.

The names below load on first use (with every built-in component registered), so that importing a
torch-free part of the package (:mod:`dgp.defaults`, :mod:`dgp.checks`, :mod:`dgp.registry`) does
not import torch.
"""

from __future__ import annotations

import importlib
from typing import Any

from dgp.defaults import BUILTIN_MODULES

_HOMES = {
    "Batch": "dgp.process", "Process": "dgp.process", "build_process": "dgp.process",
    "check_process": "dgp.process", "load_process": "dgp.process",
    "SPACES": "dgp.spaces", "MARGINALS": "dgp.marginals", "CONDITIONALS": "dgp.conditionals",
    "NEGATIVES": "dgp.negatives", "MIXINGS": "dgp.mixing", "VIEWS": "dgp.views",
}
__all__ = list(_HOMES)


def load_builtins() -> None:
    """Import every module that registers a built-in component."""
    for module in BUILTIN_MODULES:
        importlib.import_module(module)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'dgp' has no attribute {name!r}")
    load_builtins()
    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
