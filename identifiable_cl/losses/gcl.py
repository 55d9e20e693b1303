"""Generalized contrastive learning (Hyvärinen, Sasaki & Turner, AISTATS 2019) for a discrete auxiliary variable:
logistic regression of real (x, u) pairs against pairs with another observation's u."""

from __future__ import annotations

from typing import Any

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
from identifiable_cl.losses.ensemble import head_widths, projection_head
from identifiable_cl.losses.tcl import FEATURES

DEFAULT_BASIS = ("identity", "square")
"""φ(y) = (y, y²): the statistics of an exponential family of order 2, as Gaussian mean and scale modulation has."""
DEFAULT_X_TERM = (64, 64)
"""The hidden widths of m, the learnt term of x alone: an MLP d -> 64 -> 64 -> 1."""


def check_basis(value: Any) -> tuple[str, ...]:
    """A non-empty list of distinct names of :data:`~identifiable_cl.losses.tcl.FEATURES`."""
    if isinstance(value, str) or not isinstance(value, (list, tuple)) or not value:
        checks.fail("basis", value, f"a non-empty list of the pointwise functions {', '.join(FEATURES)}")
    for name in value:
        checks.choice("basis", name, FEATURES)
    if len(set(value)) != len(value):
        checks.fail("basis", value, "names a function twice")
    return tuple(value)


@LOSSES.register("gcl")
class GCL(ContrastiveLoss):
    """GCL's loss for a discrete auxiliary variable u (a segment, ``dgp.Batch.u``): binary logistic regression of
    real pairs (x, u_j) against pairs (x, u*_j) whose u is another row's, for x the anchor x_j and the positive
    x+_j of row j (both observations of its segment u_j: the run's conditional keeps the segment, as
    ``same_segment`` does; 2B real and 2B fake pairs per batch, as many observations as InfoNCE encodes), with the
    regression function

        r(x, u) = Σ_i Σ_k W_{u,i,k} φ_k(h_i(x)) + c_u + m(h(x)),
        L = mean over x, j of softplus(-r(x, u_j)) + mean over x, j of softplus(r(x, u*_j)),    u*_j = u_{j+1 mod B},

    W ``(S, d, K)`` and c ``(S,)`` learnt, started at 0; m an MLP R^d -> R of hidden widths ``x_term`` (LeakyReLU
    0.01), its last layer started at 0, so r starts at 0; softplus(x) = log(1 + e^x), the negative log-likelihood
    of a logistic classifier.

    Why m: with as many real as fake pairs, the Bayes-optimal logit is r*(x, u) = log p(x | u) − log p(x) =
    log p(s | u) − log p(s) (the mixing's Jacobian cancels). For sources conditionally independent given u,
    log p(s | u) = Σ_i q_i(s_i, u) is a sum over the coordinates, which the per-segment table of
    Σ_i ψ_i(h_i, u) (Hyvärinen, Sasaki & Turner 2019) holds with c_u its term of u alone; −log p(s) is a term of
    x alone that is no such sum (p(s) mixes the segments), so without m the regression cannot reach r* and its
    minimiser need not be the sources. m, a function of the whole feature vector, holds it, as the IIA-GCL score
    (hmorioka/IIA, ``igcl/igcl.py``) has a term of x alone and one of u alone. ``x_term: null`` leaves m out: the
    regression function as the paper writes it, Σ_i ψ_i(h_i(x), u).

    The default basis φ(y) = (y, y²) is an exponential family of order 2 in each source given u (Gaussian mean
    and scale modulation; the IIA-GCL code scores h² and h with modulated weights); ``abs`` gives Laplace scale
    modulation's |y|.

    The fake labels u* are the batch's labels rolled by one row, a fixed derangement that draws nothing, so a run
    stays reproducible and resumable; batch rows are independent draws, so each fake pair (x, u_{j+1}) is a draw
    of p(x) p(u), exactly, as the paper's randomised u (B >= 2). The theorems (ibid.): for sources conditionally
    independent given u in an exponential family whose modulation varies enough over u, the optimal h recovers
    the sources up to pointwise transforms, or, for families of order 1, their statistics up to a linear map.
    ``h_neg`` is not read.
    """

    OPTION_DOCS = {
        'segments': "S >= 2, the number of values of u the table holds; a run's process must draw as many "
                    "(dgp.marginal.segments, which it copies when left out)",
        'basis': "the pointwise functions φ_k of ψ_i(y, u) = Σ_k W_(u,i,k) φ_k(y): a list of 'identity', 'abs', "
                 "'square' (default [identity, square])",
        'x_term': "hidden widths of m, the learnt term of x alone (an MLP of h(x), default [64, 64]), or null for "
                  "none: the paper's separable form Σ_i ψ_i(h_i(x), u)",
        'lr': "learning rate of W and c (None = the trainer's loss lr)",
    }
    uses_aux = True
    mi_bound = None
    predictions = (
        Prediction("segments", "a linear map of the sources' absolute values |s|", "Hyvärinen, Sasaki & Turner "
                   "2019, Theorem 1", "mcc_ica_abs_pearson", {"paper": 0.9, "smoke": 0.4}),
    )
    """What theory predicts for GCL (:mod:`identifiable_cl.predictions`; thresholds as hyvarinen2019 states them for
    up to four mixing layers)."""
    """No bound on I(z; z+): the evaluation reads none
    (:func:`identifiable_cl.evaluation.information.information_metrics`)."""

    def __init__(self, *, dim: int, segments: int = DEFAULT_SEGMENTS, basis: Any = DEFAULT_BASIS,
                 x_term: Any = DEFAULT_X_TERM, lr: float | None = None):
        super().__init__()
        self.dim = check_dim(dim)
        self.segments = check_segments(segments)
        self.basis = check_basis(basis)
        widths = head_widths("x_term", x_term)
        self.lr = check_lr(lr)
        self.table = nn.Parameter(torch.zeros(self.segments, self.dim, len(self.basis)))
        self.offset = nn.Parameter(torch.zeros(self.segments))
        self.x_term = None if widths is None else projection_head(self.dim, [*widths, 1])
        if self.x_term is not None:
            nn.init.zeros_(self.x_term[-1].weight)
            nn.init.zeros_(self.x_term[-1].bias)

    def score(self, h: Tensor, u: Tensor) -> Tensor:
        """r(x, u) ``(N,)`` for encodings h = h(x) ``(N, d)`` and labels u ``(N,)`` int64."""
        statistics = torch.stack([FEATURES[name](h) for name in self.basis], dim=-1)
        r = (self.table.index_select(0, u) * statistics).sum((1, 2)) + self.offset.index_select(0, u)
        return r if self.x_term is None else r + self.x_term(h).squeeze(-1)

    def forward(self, h: Tensor, h_pos: Tensor, h_neg: Tensor | None = None, u: Tensor | None = None) -> Tensor:
        """Scalar loss for h, h_pos ``(B, d)`` (h_neg unread) and their segments u ``(B,)`` int64."""
        h, h_pos, _ = prepared_inputs(h, h_pos, h_neg, self.dim, False)
        u = checked_labels(u, h.shape[0], self.config_key, "gcl")
        if h.shape[0] < 2:
            raise ValueError(f"{self.config_key}.name='gcl' pairs each row with the next row's label u and needs at "
                             f"least 2 samples; got a batch of {h.shape[0]}")
        rows, real, fake = torch.cat([h, h_pos]), torch.cat([u, u]), u.roll(-1).repeat(2)
        return -F.logsigmoid(self.score(rows, real)).mean() - F.logsigmoid(-self.score(rows, fake)).mean()

    def extra_repr(self) -> str:
        return f"dim={self.dim}, segments={self.segments}, basis={list(self.basis)}"
