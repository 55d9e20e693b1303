"""Invertible mixing functions g: R^n -> R^n (Z21, vK21 and R24 share the same MLP).

The MLP is ``L`` square, bias-free linear layers with LeakyReLU between them
and none after the last::

    g(z) = W_L σ(W_{L-1} σ( ... σ(W_1 z)))

Each ``W_l`` has i.i.d. U(-1, 1) entries with its columns scaled to unit L2
norm. Condition-number control (Hyvärinen's recipe, as in the official codes):
draw ``cond_draws`` such matrices, sort their 2-norm condition numbers and take
the one at index ``int(cond_draws * cond_ratio)`` as threshold; each layer is
then redrawn until its condition number is at most the threshold. Ratio 0.0
(Z21, R24) keeps the best of the reference draws; the official R24 log shows a
threshold of 3.61 for n = 10. Over seeds the minimum of 25,000 draws at
n = 10 spreads from about 3.0 to 4.4; ratio 0.001 (vK21) gives about 5.0-5.2.

With ratio 0.0 the probability that one candidate passes is itself random
(Beta(1, cond_draws)), so the number of redraws per layer is heavy-tailed:
typically ~2 * 10^4, occasionally 10^6 or more. Candidates are drawn and
checked in batches, so this stays within seconds.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from dgp import checks
from dgp.base import MIXING_CONTRACT, Mixing
from dgp.defaults import BUILTIN_MODULES
from dgp.registry import Registry

MIXINGS = Registry("mixings", "dgp.mixing", builtins=BUILTIN_MODULES, contract=MIXING_CONTRACT)
MOST_LAYERS = 100
MOST_COND_DRAWS = 100_000
"""The most layers an MLP mixing has, and the most matrices its condition-number threshold is taken from."""
"""Mixing functions g by name."""

CHUNK = 4096
"""Matrices drawn and checked per batch when building the reference and redrawing layers."""


def unit_column_matrices(count: int, dim: int, rng: torch.Generator) -> Tensor:
    """``(count, dim, dim)`` float64 matrices with U(-1, 1) entries and unit-L2-norm columns."""
    w = torch.rand(count, dim, dim, generator=rng, dtype=torch.float64) * 2.0 - 1.0
    return w / w.norm(dim=-2, keepdim=True)


def condition_numbers(w: Tensor) -> Tensor:
    """2-norm condition numbers ``s_max / s_min`` of a ``(..., n, n)`` batch, shape ``(...)``."""
    s = torch.linalg.svdvals(w.to(torch.float64))
    return s[..., 0] / s[..., -1]


def condition_threshold(dim: int, draws: int, ratio: float, rng: torch.Generator) -> float:
    """The condition number at index ``int(draws * ratio)`` of ``draws`` sorted random draws."""
    conds = [condition_numbers(unit_column_matrices(min(CHUNK, draws - start), dim, rng))
             for start in range(0, draws, CHUNK)]
    return torch.cat(conds).sort().values[int(draws * ratio)].item()


def well_conditioned_matrix(dim: int, threshold: float, rng: torch.Generator) -> Tensor:
    """The first random unit-column matrix, in draw order, whose condition number is <= ``threshold``."""
    while True:
        candidates = unit_column_matrices(CHUNK, dim, rng)
        passed = torch.nonzero(condition_numbers(candidates) <= threshold)
        if passed.numel():
            return candidates[passed[0, 0]]


def draw_layers(dim: int, count: int, rng: torch.Generator, cond_ratio: float, cond_draws: int) -> tuple[Tensor, float]:
    """``count`` well-conditioned layer matrices ``(count, dim, dim)`` and their threshold."""
    ratio = checks.number("cond_ratio", cond_ratio)
    if not 0.0 <= ratio < 1.0:
        checks.fail("cond_ratio", cond_ratio, "must lie in [0, 1)")
    draws = checks.integer("cond_draws", cond_draws, minimum=1, maximum=MOST_COND_DRAWS,
                           why="each draw is a matrix and its condition number, drawn when the process is built")
    if checks.only_checking():  # options are valid; the search is skipped (placeholder identity layers)
        return torch.eye(dim, dtype=torch.float64).expand(count, dim, dim).clone(), 1.0
    threshold = condition_threshold(dim, draws, ratio, rng)
    weights = torch.stack([well_conditioned_matrix(dim, threshold, rng) for _ in range(count)])
    return weights, threshold


class LayerStack(Mixing):
    """``x = W_L σ(... σ(W_1 z))`` with LeakyReLU σ of negative slope ``slope``; exactly invertible.

    Buffers: ``weight`` ``(L, n, n)``, ``weight_inverse`` ``(L, n, n)`` (inverted in float64 at
    construction), ``cond_threshold`` (scalar). Rows of ``z``/``x`` are ``(batch, n)``.
    """

    OPTION_DOCS = {
        'cond_ratio': "in [0, 1): every layer's 2-norm condition number must not exceed the value at this quantile of cond_draws random layers' (0: the best of them, Z21/R24; vK21: 0.001)",
        'cond_draws': '(int >= 1) the number of random layers that set that threshold',
    }

    def __init__(self, weights: Tensor, threshold: float, slope: float):
        super().__init__()
        self.dim = weights.shape[-1]
        self.slope = slope
        self.register_buffer("weight", weights)
        self.register_buffer("weight_inverse", torch.linalg.inv(weights))
        self.register_buffer("cond_threshold", torch.tensor(threshold, dtype=torch.float64))

    @property
    def threshold(self) -> float:
        """The condition-number threshold every layer satisfies."""
        return float(self.cond_threshold)

    def forward(self, z: Tensor) -> Tensor:
        w = self.weight.to(z)
        h = z
        for i in range(w.shape[0]):
            h = h @ w[i].T
            if i < w.shape[0] - 1:
                h = F.leaky_relu(h, self.slope)
        return h

    def inverse(self, x: Tensor) -> Tensor:
        w_inv = self.weight_inverse.to(x)
        h = x
        for i in reversed(range(w_inv.shape[0])):
            if i < w_inv.shape[0] - 1:
                h = torch.where(h >= 0, h, h / self.slope)
            h = h @ w_inv[i].T
        return h

    def condition_numbers(self) -> list[float]:
        return condition_numbers(self.weight).tolist()

    def _conds_text(self) -> str:
        conds = ", ".join(f"{c:.2f}" for c in self.condition_numbers())
        return f"condition numbers {conds} <= {self.threshold:.2f}"


@MIXINGS.register("mlp")
class InvertibleMLP(LayerStack):
    """The invertible MLP of Z21/vK21/R24 (module docstring): ``layers`` square layers, LeakyReLU(slope)."""

    OPTION_DOCS = {
        'layers': '(int >= 1) square bias-free linear layers',
        'slope': 'negative slope of the LeakyReLU between layers (none after the last)',
    }

    def __init__(self, dim: int, rng: torch.Generator, *, layers: int = 3, slope: float = 0.2,
                 cond_ratio: float = 0.0, cond_draws: int = 25000):
        dim = checks.integer("dgp.dim", dim, minimum=1)
        count = checks.integer("layers", layers, minimum=1, maximum=MOST_LAYERS,
                               why="each layer multiplies the latents by a drawn matrix")
        slope = checks.positive("slope", slope)
        if slope > 1:
            checks.fail("slope", slope, "must lie in (0, 1]: the leaky ReLU's slope for negative inputs")
        weights, threshold = draw_layers(dim, count, rng, cond_ratio, cond_draws)
        super().__init__(weights, threshold, slope)

    def describe(self) -> str:
        return f"a {len(self.weight)}-layer invertible MLP (LeakyReLU slope {self.slope:g}, {self._conds_text()})"


@MIXINGS.register("linear")
class LinearMixing(LayerStack):
    """``x = W z`` with one well-conditioned unit-column matrix ``W`` drawn as an MLP layer."""

    def __init__(self, dim: int, rng: torch.Generator, *, cond_ratio: float = 0.0, cond_draws: int = 25000):
        dim = checks.integer("dgp.dim", dim, minimum=1)
        weights, threshold = draw_layers(dim, 1, rng, cond_ratio, cond_draws)
        super().__init__(weights, threshold, 1.0)

    def describe(self) -> str:
        return f"a random linear map ({self._conds_text()})"


@MIXINGS.register("identity")
class IdentityMixing(Mixing):
    """``x = z``: the latents observed directly."""

    def __init__(self, dim: int, rng: torch.Generator | None = None):
        super().__init__()
        self.dim = checks.integer("dgp.dim", dim, minimum=1)

    def forward(self, z: Tensor) -> Tensor:
        return z

    def inverse(self, x: Tensor) -> Tensor:
        return x

    def describe(self) -> str:
        return "the identity"
