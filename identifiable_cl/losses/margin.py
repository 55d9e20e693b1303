"""The pairwise contrastive loss with a margin (Hadsell, Chopra & LeCun, CVPR 2006)."""

from __future__ import annotations

import torch
from torch import Tensor

from dgp import checks
from identifiable_cl.losses.base import NEGATIVE_SETS, ContrastiveLoss, Pairs, check_dim, prepared_inputs
from identifiable_cl.losses import LOSSES


def safe_sqrt(x: Tensor) -> Tensor:
    """sqrt(x) for x >= 0 with the gradient 0 at x = 0 (where sqrt's is infinite).

    The value is exact everywhere; only the derivative at exactly 0 is replaced. Both branches of
    the ``where`` are finite, so no inf or NaN reaches the backward pass.
    """
    positive = x > 0
    root = torch.sqrt(torch.where(positive, x, torch.ones_like(x)))
    return torch.where(positive, root, torch.zeros_like(x))


@LOSSES.register("margin")
class MarginContrastive(ContrastiveLoss):
    """The contrastive loss with a margin m of Hadsell, Chopra & LeCun (2006): positive pairs are
    pulled together, negative pairs pushed apart until they are at least m apart. Per anchor a
    with positive a+ and negative set N(a) (``negatives``; see ``identifiable_cl.losses.base``):

        L(a) = d(a, a+)² + (1 / |N(a)|) Σ_{c in N(a)} max(0, m - d(a, c))²,
        d(a, b) = ||a - b||_2  (Euclidean distance),

    and L = mean over anchors of L(a) (2B anchors for ``symmetric`` and ``r24``, B otherwise).
    Hadsell et al. weight both terms by 1/2; that common factor is dropped here. Each anchor's
    one similar pair weighs as much as the mean of its dissimilar pairs.

    Gradient at d = 0: d(a, c) = sqrt(d²) has no derivative where a = c. There the hinge term's
    gradient is taken as 0 (``safe_sqrt``: the value stays exact). Off that point the gradient of
    max(0, m - d)² in a is 2 (d - m) (a - c) / d, bounded by 2m, so it is finite however close a
    and c are.

    Negative sets: all of ``NEGATIVE_SETS``. ``first_view`` counts the anchor itself among its
    negatives, at distance 0: it adds the constant m² / B to each anchor's loss, without
    gradient, and the hinge terms of the other B - 1 negatives are divided by B, not B - 1.
    ``independent`` needs at least one DGP negative per
    anchor. ``r24`` gives the same loss as ``symmetric``: the two pool the same negative pairs,
    only assigned to other anchors, and each pair's term here depends on the pair alone. The
    negative pairs are summed block by block (:class:`identifiable_cl.losses.base.Pairs`): the (R, K)
    matrix of distances is never held.
    """

    OPTION_DOCS = {
        'margin': 'margin m > 0: negative pairs closer than m are pushed apart (Hadsell et al.; default 1)',
        'negatives': "the negative set N(a), see identifiable_cl.losses.base; 'first_view' includes the anchor itself at distance 0 (a constant m²/B per anchor)",
    }

    def __init__(self, *, dim: int, margin: float = 1.0, negatives: str = "symmetric"):
        super().__init__()
        self.dim = check_dim(dim)
        self.margin = checks.trainable("margin", checks.positive("margin", margin), "the loss grows with the margin")
        self.negatives = checks.choice("negatives", negatives, NEGATIVE_SETS)
        self.requires_negatives = self.negatives == "independent"

    def forward(self, h: Tensor, h_pos: Tensor, h_neg: Tensor | None = None) -> Tensor:
        """Scalar loss for h, h_pos (B, d) and h_neg None | (M, d) | (B, K, d)."""
        h, h_pos, h_neg = prepared_inputs(h, h_pos, h_neg, self.dim, self.requires_negatives)
        # the l2 similarity is -||a - b||², so the terms hold minus the squared distances
        pairs = Pairs(self.negatives, h, h_pos, h_neg, "l2", self.config_key)
        pairs.require(self.config_key, self.negatives, "the margin loss")
        hinges = pairs.total(lambda sim, _: torch.clamp(self.margin - safe_sqrt(-sim), min=0).square())
        return -pairs.pos.mean() + hinges / (pairs.rows * pairs.n_neg)

    def extra_repr(self) -> str:
        return f"margin={self.margin:g}, negatives={self.negatives!r}"
