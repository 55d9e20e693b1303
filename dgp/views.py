"""Views of a process: which latent blocks each observation sees, and through which mixing.

A process has one view unless its ``views`` component says otherwise (``single``, the default: x = g(z),
x+ = g(z+)). With V >= 2 views (``subsets``), view 1 observes the anchor's latent z and each view v >= 2 a
positive z_v ~ p(z_v | z) of its own, each through a frozen invertible mixing of its own (or one shared):
x_v = f_v(z_v[S_v]), with S_v the latent dimensions of the blocks view v sees. Daunhawer et al. (ICLR 2023,
"Identifiability Results for Multimodal Contrastive Learning", Sec. 5.1) take z = (c, s, m_1, m_2) with
S_1 = (c, s, m_1) and S_2 = (c, s, m_2): x_1 = f_1(c, s, m_1), x_2 = f_2(c, s̃, m_2); with one shared mixing
and no modality-specific blocks it is the multi-view setting.

A views component is registered in :data:`VIEWS` and built as ``cls(blocks, dim, **options)`` from the
process's named latent blocks (name -> dimensions) and its latent dimension n. It exposes ``dims`` (per
view, the latent dimensions it sees, in order) and ``shared_mixing`` (one mixing for every view), and
``describe()``. The process draws the mixings: view 1's from the stream ``dgp.mixing`` (the one a
single-view process uses), view v's from ``dgp.mixing.view<v>``.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from torch import nn

from dgp import checks
from dgp.defaults import BUILTIN_MODULES
from dgp.registry import Registry

VIEWS = Registry("views", "dgp.views", builtins=BUILTIN_MODULES)
"""Views components by name."""

@VIEWS.register("single")
class SingleView(nn.Module):
    """One view of every latent dimension: x = g(z), x+ = g(z+) (every process without views)."""

    shared_mixing = False

    def __init__(self, blocks: Mapping[str, Sequence[int]], dim: int):
        super().__init__()
        self.dims = [list(range(dim))]

    def describe(self) -> str:
        return "one view"


@VIEWS.register("subsets")
class Subsets(nn.Module):
    """V >= 2 views, view v seeing the latent blocks ``latents[v]`` (names of the process's blocks, in the
    order they enter its mixing), through a mixing of its own or, with ``shared_mixing``, one for all."""

    OPTION_DOCS = {
        "latents": "per view, the latent blocks it sees, e.g. [[content, style, m1], [content, style, m2]]",
        "shared_mixing": "one mixing for every view (each must see as many dimensions), else one drawn per view",
    }

    def __init__(self, blocks: Mapping[str, Sequence[int]], dim: int, *, latents: Any = None,
                 shared_mixing: bool = False):
        super().__init__()
        self.shared_mixing = checks.boolean("shared_mixing", shared_mixing)
        if not blocks:
            checks.fail("latents", latents, "views see named latent blocks, and this process's marginal and "
                        "conditional name none: use a model with blocks (e.g. content_style)")
        names = ", ".join(blocks)
        if not isinstance(latents, list) or len(latents) < 2 or not all(isinstance(v, list) and v for v in latents):
            checks.fail("latents", latents, f"a list of at least 2 views, each a non-empty list of block names ({names})")
        self.dims = []
        for v, seen in enumerate(latents):
            for name in seen:
                if not isinstance(name, str) or name not in blocks:
                    checks.fail("latents", latents, f"view {v + 1} names the block {name!r}; blocks: {names}")
            if len(set(seen)) != len(seen):
                checks.fail("latents", latents, f"view {v + 1} names a block twice")
            self.dims.append([i for name in seen for i in blocks[name]])
        self.latents = [list(v) for v in latents]
        if self.shared_mixing and len({len(d) for d in self.dims}) > 1:
            checks.fail("shared_mixing", True, "one shared mixing needs views of one size; these see "
                        f"{', '.join(str(len(d)) for d in self.dims)} dimensions")

    def describe(self) -> str:
        seen = "; ".join(f"view {v + 1} sees ({', '.join(names)})" for v, names in enumerate(self.latents))
        mixing = "one shared mixing" if self.shared_mixing else "a mixing per view"
        return f"{len(self.dims)} views, {mixing}: {seen}"
