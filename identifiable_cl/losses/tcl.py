"""Time-contrastive learning (Hyvärinen & Morioka, NeurIPS 2016): multinomial logistic regression of each
observation's segment from its features."""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dgp import checks
from dgp.segments import DEFAULT_SEGMENTS
from identifiable_cl.losses import LOSSES
from identifiable_cl.predictions import Prediction
from identifiable_cl.losses.base import (
    ContrastiveLoss, check_dim, check_lr, check_segments, checked_labels, prepared_inputs,
)

FEATURES: dict[str, Callable[[Tensor], Tensor]] = {"identity": lambda y: y, "abs": torch.abs, "square": torch.square}
"""Pointwise nonlinearities φ applied to each encoder output before the regression."""


@LOSSES.register("tcl")
class TCL(ContrastiveLoss):
    """TCL's loss: multinomial logistic regression over the S segments on the features φ(h(x)), φ pointwise,

        logit_τ(x) = w_τᵀ φ(h(x)) + b_τ,    τ = 0..S-1,
        L = mean over x in {x_j, x+_j : j = 1..B} of [ -logit_{u_j}(x) + log Σ_τ exp logit_τ(x) ],

    the cross-entropy of the segments u ``(B,)`` (``dgp.Batch.u``) for h, h_pos ``(B, d)``: anchor and positive
    of row j are both observations of its segment u_j (the run's conditional keeps the segment, as
    ``same_segment`` does), so a batch gives 2B labelled observations, as many as InfoNCE encodes; W ``(S, d)``
    and b ``(S,)`` learnt, started as torch's linear layer (from the run's ``loss`` stream). φ is ``abs`` by default:
    the official code (hmorioka/TCL, ``tcl/tcl.py``) puts an absolute value on the feature network's last layer,
    as |s_i| is the sufficient statistic of its scale-modulated Laplace sources; ``square`` suits Gaussian
    scale modulation, ``identity`` leaves h as it is.

    The theorem (Hyvärinen & Morioka 2016, Theorem 1): for sources whose log-density given the segment is
    Σ_i λ_i(τ) q(s_i) + terms of τ alone, with the S×n matrix of the λ_i(τ) - λ_i(0) of full rank, the optimal
    features satisfy φ(h(x)) = A q(s) + c, so q(s) is recovered up to a linear map (the official code then runs
    linear ICA on them). ``h_neg`` is not read.
    """

    OPTION_DOCS = {
        'segments': "S >= 2, the number of segments the regression tells apart; a run's process must draw as many "
                    "(dgp.marginal.segments, which it copies when left out)",
        'feature': "the pointwise nonlinearity φ on h before the regression: 'abs' (the official code's), 'square' or "
                   "'identity'",
        'lr': "learning rate of W and b (None = the trainer's loss lr)",
    }
    uses_aux = True
    mi_bound = None
    predictions = (
        Prediction("segments", "a linear map of the sources' absolute values |s|", "Hyvärinen & Morioka 2016, "
                   "Theorem 1", "mcc_ica_abs_pearson", {"paper": 0.9, "smoke": 0.5}),
    )
    """What theory predicts for TCL (:mod:`identifiable_cl.predictions`; thresholds as hyvarinen2016 states them for
    up to four mixing layers)."""
    """No bound on I(z; z+): the evaluation reads none
    (:func:`identifiable_cl.evaluation.information.information_metrics`)."""

    def __init__(self, *, dim: int, segments: int = DEFAULT_SEGMENTS, feature: str = "abs", lr: float | None = None):
        super().__init__()
        self.dim = check_dim(dim)
        self.segments = check_segments(segments)
        self.feature = checks.choice("feature", feature, FEATURES)
        self.lr = check_lr(lr)
        self.regression = nn.Linear(self.dim, self.segments)

    def logits(self, h: Tensor) -> Tensor:
        """``(B, S)``: w_τᵀ φ(h) + b_τ for encodings h ``(B, d)``."""
        return self.regression(FEATURES[self.feature](h))

    def forward(self, h: Tensor, h_pos: Tensor, h_neg: Tensor | None = None, u: Tensor | None = None) -> Tensor:
        """Scalar loss for h, h_pos ``(B, d)`` (h_neg unread) and their segments u ``(B,)`` int64."""
        h, h_pos, _ = prepared_inputs(h, h_pos, h_neg, self.dim, False)
        u = checked_labels(u, h.shape[0], self.config_key, "tcl")
        return F.cross_entropy(self.logits(torch.cat([h, h_pos])), torch.cat([u, u]))

    def extra_repr(self) -> str:
        return f"dim={self.dim}, segments={self.segments}, feature={self.feature!r}"
