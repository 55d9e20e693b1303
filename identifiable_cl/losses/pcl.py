"""Permutation-contrastive learning (Hyvärinen & Morioka, AISTATS 2017): logistic regression of real pairs of
consecutive time points against pairs with a random time point."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dgp import checks
from identifiable_cl.losses.base import (
    ContrastiveLoss, _check_batch, _check_negatives, check_dim, check_lr, prepared_inputs,
)
from identifiable_cl.losses import LOSSES
from identifiable_cl.predictions import Prediction

PCL_NEGATIVES = ("rolled", "independent")
"""Where the fake pairs' past points come from: the batch rolled by one row, or the DGP's separate negatives."""


@LOSSES.register("pcl")
class PCL(ContrastiveLoss):
    """PCL's loss: binary logistic regression of real pairs y = (x_t, x_{t-1}) against fake pairs
    y* = (x_t, x_{t*}), with the paper's score form

        r(y₁, y₂) = -Σᵢ |w₁ᵢ hᵢ(y₁) + w₂ᵢ hᵢ(y₂) + bᵢ| + Σᵢ aᵢ hᵢ(y₁)² + m,

    w₁, w₂, b, a in R^d and m in R learnt, started at w₁ = 1, w₂ = -1, b = 0, a = 1, m = 0: the official code's
    values (hmorioka/PCL, ``pcl/pcl.py``, and its port simonbing/CRLSanityCheck ``crc/baselines/PCL``; there a is
    one scalar shared by the coordinates, and the port's comment gives b = 0 where its code leaves PyTorch's random
    default). Two steps of theirs are not done here: they batch-normalise h before scoring (the encoder's outputs
    are scored as they are), and clamp a to a >= 0 after every optimiser step (a is left free here: a projection
    after the step belongs to the trainer, not the loss, and with a < 0 the score is still a logistic regression
    of the same pairs).

    A batch's (z, z+) is (s_{t-1}, s_t) (the ``ar1`` process), so y₁ = x_t is the positive and y₂ = x_{t-1}
    the anchor: real pairs are (h+_i, h_i), i = 1..B, for h, h+ ``(B, d)``. The a-term acts on the current
    point, which real and fake pairs share, as the optimal score log p(x_t | x_{t-1}) - log p(x_t) has its
    -log p(x_t) there. The fake pairs keep the current point and take another past, as the paper's
    y*(t) = (x(t), x(t*)):

    - ``negatives: rolled`` (default): (h+_i, h_{i+1 mod B}): the batch rolled by one row, a fixed derangement
      that draws nothing, so a run stays reproducible and resumable. Batch rows are independent draws of the
      stationary pair, so each fake pair is a draw of p(x_t) p(x_{t*}), exactly; B >= 2.
    - ``negatives: independent``: (h+_i, c) for every c of the DGP's separate negatives, a shared pool
      ``(M, d)`` or ``(B, K, d)`` per anchor.

    The loss, with softplus(x) = log(1 + e^x) the negative log-likelihood of a logistic classifier,

        L = mean over real pairs of softplus(-r) + mean over fake pairs of softplus(r).
    """

    predictions = (
        Prediction("ar1", "a permutation, signs and componentwise maps, for non-Gaussian innovations",
                   "Hyvärinen & Morioka 2017, Theorem 1", "mcc_pearson", {"paper": 0.9, "smoke": 0.6},
                   process={"marginal.innovation": ("laplace",)}),
    )
    """What theory predicts for PCL (:mod:`identifiable_cl.predictions`; thresholds as hyvarinen2017 states them for
    up to four mixing layers)."""

    OPTION_DOCS = {
        'negatives': "the fake pairs' past points: 'rolled' (the batch's anchors rolled by one row, (h+_i, h_{i+1})) "
                     "or 'independent' (the DGP's separate negatives)",
        'lr': "learning rate of w₁, w₂, b, a and m (None = the trainer's loss lr)",
    }

    def __init__(self, *, dim: int, negatives: str = "rolled", lr: float | None = None):
        super().__init__()
        self.dim = check_dim(dim)
        self.negatives = checks.choice("negatives", negatives, PCL_NEGATIVES)
        self.lr = check_lr(lr)
        self.w1 = nn.Parameter(torch.ones(self.dim))
        self.w2 = nn.Parameter(-torch.ones(self.dim))
        self.b = nn.Parameter(torch.zeros(self.dim))
        self.a = nn.Parameter(torch.ones(self.dim))
        self.m = nn.Parameter(torch.zeros(()))
        self.requires_negatives = self.negatives == "independent"

    def score(self, current: Tensor, past: Tensor) -> Tensor:
        """r(y₁, y₂) ``(...)`` for the encodings h(y₁) = ``current`` and h(y₂) = ``past``, ``(..., d)`` that
        broadcast."""
        inner = self.w1 * current + self.w2 * past + self.b
        return (self.a * current.square()).sum(-1) - inner.abs().sum(-1) + self.m

    def fakes(self, h: Tensor, h_pos: Tensor, h_neg: Tensor | None) -> Tensor:
        """The scores of the fake pairs: ``(B,)`` for ``rolled``, ``(B, M)`` or ``(B, K)`` for ``independent``."""
        if self.negatives == "rolled":
            _check_batch(self.negatives, h.shape[0], self.config_key)
            return self.score(h_pos, h.roll(-1, dims=0))
        kind = _check_negatives(h, h_neg, self.config_key)
        return self.score(h_pos.unsqueeze(1), h_neg.unsqueeze(0) if kind == "shared" else h_neg)

    def forward(self, h: Tensor, h_pos: Tensor, h_neg: Tensor | None = None) -> Tensor:
        """Scalar loss for h (x_{t-1}), h_pos (x_t) ``(B, d)`` and h_neg None | ``(M, d)`` | ``(B, K, d)``."""
        h, h_pos, h_neg = prepared_inputs(h, h_pos, h_neg, self.dim, self.requires_negatives)
        real = self.score(h_pos, h)
        return -F.logsigmoid(real).mean() - F.logsigmoid(-self.fakes(h, h_pos, h_neg)).mean()

    def logs(self) -> dict[str, float | list[float]]:
        return {"a": self.a.detach().cpu().tolist(), "m": float(self.m.detach())}

    def extra_repr(self) -> str:
        return f"dim={self.dim}, negatives={self.negatives!r}"
