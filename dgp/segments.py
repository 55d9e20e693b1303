"""Sources modulated by a discrete auxiliary variable u, the segment (time-contrastive learning, Hyvärinen &
Morioka, NeurIPS 2016; generalized contrastive learning, Hyvärinen, Sasaki & Turner, AISTATS 2019).

A segment u is drawn uniformly from 0..S-1; given it, the coordinates of z are independent,

    z_i = μ_{u,i} + σ_{u,i} ε_i,    ε_i i.i.d. of one law with mean 0 and variance 1,

``laplace`` (density ∝ exp(-√2 |ε|), TCL's) or ``normal``. The modulation is drawn once, at construction, from
the process's ``dgp.marginal`` stream: σ_{u,i} ~ U(σ_low, σ_high] and μ_{u,i} ~ U[-m, m] for every segment and
coordinate (TCL's official code draws σ ~ U[0, 1] with μ = 0: the defaults). Others modulate otherwise: iVAE's
data (ilkhem/iVAE, ``var_bounds`` [0.5, 3]) scales the sources by U[0.5, 3] per segment and coordinate, and
icebeem's ``gen_TCL_data_ortho`` (ilkhem/icebeem) draws scales U(0.01, 3) and, with ``varyMean``, means U(-3, 3)
(here std_low 0.01, std_high 3, location 3, up to the open and closed ends of the intervals). With σ_low = σ_high every σ_{u,i} is σ_high, so with m = 0 every segment
has the same law: stationary sources, independent of u (the case TCL's and GCL's theorems exclude). So log p(z | u) = Σ_i log p_ε((z_i - μ_{u,i}) / σ_{u,i}) - log σ_{u,i}:
the sources are conditionally independent given u, with a density of u that is an exponential family of order 1
(Laplace, μ = 0: the statistic |z_i|), or 2 (normal: z_i and z_i²) in each coordinate.

- the marginal ``segments`` draws (z, u), and z alone where no label is asked for (p(z), a mixture over the
  segments);
- the conditional ``same_segment`` draws the positive z+ ~ p(z | u) from the anchor's segment u, independent of
  z given u: a pair (z, z+) of one segment, the positive pair the papers' own pairing gives InfoNCE.

A batch carries u (``dgp.Batch.u``), which the losses ``tcl`` and ``gcl`` classify.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from dgp import checks, truncation
from dgp.base import Conditional, Marginal, Space
from dgp.conditionals import CONDITIONALS
from dgp.marginals import MARGINALS
from dgp.spaces import Euclidean

LAWS = ("laplace", "normal")
"""The law of the standardised source ε (mean 0, variance 1)."""
DEFAULT_SEGMENTS = 20
"""S: icebeem's and IIA-GCL's smaller settings (TCL's official code: 256)."""
MAX_SEGMENTS = 100_000
"""The most segments a process may draw (TCL's official code: 256)."""


@MARGINALS.register("segments")
class SegmentsMarginal(Marginal):
    """z given a segment u ~ U{0..S-1}: z_i = μ_{u,i} + σ_{u,i} ε_i (module docstring); ``sample(batch, generator)``
    gives ``(batch, n)``, :meth:`sample_labelled` ``(z, u)`` with u ``(batch,)`` int64.

    Buffers ``std`` σ and ``loc`` μ, both ``(S, n)``, drawn once from ``rng`` (σ first, then μ, whatever the
    options, so each option leaves the other's draws alone).
    """

    OPTION_DOCS = {
        'segments': 'S >= 2, the number of segments u (values of the auxiliary variable), drawn uniformly',
        'law': "the law of the standardised source ε: 'laplace' (TCL's) or 'normal'",
        'std_low': '>= 0: the standard deviations σ_{u,i} are drawn from U(std_low, std_high] (TCL: U(0, 1])',
        'std_high': '> 0 and >= std_low: see std_low; equal to std_low, every σ_{u,i} is std_high (with location 0: '
                    'stationary sources, no modulation across segments)',
        'location': '>= 0: the means μ_{u,i} are drawn from U[-location, location] (0: centred, TCL\'s)',
    }

    def __init__(self, space: Space, rng: torch.Generator | None = None, *, segments: int = DEFAULT_SEGMENTS,
                 law: str = "laplace", std_low: float = 0.0, std_high: float = 1.0, location: float = 0.0):
        super().__init__()
        if not isinstance(space, Euclidean):
            checks.fail("dgp.space.name", type(space).__name__.lower(), "the segment-modulated sources "
                        "(dgp.marginal 'segments') are defined on R^n only: use 'euclidean'")
        self.space = space
        self.segments = checks.integer("segments", segments, minimum=2)
        if self.segments > MAX_SEGMENTS:
            checks.fail("segments", segments, f"at most {MAX_SEGMENTS:,}: the process holds σ and μ per segment and "
                        "coordinate, and the losses tcl and gcl a table row per segment")
        self.law = checks.choice("law", law, LAWS)
        self.std_low = low = checks.data_scale("std_low", std_low)
        self.std_high = high = checks.positive("std_high", std_high)
        checks.data_scale("std_high", high)
        if high < low:
            checks.fail("std_high", std_high, f"must be >= std_low ({low:g})")
        self.location = checks.data_scale("location", checks.non_negative("location", location))
        shape = (self.segments, space.dim)
        self.register_buffer("std", high - (high - low) * torch.rand(shape, generator=rng, dtype=torch.float64))
        self.register_buffer("loc", self.location * (2.0 * torch.rand(shape, generator=rng, dtype=torch.float64) - 1.0))

    def sample_given(self, u: Tensor, generator: torch.Generator) -> Tensor:
        """``(batch, n)`` draws of p(z | u) for segments ``u`` ``(batch,)`` int64: μ_u + σ_u ε."""
        zeros = torch.zeros(u.shape[0], self.space.dim, dtype=self.std.dtype, device=u.device)
        if self.law == "laplace":
            eps = truncation.laplace(zeros, math.sqrt(0.5), generator)
        else:
            eps = truncation.normal(zeros, 1.0, generator)
        return self.loc.index_select(0, u) + self.std.index_select(0, u) * eps

    def sample_labelled(self, batch: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """``(z, u)``: segments u ``(batch,)`` drawn uniformly, then z ``(batch, n)`` given them."""
        u = torch.randint(self.segments, (batch,), generator=generator, device=generator.device)
        return self.sample_given(u, generator), u

    def sample(self, batch: int, generator: torch.Generator) -> Tensor:
        return self.sample_labelled(batch, generator)[0]

    def describe(self) -> str:
        where = f"μ ~ U[-{self.location:g}, {self.location:g}]" if self.location else "μ = 0"
        scale = (f"σ = {self.std_high:g}" if self.std_low == self.std_high
                 else f"σ ~ U({self.std_low:g}, {self.std_high:g}]")
        return (f"{self.segments} segments u drawn uniformly, z_i = μ_(u,i) + σ_(u,i) ε_i with {self.law} ε of "
                f"variance 1 ({scale}, {where}, drawn once) on "
                f"{self.space.describe()}")


@CONDITIONALS.register("same_segment")
class SameSegment(Conditional):
    """The positive from the anchor's segment: z+ ~ p(z | u), independent of z given u, drawn by the ``segments``
    marginal (:meth:`sample_labelled`, which a batch's draw calls with the anchors' u).

    It has no positives for latents alone: :meth:`sample` (z without u) is refused. (Views, which draw those, need
    named latent blocks, and the ``segments`` marginal has none.)
    """

    OPTION_DOCS: dict[str, str] = {}
    keeps_segment = True

    def __init__(self, space: Space, rng: torch.Generator | None = None):
        super().__init__()
        self.space = space

    def sample(self, z: Tensor, generator: torch.Generator) -> Tensor:
        checks.fail("dgp.conditional.name", "same_segment", "draws a positive from its anchor's segment u, which only "
                    "a batch's draw knows: it has no positives of latents alone (as views, dgp.views, draw them)")

    def sample_labelled(self, z: Tensor, u: Tensor | None, marginal: Marginal, generator: torch.Generator) -> Tensor:
        """``(batch, n)`` draws of p(z | u) from ``marginal`` (checked by :meth:`check_marginal`)."""
        return marginal.sample_given(u, generator)

    def check_marginal(self, marginal: Marginal) -> None:
        """A ValueError naming the key unless ``marginal`` is the ``segments`` marginal."""
        if not isinstance(marginal, SegmentsMarginal):
            checks.fail("dgp.conditional.name", "same_segment", "draws the positive from its anchor's segment and "
                        f"needs dgp.marginal.name 'segments', not {marginal.describe()}")

    def describe(self) -> str:
        return "another draw of the anchor's segment, z+ ~ p(z | u), independent of z given u"
