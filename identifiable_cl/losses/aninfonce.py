"""AnInfoNCE: InfoNCE with a learnt diagonal anisotropic similarity (R24)."""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dgp import checks
from identifiable_cl.losses.base import (
    NEGATIVE_SETS,
    REDUCTIONS,
    ContrastiveLoss,
    InfoNCEBound,
    Terms,
    assemble,
    check_dim,
    check_lr,
    contrastive_loss,
    infonce_row,
    normalise,
    prepared_inputs,
)
from identifiable_cl.losses import LOSSES
from identifiable_cl.predictions import Prediction


def inverse_softplus(y: float) -> float:
    """x with softplus(x) = log(1 + e^x) = y, for y > 0."""
    return y + math.log(-math.expm1(-y))


@LOSSES.register("aninfonce")
class AnInfoNCE(InfoNCEBound, ContrastiveLoss):
    """AnInfoNCE (R24): InfoNCE with logits

        l(a, b) = -c (a - b)ᵀ Λ̂ (a - b),   Λ̂ = diag(softplus(θ)) learnt, c = ``factor``,

    and the loss -l(a, a+) + log sum_{c in {a+} u N(a)} exp l(a, c), averaged over anchors.
    There is no temperature: Λ̂ carries the scale. With the anisotropic conditional
    z+ ∝ z + δ, δ ~ N(0, diag(1/Λ)), the optimal critic is -(1/2) dᵀΛd, so with c = 1/2
    (the official code's factor) Λ̂ estimates Λ. On unit-norm outputs, c = 1 and Λ̂ = I/(2τ)
    (or c = 1/2 and Λ̂ = I/τ) give cosine InfoNCE at temperature τ.

    l is evaluated as -||s ⊙ a - s ⊙ b||² with s = sqrt(c Λ̂), i.e. from differences, never
    from the expansion aᵀΛ̂a + bᵀΛ̂b - 2aᵀΛ̂b, so it is exactly 0 for equal rows and never
    positive.

    ``lambda_hat`` is the current Λ̂ (d,); ``logs()`` reports it as ``lambda_hat``.
    """

    batches_over_runs = True
    predictions = (
        Prediction("sphere_anisotropic", "a block-orthogonal map, dimensions of equal Λ mixed", "Rusak et al. 2024",
                   "mcc_block_aware", {"paper": 0.95, "smoke": 0.89}, process={"conditional.lambdas": ("bimodal",)},
                   setting={"optim.loss_lr": 0.02, "loss.negatives": "r24", "dgp.conditional.shell": 0.1}),
        Prediction("sphere_anisotropic", "a permutation and signs, the Λ values distinct", "Rusak et al. 2024",
                   "mcc_pearson", {"paper": 0.95, "smoke": 0.8}, process={"conditional.lambdas": ("linear",)}),
    )
    """What theory predicts for AnInfoNCE (:mod:`identifiable_cl.predictions`; thresholds as rusak2024 states them)."""

    OPTION_DOCS = {
        'lambda_init': 'initial Λ̂ value on every dimension (> 0), or "random": θ ~ 0.1·N(0, 1) as in the official code',
        'seed': "seed of that draw, or None (default): draw it from torch's default generator, which a run seeds from its root seed's loss stream, so every seed of an experiment starts from its own Λ̂",
        'factor': 'c > 0 (official code: 1/2)',
        'negatives': 'as in infonce; negatives="r24" with "logsumexp" and factor=0.5, unit_norm=True reproduces the official AnInfoNCE code exactly',
        'reduction': 'as in infonce; negatives="r24" with "logsumexp" and factor=0.5, unit_norm=True reproduces the official AnInfoNCE code exactly',
        'unit_norm': 'scale encodings to unit norm first (official code: yes)',
        'lr': "learning rate of θ (None = the trainer's loss lr; R24: 1e-3)",
    }

    def __init__(
        self,
        *,
        dim: int,
        lambda_init: float | str = "random",
        seed: int | None = None,
        factor: float = 0.5,
        negatives: str = "symmetric",
        reduction: str = "logsumexp",
        unit_norm: bool = True,
        lr: float | None = None,
    ):
        super().__init__()
        self.dim = check_dim(dim)
        if seed is not None:
            seed = checks.integer("seed", seed, minimum=0)
        if isinstance(lambda_init, str):
            checks.choice("lambda_init", lambda_init, ["random"])
            generator = None if seed is None else torch.Generator().manual_seed(seed)
            raw = 0.1 * torch.randn(self.dim, generator=generator, dtype=torch.float64)
        else:
            value = checks.float32_positive("lambda_init", lambda_init)
            raw = torch.full((self.dim,), inverse_softplus(value), dtype=torch.float64)
        self.raw_lambda = nn.Parameter(raw.to(torch.get_default_dtype()))
        self.factor = checks.positive("factor", factor)
        if self.factor > checks.DATA_SCALE:
            checks.fail("factor", factor, f"must lie in (0, {checks.DATA_SCALE:g}]: the logits -c (a - b)ᵀΛ̂(a - b) "
                                          "are float32")
        self.negatives = checks.choice("negatives", negatives, NEGATIVE_SETS)
        self.reduction = checks.choice("reduction", reduction, REDUCTIONS)
        self.unit_norm = checks.boolean("unit_norm", unit_norm)
        self.lr = check_lr(lr)
        self.requires_negatives = self.negatives == "independent"
        self.needs_unit_norm = self.unit_norm

    @property
    def lambda_hat(self) -> Tensor:
        """Λ̂ = softplus(θ), shape (d,)."""
        return F.softplus(self.raw_lambda)

    def terms(self, h: Tensor, h_pos: Tensor, h_neg: Tensor | None = None) -> Terms:
        """Logits of positives ``(R,)`` and negatives ``(R, K)`` (-inf = excluded)."""
        h, h_pos, h_neg = self._scaled(h, h_pos, h_neg)
        return assemble(self.negatives, h, h_pos, h_neg, "l2", key=self.config_key)

    def forward(self, h: Tensor, h_pos: Tensor, h_neg: Tensor | None = None) -> Tensor:
        """Scalar loss for h, h_pos (B, d) and h_neg None | (M, d) | (B, K, d)."""
        h, h_pos, h_neg = self._scaled(h, h_pos, h_neg)
        row = functools.partial(infonce_row, reduction=self.reduction)
        return contrastive_loss(self.negatives, h, h_pos, h_neg, "l2", 1.0, (1.0,), row, self.config_key)

    def _scaled(self, h: Tensor, h_pos: Tensor, h_neg: Tensor | None):
        """Checked inputs (unit-normalised if ``unit_norm``) times s = sqrt(c Λ̂)."""
        h, h_pos, h_neg = prepared_inputs(h, h_pos, h_neg, self.dim, self.requires_negatives)
        if self.unit_norm:
            h, h_pos, h_neg = normalise(h, h_pos, h_neg)
        tiny = torch.finfo(self.raw_lambda.dtype).tiny
        scale = (self.factor * self.lambda_hat).clamp_min(tiny).sqrt()
        return h * scale, h_pos * scale, None if h_neg is None else h_neg * scale

    def logs(self) -> dict[str, float | list[float]]:
        return {"lambda_hat": self.lambda_hat.detach().cpu().tolist()}

    def extra_repr(self) -> str:
        return (
            f"dim={self.dim}, factor={self.factor:g}, negatives={self.negatives!r}, "
            f"reduction={self.reduction!r}, unit_norm={self.unit_norm}"
        )
