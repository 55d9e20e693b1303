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
  The tilt must be a proper density: a tilt that is not (Laplace coordinates on R^n with β·max|z_i| ≥
  1/scale, generalized normal ones with p < 1 on R^n and β > 0) is a ValueError naming
  ``dgp.negatives.beta`` before anything is drawn. Each resampling call records Kish's effective sample size
  of its weights (``last_ess``), warns (``LowEffectiveSampleSize``) when its mean falls below ``min_ess``, and
  with ``target_ess`` grows the pool until the mean reaches it.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import torch
from torch import Tensor

from dgp import checks
from dgp.base import NEGATIVES_CONTRACT, Marginal, Negatives
from dgp.defaults import BUILTIN_MODULES
from dgp.registry import Registry

NEGATIVES = Registry("negatives", "dgp.negatives", builtins=BUILTIN_MODULES, contract=NEGATIVES_CONTRACT)
MOST_NEGATIVES = 1_000_000
MOST_WHY = "every step draws, mixes and encodes them (per anchor: that many times the batch)"
"""The most negatives a process draws for a step (shared, or per anchor), and why."""
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

    Give at most one of ``num`` and ``per_anchor``.
    """

    OPTION_DOCS = {
        'num': '(int >= 1) negatives shared by every anchor of a batch (default: the batch size)',
        'per_anchor': '(int >= 1) negatives drawn for each anchor',
    }

    def __init__(
        self, space, rng: torch.Generator | None = None, *, num: int | None = None, per_anchor: int | None = None
    ):
        super().__init__()
        if num is not None:
            checks.integer("num", num, minimum=1, maximum=MOST_NEGATIVES, why=MOST_WHY)
        if per_anchor is not None:
            checks.integer("per_anchor", per_anchor, minimum=1, maximum=MOST_NEGATIVES, why=MOST_WHY)
            if num is not None:
                checks.fail(
                    "per_anchor", per_anchor, f"give either it or dgp.negatives.num={num}, not both"
                )
        self.num = num
        self.per_anchor = per_anchor

    def from_marginal(self) -> bool:
        return True

    def sample(self, z: Tensor, marginal: Marginal, generator: torch.Generator) -> Tensor:
        """``(num, n)`` shared or ``(B, per_anchor, n)`` draws from the marginal, for anchors ``z`` ``(B, n)``."""
        batch, n = z.shape
        if self.per_anchor is not None:
            return _per_anchor(z, self.per_anchor, marginal, generator)
        return marginal.sample(batch if self.num is None else self.num, generator).to(z.dtype)

    def describe(self) -> str:
        if self.per_anchor is not None:
            return f"{self.per_anchor} fresh marginal draws per anchor"
        return f"{'a batch' if self.num is None else self.num} of fresh marginal draws shared by all anchors"


@NEGATIVES.register("tilted")
class TiltedNegatives(Negatives):
    """Hard negatives q_β(z⁻|z) ∝ exp(β zᵀz⁻) p(z⁻), ``num`` per anchor: ``(B, num, n)``.

    Resampling from a pool of P draws with weights w ∝ exp(β zᵀz⁻) is exact only as P → ∞. Per anchor,
    Kish's effective sample size ESS = 1/Σ_j w_j² (w normalised; 1 ≤ ESS ≤ P; L. Kish, Survey Sampling,
    1965) counts the pool draws that carry the weight; each resampling call keeps its minimum and mean over
    the anchors in ``last_ess`` (:class:`EffectiveSampleSize`; None after a call that did not resample) and
    :meth:`describe` reports them. Given the pool, the expectation of f(z⁻) under the resampled law is the
    self-normalised importance estimate, whose bias is to first order -(E_2β[f] - E_β[f])/ESS (E_β: the
    expectation under q_β; the delta-method bias of a ratio estimator, see A. B. Owen, Monte Carlo Theory,
    Methods and Examples, 2013, ch. 9). For a bounded f such as the cosine ẑᵀz⁻ an ESS of 50 thus keeps the
    bias within 2% of the range of f, hence the default ``min_ess``. At small ESS the first-order rule
    understates the bias, as the draws collapse onto the few pool points closest to each anchor: with
    β = 50 on S^9 (uniform marginal), a pool of 16 (mean ESS ≈ 1.2) puts E[ẑᵀz⁻] 0.38 below its exact
    value and a pool of 4096 (ESS ≈ 3) still 0.046 below it. A pool grown for ``target_ess`` is drawn
    afresh at every call (the size reached is not carried over), so a call's draws depend only on its
    anchors and generator; with ``target_ess`` null, or when the first pool already reaches it, they are
    the draws of a fixed pool of ``pool``.
    """

    OPTION_DOCS = {
        'beta': '(>= 0) the hardness β; on R^n a Laplace (or p = 1 generalized normal) marginal needs β·max_i |z_i| < 1/scale over the anchors of each batch (checked at every call) and a generalized normal one with p < 1 needs β = 0, as their other tilts are not normalisable (on the sphere and the box, and for a normal marginal, any β is)',
        'num': '(int >= 1) negatives per anchor',
        'pool': '(int >= 1) marginal draws per call for importance resampling (the first pool when target_ess is set)',
        'method': "('auto' or 'resample') 'auto' is exact where the marginal has a closed form and resamples otherwise; 'resample' always resamples",
        'min_ess': "(>= 0) warn (a LowEffectiveSampleSize warning, once per sampler) when the mean effective sample size of a call's resampling weights falls below it; 0 never warns",
        'target_ess': '(>= 1 or null) grow the pool by doubling, with fresh marginal draws, until the mean effective sample size reaches it or the pool reaches max_pool; null keeps the pool at pool',
        'max_pool': '(int >= 1) the largest pool target_ess may grow to',
    }

    def __init__(
        self,
        space,
        rng: torch.Generator | None = None,
        *,
        beta: float = 1.0,
        num: int = 16,
        pool: int = 4096,
        method: str = "auto",
        min_ess: float = 50.0,
        target_ess: float | None = None,
        max_pool: int = 1 << 20,
    ):
        super().__init__()
        self.beta = checks.non_negative("beta", beta)
        self.num = checks.integer("num", num, minimum=1, maximum=MOST_NEGATIVES, why=MOST_WHY)
        self.pool = checks.integer("pool", pool, minimum=1)
        self.method = checks.choice("method", method, ("auto", "resample"))
        self.min_ess = checks.non_negative("min_ess", min_ess)
        self.max_pool = checks.integer("max_pool", max_pool, minimum=1)
        self.target_ess = None
        if target_ess is not None:
            self.target_ess = checks.number("target_ess", target_ess)
            if self.target_ess < 1.0:
                checks.fail(
                    "target_ess", target_ess,
                    "must be >= 1 (an effective sample size lies between 1 and the pool size), or null for a "
                    "fixed pool",
                )
            if self.max_pool < self.pool:
                checks.fail(
                    "max_pool", max_pool,
                    f"must be >= dgp.negatives.pool={pool} (the pool target_ess starts from)",
                )
            if self.target_ess > self.max_pool:
                checks.fail(
                    "target_ess", target_ess,
                    f"must be <= dgp.negatives.max_pool={max_pool}: the effective sample size never exceeds "
                    "the pool",
                )
        self.last_ess: EffectiveSampleSize | None = None
        self._warned = False

    def check_marginal(self, marginal: Marginal) -> None:
        """A ValueError naming ``dgp.negatives.beta`` when no anchor's tilt of ``marginal`` is normalisable.

        Decided from the options alone: β > 0 with a marginal whose tails are heavier than exponential
        (``tilt_limit() == 0``: generalized normal with p < 1 on R^n). The anchor-dependent condition of a
        finite limit is checked by :meth:`sample`, which calls this first.
        """
        if self.beta > 0.0 and _tilt_limit(marginal) == 0.0:
            checks.fail(
                "dgp.negatives.beta", self.beta,
                f"the tilt exp(beta·zᵀz⁻) of {marginal.describe()} is not normalisable for any beta > 0: its "
                "tails are heavier than exponential (a generalized normal with p < 1), so the tilt towards any "
                "nonzero anchor has infinite mass; allowed: beta = 0, a marginal with lighter tails (normal, "
                "Laplace, or dgp.marginal.p >= 1), or a box space, where every tilt is normalisable",
            )

    def _check_anchors(self, z: Tensor, marginal: Marginal) -> None:
        """A ValueError when β·max_i |z_i| over the batch reaches the marginal's finite tilt limit."""
        self.check_marginal(marginal)
        limit = _tilt_limit(marginal)
        if self.beta == 0.0 or math.isinf(limit) or z.numel() == 0:
            return
        largest = float(z.detach().abs().max())
        reach = self.beta * largest
        if not reach >= limit:  # NaN anchors are not this check's business
            return
        scale = getattr(marginal, "scale", None)
        bound = "1/scale = " if scale and math.isclose(limit * scale, 1.0) else "the marginal's limit "
        bound += f"{limit:.4g}"
        checks.fail(
            "dgp.negatives.beta", self.beta,
            f"beta·max|z_i| = {reach:.4g} ≥ {bound} for the anchors of this batch: the tilt exp(beta·zᵀz⁻) of "
            f"{marginal.describe()} is not normalisable, as every coordinate needs beta·|z_i| < {limit:.4g}; "
            f"use beta < {_round_down(limit / largest)} for these anchors (anchors on R^n are unbounded, so a "
            "larger batch needs a smaller beta), or a box space, where every tilt is normalisable",
        )

    def from_marginal(self) -> bool:
        """Only untilted (β = 0): a tilt draws negatives near the anchor, not from p(z)."""
        return self.beta == 0.0

    def sample(self, z: Tensor, marginal: Marginal, generator: torch.Generator) -> Tensor:
        """``(B, num, n)`` negatives for the anchors ``z`` ``(B, n)``.

        Raises a ValueError, before drawing anything, when the tilt of ``marginal`` towards these anchors
        is not normalisable; warns (:class:`LowEffectiveSampleSize`) after resampling with a low ESS.
        """
        self.last_ess = None
        if self.beta == 0.0:
            return _per_anchor(z, self.num, marginal, generator)
        self._check_anchors(z, marginal)
        if self.method == "auto" and marginal.sample_tilted is not None:
            return marginal.sample_tilted(z, self.beta, self.num, generator).to(z.dtype)
        return self._resample(z, marginal, generator)

    def _resample(self, z: Tensor, marginal: Marginal, generator: torch.Generator) -> Tensor:
        """Sampling-importance-resampling from a pool of fresh marginal draws, weights ∝ exp(β zᵀz⁻)."""
        pool = marginal.sample(self.pool, generator).to(z.dtype)
        if self.target_ess is not None:
            pool = self._grow(z, pool, marginal, generator)
        rows = max(1, _CHUNK // pool.shape[0])
        parts, ess = [], []
        for start in range(0, z.shape[0], rows):
            probs = torch.softmax(self.beta * (z[start : start + rows] @ pool.T), dim=1)
            ess.append(effective_sample_size(probs))
            parts.append(pool[torch.multinomial(probs, self.num, replacement=True, generator=generator)])
        ess = torch.cat(ess)
        self.last_ess = EffectiveSampleSize(float(ess.min()), float(ess.mean()), pool.shape[0])
        self._warn_if_low()
        return torch.cat(parts)

    def _grow(self, z: Tensor, pool: Tensor, marginal: Marginal, generator: torch.Generator) -> Tensor:
        """``pool`` doubled with fresh marginal draws (capped at ``max_pool``) until the mean ESS over the
        anchors reaches ``target_ess``; the log-sums of the weights are updated with each new part only."""
        lse1, lse2 = self._log_sums(z, pool)
        parts = [pool]
        size = pool.shape[0]
        while size < self.max_pool and float(torch.exp(2.0 * lse1 - lse2).mean()) < self.target_ess:
            extra = marginal.sample(min(2 * size, self.max_pool) - size, generator).to(z.dtype)
            more1, more2 = self._log_sums(z, extra)
            lse1, lse2 = torch.logaddexp(lse1, more1), torch.logaddexp(lse2, more2)
            parts.append(extra)
            size += extra.shape[0]
        return torch.cat(parts) if len(parts) > 1 else pool

    def _log_sums(self, z: Tensor, pool: Tensor) -> tuple[Tensor, Tensor]:
        """Per anchor, log Σ_j exp(ℓ_j) and log Σ_j exp(2ℓ_j) of the logits ℓ = β zᵀ pool (one exp each)."""
        rows = max(1, _CHUNK // pool.shape[0])
        ones, twos = [], []
        for start in range(0, z.shape[0], rows):
            logits = self.beta * (z[start : start + rows] @ pool.T)
            top = logits.amax(dim=1)
            shifted = torch.exp(logits - top.unsqueeze(1))
            ones.append(top.double() + shifted.sum(dim=1).double().log())
            twos.append(2.0 * top.double() + torch.einsum("ij,ij->i", shifted, shifted).double().log())
        return torch.cat(ones), torch.cat(twos)

    def _warn_if_low(self) -> None:
        ess = self.last_ess
        if self._warned or ess is None or ess.mean >= self.min_ess:
            return
        self._warned = True
        if self.target_ess is None:
            grow = "set dgp.negatives.target_ess (e.g. to dgp.negatives.min_ess) to grow the pool"
        elif ess.pool >= self.max_pool:
            grow = f"raise dgp.negatives.max_pool (the pool reached it, {ess.pool} draws)"
        else:
            grow = f"raise dgp.negatives.target_ess={self.target_ess:g} to dgp.negatives.min_ess"
        warnings.warn(
            f"tilted negatives: the importance resampling at beta={self.beta:g} has a mean effective sample "
            f"size of {ess.mean:.3g} (minimum {ess.min:.3g}) from a pool of {ess.pool}, below "
            f"dgp.negatives.min_ess={self.min_ess:g}: the negatives concentrate on the few pool draws most "
            f"aligned with each anchor and are less hard than q_beta; {grow}, raise dgp.negatives.pool, or lower beta "
            "(warned once per sampler; every call's statistics are in last_ess)",
            LowEffectiveSampleSize,
            stacklevel=4,
        )

    def describe(self) -> str:
        how = "exactly where the marginal allows, else by " if self.method == "auto" else "by "
        pool = f"{self.pool} marginal draws"
        if self.target_ess is not None:
            pool += f", doubled up to {self.max_pool} until the mean effective sample size reaches {self.target_ess:g}"
        text = (
            f"{self.num} hard negatives per anchor from q(z-|z) ∝ exp({self.beta:g}·zᵀz-) p(z-), drawn "
            f"{how}importance resampling from {pool}"
        )
        if self.last_ess is not None:
            ess = self.last_ess
            text += (
                f" (last call: effective sample size {ess.mean:.3g} on average, {ess.min:.3g} at least, "
                f"from {ess.pool} draws)"
            )
        return text


@dataclass(frozen=True)
class EffectiveSampleSize:
    """Kish's effective sample size of one call's resampling weights, over the anchors of the batch."""

    min: float
    mean: float
    pool: int
    """The pool the weights were spread over (the upper bound of the ESS)."""


class LowEffectiveSampleSize(UserWarning):
    """The importance resampling of tilted negatives rests on too few effective pool draws."""


def effective_sample_size(weights: Tensor) -> Tensor:
    """Kish's effective sample size (Σ_j w_j)²/Σ_j w_j² of non-negative ``weights`` along the last dimension.

    For normalised weights (w = softmax(β zᵀ pool)) it is 1/Σ_j w_j²: P for P equal weights, 1 when one
    weight carries everything, and between the two otherwise. Returned in float64, ``weights.shape[:-1]``.
    """
    total = weights.sum(dim=-1).double()
    return total.square() / torch.einsum("...j,...j->...", weights, weights).double()


def _per_anchor(z: Tensor, k: int, marginal: Marginal, generator: torch.Generator) -> Tensor:
    """``(B, k, n)`` fresh marginal draws for the anchors ``z`` ``(B, n)``."""
    batch, n = z.shape
    return marginal.sample(batch * k, generator).view(batch, k, n).to(z.dtype)


def _tilt_limit(marginal: Marginal) -> float:
    """The marginal's ``tilt_limit()`` (see :mod:`dgp.marginals`); inf for a marginal without one."""
    return math.inf if marginal.tilt_limit is None else float(marginal.tilt_limit())


def _round_down(x: float, digits: int = 4) -> str:
    """``x`` to ``digits`` significant digits, rounded towards zero (a bound that stays strict)."""
    if x <= 0.0 or not math.isfinite(x):
        return f"{x:g}"
    step = 10.0 ** (math.floor(math.log10(x)) - digits + 1)
    return f"{math.floor(x / step) * step:.{digits}g}"
