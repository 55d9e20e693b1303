"""The defaults of a process config, importable without torch (a config's schema and ``icl train --help`` read
them before anything is built)."""

from __future__ import annotations

from typing import Any

DEFAULT_CONFIG: dict[str, Any] = {
    "dim": 10,
    "dtype": "float32",
    "space": {"name": "box", "low": 0.0, "high": 1.0},
    "marginal": {"name": "uniform"},
    "conditional": {"name": "laplace", "scale": 0.1},
    "negatives": {"name": "none"},
    "mixing": {"name": "mlp"},
    "sampler": 2,
}
"""Z21's box setting: uniform latents in [0, 1]^10, Laplace(0.1) positives, a 3-layer invertible MLP.

It is also the default of a run (``identifiable_cl.config.DEFAULTS``)."""

SINGLE_VIEW: dict[str, Any] = {"name": "single"}
"""The default views component: one view, x = g(z)."""

DTYPE_NAMES = ("float32", "float64")
"""The floating types a process computes in (``dgp.dtype``)."""

BUILTIN_MODULES = ("dgp.spaces", "dgp.marginals", "dgp.conditionals", "dgp.content_style", "dgp.ar1", "dgp.partial",
                   "dgp.segments", "dgp.negatives", "dgp.mixing", "dgp.views")
"""The modules that register the package's own components; a registry imports them when first queried."""

SAMPLERS = (1, 2)
"""The versions of the process's rejection samplers (``dgp.sampler``, :mod:`dgp.blocks`): 1, rounds with a host
loop; 2, fixed blocks that never make a GPU wait. Both draw exactly from the same laws; their draws differ."""
SAMPLER = 2
"""The version new processes draw with; a saved process that records none drew with version 1."""
