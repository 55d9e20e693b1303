"""How the process draws negatives z⁻ (besides the in-batch negatives a loss may form itself).

- ``none``: no separate negatives (``sample`` returns None).
- ``marginal``: fresh draws from p(z): ``(num, n)`` shared by the whole batch (``num`` defaults to the batch
  size), or ``(B, k, n)`` with ``per_anchor: k``.
- ``tilted``: hard negatives, ``num`` per anchor, from q_β(z⁻|z) ∝ exp(β zᵀz⁻) p(z⁻) (the marginal tilted towards
  the anchor: the hard-negative distribution of Robinson et al., Contrastive Learning with Hard Negative
  Samples, ICLR 2021, written in the latent space instead of the representation space), shape
  ``(B, num, n)``. Exact where the marginal has a closed form (its ``sample_tilted``: uniform on the
  sphere of radius r → z⁻ = r·vMF(z/r, β r²); uniform on the box → truncated exponentials; normal → shifted
  normal). Otherwise sampling-importance-resampling: a fresh pool of ``pool`` marginal draws per call, shared by
  all anchors, and ``num`` indices per anchor drawn with replacement with probabilities softmax(β zᵀ pool),
  which is exact as ``pool`` → ∞. β = 0 gives plain marginal draws.
"""

from __future__ import annotations

import torch
from torch import Tensor

from dgp import checks
from dgp.base import Marginal, Negatives
from dgp.registry import Registry

NEGATIVES = Registry("negatives")
"""Sources of separate negatives by name."""

_CHUNK = 1 << 22
"""At most this many anchor-pool logits are held at once."""


@NEGATIVES.register("none")
class NoNegatives(Negatives):
    """No separate negatives: the loss uses the other samples of the batch."""

    def __init__(self, space, rng: torch.Generator | None = None):
        super().__init__()

    def sample(self, z: Tensor, marginal: Marginal, generator: torch.Generator) -> None:
        return None

    def describe(self) -> str:
        return "none drawn separately (the loss forms them from the batch)"


@NEGATIVES.register("marginal")
class MarginalNegatives(Negatives):
    """Fresh marginal draws: ``(num, n)`` shared (``num`` default: the batch size) or ``(B, per_anchor, n)``.

    Options ``num`` (int >= 1) and ``per_anchor`` (int >= 1); give at most one of them.
    """

    def __init__(
        self, space, rng: torch.Generator | None = None, *, num: int | None = None, per_anchor: int | None = None
    ):
        super().__init__()
        if num is not None:
            checks.integer("dgp.negatives.num", num, minimum=1)
        if per_anchor is not None:
            checks.integer("dgp.negatives.per_anchor", per_anchor, minimum=1)
            if num is not None:
                checks.fail(
                    "dgp.negatives.per_anchor", per_anchor, f"give either it or dgp.negatives.num={num}, not both"
                )
        self.num = num
        self.per_anchor = per_anchor

    def sample(self, z: Tensor, marginal: Marginal, generator: torch.Generator) -> Tensor:
        """``(num, n)`` shared or ``(B, per_anchor, n)`` draws from the marginal, for anchors ``z`` ``(B, n)``."""
        batch, n = z.shape
        if self.per_anchor is not None:
            return marginal.sample(batch * self.per_anchor, generator).view(batch, self.per_anchor, n).to(z.dtype)
        return marginal.sample(batch if self.num is None else self.num, generator).to(z.dtype)

    def describe(self) -> str:
        if self.per_anchor is not None:
            return f"{self.per_anchor} fresh marginal draws per anchor"
        return f"{'a batch' if self.num is None else self.num} of fresh marginal draws shared by all anchors"


@NEGATIVES.register("tilted")
class TiltedNegatives(Negatives):
    """Hard negatives q_β(z⁻|z) ∝ exp(β zᵀz⁻) p(z⁻), ``num`` per anchor: ``(B, num, n)``.

    Options: ``beta`` (>= 0, default 1), ``num`` (int >= 1, default 16), ``pool`` (int >= 1, default 4096:
    marginal draws per call for importance resampling), ``method`` ('auto': exact where the marginal has a
    closed form, else resampling; 'resample': always resample).
    """

    def __init__(
        self,
        space,
        rng: torch.Generator | None = None,
        *,
        beta: float = 1.0,
        num: int = 16,
        pool: int = 4096,
        method: str = "auto",
    ):
        super().__init__()
        self.beta = checks.non_negative("dgp.negatives.beta", beta)
        self.num = checks.integer("dgp.negatives.num", num, minimum=1)
        self.pool = checks.integer("dgp.negatives.pool", pool, minimum=1)
        self.method = checks.choice("dgp.negatives.method", method, ("auto", "resample"))

    def sample(self, z: Tensor, marginal: Marginal, generator: torch.Generator) -> Tensor:
        """``(B, num, n)`` negatives for the anchors ``z`` ``(B, n)``."""
        batch, n = z.shape
        if self.beta == 0.0:
            return marginal.sample(batch * self.num, generator).view(batch, self.num, n).to(z.dtype)
        exact = getattr(marginal, "sample_tilted", None)
        if self.method == "auto" and exact is not None:
            return exact(z, self.beta, self.num, generator).to(z.dtype)
        return self._resample(z, marginal, generator)

    def _resample(self, z: Tensor, marginal: Marginal, generator: torch.Generator) -> Tensor:
        """Sampling-importance-resampling from ``pool`` fresh marginal draws, weights ∝ exp(β zᵀz⁻)."""
        pool = marginal.sample(self.pool, generator).to(z.dtype)
        rows = max(1, _CHUNK // self.pool)
        parts = []
        for start in range(0, z.shape[0], rows):
            probs = torch.softmax(self.beta * (z[start : start + rows] @ pool.T), dim=1)
            parts.append(pool[torch.multinomial(probs, self.num, replacement=True, generator=generator)])
        return torch.cat(parts)

    def describe(self) -> str:
        how = "exactly where the marginal allows, else by " if self.method == "auto" else "by "
        return (
            f"{self.num} hard negatives per anchor from q(z-|z) ∝ exp({self.beta:g}·zᵀz-) p(z-), drawn "
            f"{how}importance resampling from {self.pool} marginal draws"
        )
