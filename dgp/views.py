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
view, the latent dimensions it sees, in order), ``shared_mixing`` (one mixing for every view) and
``describe()``, and may expose ``contrasted``, ``selection`` and ``objective`` (below). The process draws the
mixings: view 1's from the stream ``dgp.mixing`` (the one a single-view process uses), view v's from
``dgp.mixing.view<v>``.

Yao, Xu, Lachapelle, Magliacane, Taslakian, Martius, von Kügelgen & Locatello (ICLR 2024, "Multi-View Causal
Representation Learning with Partial Observability") contrast subsets of views, each on the block its views share:
``contrast`` lists the subsets (``contrasted``: each with its shared latent dimensions I_s = ∩_{v∈s} S_v),
``selection`` how the learner finds the encoding coordinates that carry I_s and ``objective`` how it contrasts the
views of a subset on them (:mod:`identifiable_cl.solvers.subsets`). The process draws nothing for them: they
describe what the views share, and the learner reads them.
"""

from __future__ import annotations

import itertools
from typing import Any, Mapping, Sequence


from dgp import checks
from dgp.base import VIEWS_CONTRACT, Views
from dgp.defaults import BUILTIN_MODULES
from dgp.registry import Registry

VIEWS = Registry("views", "dgp.views", builtins=BUILTIN_MODULES, contract=VIEWS_CONTRACT)
"""Views components by name."""

SELECTIONS = ("ground_truth", "gumbel", "concat")
"""How the learner selects the encoding coordinates of a contrasted subset's shared block (``selection``)."""
OBJECTIVES = ("joint", "pairs")
"""How the learner contrasts a subset's views on their selected coordinates (``objective``): ``joint``, the views
together (positives along consecutive views, negatives summed over the views: Yao et al.'s code); ``pairs``, the
mean of the pair loss over every ordered pair of views."""
MAX_VIEWS = 64
"""The most views a process may have: a step's loss has V(V - 1) terms, and the check builds a mixing per view."""
MAX_SUBSETS = 1024
"""The most subsets of views a step may contrast (``contrast``)."""

@VIEWS.register("single")
class SingleView(Views):
    """One view of every latent dimension: x = g(z), x+ = g(z+) (every process without views)."""

    shared_mixing = False

    def __init__(self, blocks: Mapping[str, Sequence[int]], dim: int):
        super().__init__()
        self.dims = [list(range(dim))]

    def describe(self) -> str:
        return "one view"


@VIEWS.register("subsets")
class Subsets(Views):
    """V >= 2 views, view v seeing the latent blocks ``latents[v]`` (names of the process's blocks, in the
    order they enter its mixing), through a mixing of its own or, with ``shared_mixing``, one for all.

    ``contrasted``: None, or with ``contrast`` the subsets the loss contrasts, each as (its views, 0-based
    ascending; the latent dimensions they share, :meth:`shared`); ``selection`` and ``objective``: None, or with
    ``contrast`` one of :data:`SELECTIONS`, resp. :data:`OBJECTIVES`."""

    OPTION_DOCS = {
        "latents": "per view, the latent blocks it sees, e.g. [[content, style, m1], [content, style, m2]]",
        "shared_mixing": "one mixing for every view (each must see as many dimensions), else one drawn per view",
        "contrast": "null: the loss over every pair of views on their whole encodings (Daunhawer et al. 2023); all: "
                    "over every subset of >= 2 views sharing a latent, each on the coordinates of its shared block "
                    "(Yao et al. 2024); or a list of such subsets of view numbers, e.g. [[1, 2], [1, 2, 3, 4]]",
        "selection": "with contrast, the coordinates of a subset's shared block in each view's encoding: "
                     "ground_truth (the default: coordinate j of view v's encoding stands for the j-th latent "
                     "dimension it sees), gumbel (the top k of the batch-mean encoding plus Gumbel noise) or concat "
                     "(the encoding split into one run of coordinates per subset)",
        "objective": "with contrast, how a subset's views are contrasted on their selected coordinates: joint (the "
                     "default: InfoNCE with the positive summed over consecutive views and the negatives over every "
                     "view, Yao et al.'s LpSimCLRLoss; needs loss.negatives: independent) or pairs (the mean of "
                     "InfoNCE over every ordered pair of views)",
    }

    def __init__(self, blocks: Mapping[str, Sequence[int]], dim: int, *, latents: Any = None,
                 shared_mixing: bool = False, contrast: Any = None, selection: str | None = None,
                 objective: str | None = None):
        super().__init__()
        self.shared_mixing = checks.boolean("shared_mixing", shared_mixing)
        if not blocks:
            checks.fail("latents", latents, "views see named latent blocks, and this process's marginal and "
                        "conditional name none: use a model with blocks (e.g. content_style)")
        names = ", ".join(blocks)
        if not isinstance(latents, list) or len(latents) < 2 or not all(isinstance(v, list) and v for v in latents):
            checks.fail("latents", latents, f"a list of at least 2 views, each a non-empty list of block names ({names})")
        if len(latents) > MAX_VIEWS:
            checks.fail("latents", f"a list of {len(latents)} views", f"at most {MAX_VIEWS} views: a step contrasts "
                        "every ordered pair of them, V(V - 1) loss terms, and a run draws a mixing per view")
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
        self.contrasted = None if contrast is None else self._contrasted(contrast)
        if selection is not None and contrast is None:
            checks.fail("selection", selection, "selects the coordinates of contrasted subsets: set contrast too")
        self.selection = None if contrast is None else checks.choice("selection", selection or SELECTIONS[0], SELECTIONS)
        if objective is not None and contrast is None:
            checks.fail("objective", objective, "contrasts the views of contrasted subsets: set contrast too")
        self.objective = (None if contrast is None
                          else checks.choice("objective", objective or OBJECTIVES[0], OBJECTIVES))

    def shared(self, views: Sequence[int]) -> list[int]:
        """The latent dimensions every view of ``views`` (0-based) sees, ascending: I_s = ∩_{v∈s} S_v."""
        return sorted(set.intersection(*(set(self.dims[v]) for v in views)))

    def _contrasted(self, contrast: Any) -> list[tuple[tuple[int, ...], list[int]]]:
        """``contrast`` checked, as (views of the subset, 0-based; their shared dimensions) per subset: ``all``
        gives every subset of >= 2 views with a non-empty shared block, by size, then in order."""
        count = len(self.dims)
        if contrast == "all" and 2**count - count - 1 > MAX_SUBSETS:
            checks.fail("contrast", contrast, f"{count} views have {2**count - count - 1:,} subsets of >= 2, more than "
                        f"the {MAX_SUBSETS:,} a step may contrast: list the subsets to contrast")
        if contrast == "all":
            subsets = [s for r in range(2, count + 1) for s in itertools.combinations(range(count), r) if self.shared(s)]
            if not subsets:
                checks.fail("contrast", contrast, "no two views share a latent block")
            return [(s, self.shared(s)) for s in subsets]
        allowed = f"null, all, or a list of subsets of the view numbers 1..{count}, each of >= 2 views sharing a latent"
        if not isinstance(contrast, list) or not contrast:
            checks.fail("contrast", contrast, allowed)
        if len(contrast) > MAX_SUBSETS:
            checks.fail("contrast", f"a list of {len(contrast):,} subsets", f"at most {MAX_SUBSETS:,}: a step "
                        "contrasts each of them")
        out = []
        for subset in contrast:
            if (not isinstance(subset, list) or len(subset) < 2 or len(set(subset)) != len(subset)
                    or any(isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= count for v in subset)):
                checks.fail("contrast", contrast, f"{subset!r} is not a subset of >= 2 distinct view numbers 1..{count}")
            views = tuple(sorted(v - 1 for v in subset))
            if any(views == seen for seen, _ in out):
                checks.fail("contrast", contrast, f"{subset!r} is listed twice")
            if not self.shared(views):
                checks.fail("contrast", contrast, f"views {subset!r} share no latent block")
            out.append((views, self.shared(views)))
        return out

    def describe(self) -> str:
        seen = "; ".join(f"view {v + 1} sees ({', '.join(names)})" for v, names in enumerate(self.latents))
        mixing = "one shared mixing" if self.shared_mixing else "a mixing per view"
        contrasted = "" if self.contrasted is None else (
            f"; the loss contrasts {len(self.contrasted)} subsets of views, each on the coordinates of its shared "
            f"block ({self.selection} selection, {self.objective} objective)")
        return f"{len(self.dims)} views, {mixing}: {seen}{contrasted}"
