"""FaceNet's triplet loss (Schroff, Kalenichenko & Philbin, CVPR 2015)."""

from __future__ import annotations

import torch
from torch import Tensor

from dgp import checks
from identifiable_cl.losses.base import NEGATIVE_SETS, ContrastiveLoss, Pairs, check_dim, normalise, prepared_inputs
from identifiable_cl.losses import LOSSES

MINING = ("all", "hardest", "semihard")


@LOSSES.register("triplet")
class Triplet(ContrastiveLoss):
    """The triplet loss of FaceNet (Schroff et al. 2015) on squared Euclidean distances
    d²(a, b) = ||a - b||²: each triplet (anchor a, positive a+, negative c) costs

        l(a, c) = max(0, d²(a, a+) - d²(a, c) + m)

    with margin m. The negatives c come from the anchor's negative set N(a) (``negatives``; see
    ``identifiable_cl.losses.base``) and ``mining`` picks which of them count:

        all:       L(a) = (1 / |N(a)|) Σ_{c in N(a)} l(a, c)
        hardest:   L(a) = l(a, c*),  c* = argmin_{c in N(a)} d²(a, c)
        semihard:  L(a) = l(a, c*),  c* = argmin { d²(a, c) : c in N(a), d²(a, c) > d²(a, a+) },
                   and the hardest negative where no negative is farther than the positive,

    and L = mean over anchors of L(a) (2B anchors for ``symmetric`` and ``r24``, B otherwise).
    Every anchor has the same |N(a)|, so ``all`` is the plain mean over all triplets, the
    inactive ones (l = 0) included; FaceNet sums them instead. FaceNet calls the negatives
    farther from the anchor than the positive, d²(a, c) > d²(a, a+), semi-hard; ``semihard``
    takes the closest of them. Ties go to the first negative in the order of :func:`assemble`.
    d²(a, a+) and d²(a, c) are computed along different routes (row-wise difference, resp.
    ``torch.cdist``), so a negative at exactly the positive's distance (a negative equal to the
    positive) may or may not count as farther, as rounding decides. The selection itself
    carries no gradient; the selected triplet's loss does.

    ``normalize=True`` (the default; FaceNet's embeddings lie on the unit hypersphere) scales
    h, h+ and the negatives to unit norm first, so d² = 2 - 2 cos(a, b) and the margin lives on
    the scale [0, 4]; then ``needs_unit_norm`` is set and the encoder must output unit vectors
    (``encoder.normalize: sphere``). ``normalize=False`` uses the raw encodings.

    Negative sets: all of ``NEGATIVE_SETS``. With ``first_view`` the anchor itself is a
    negative at d² = 0: its triplet costs d²(a, a+) + m (a pull on the positive only), it is
    always the hardest negative, so ``hardest`` reduces to d²(a, a+) + m, and it is never
    semi-hard (0 > d²(a, a+) cannot hold). ``independent`` needs at least one DGP negative
    per anchor. The distances are summed or searched block by block (:class:`identifiable_cl.losses.base.Pairs`):
    the (R, K) matrix of distances is never held.
    """

    OPTION_DOCS = {
        'margin': 'margin m > 0 between the squared distances of the negative and of the positive (FaceNet: 0.2 on unit vectors)',
        'mining': 'all (mean over every triplet of the anchor), hardest (the closest negative) or semihard (the closest negative farther than the positive; the hardest where there is none)',
        'normalize': 'scale the encodings to unit norm, as FaceNet does (then the encoder must output unit vectors: encoder.normalize sphere)',
        'negatives': "the negative set N(a), see identifiable_cl.losses.base; 'first_view' includes the anchor itself at distance 0",
    }

    def __init__(
        self,
        *,
        dim: int,
        margin: float = 0.2,
        mining: str = "all",
        normalize: bool = True,
        negatives: str = "symmetric",
    ):
        super().__init__()
        self.dim = check_dim(dim)
        self.margin = checks.trainable("margin", checks.positive("margin", margin), "the loss grows with the margin")
        self.mining = checks.choice("mining", mining, MINING)
        self.normalize = checks.boolean("normalize", normalize)
        self.negatives = checks.choice("negatives", negatives, NEGATIVE_SETS)
        self.requires_negatives = self.negatives == "independent"
        self.needs_unit_norm = self.normalize

    def forward(self, h: Tensor, h_pos: Tensor, h_neg: Tensor | None = None) -> Tensor:
        """Scalar loss for h, h_pos (B, d) and h_neg None | (M, d) | (B, K, d)."""
        h, h_pos, h_neg = prepared_inputs(h, h_pos, h_neg, self.dim, self.requires_negatives)
        if self.normalize:
            h, h_pos, h_neg = normalise(h, h_pos, h_neg)
        # the l2 similarity is -||a - b||²: pos = -d²(a, a+), a negative's similarity -d²(a, c)
        pairs = Pairs(self.negatives, h, h_pos, h_neg, "l2", self.config_key)
        pairs.require(self.config_key, self.negatives, "the triplet loss")
        if self.mining == "all":
            # d²(a, a+) - d²(a, c) + m = sim(a, c) - sim(a, a+) + m
            hinges = pairs.total(lambda sim, pos: torch.clamp(sim - pos + self.margin, min=0))
            return hinges / (pairs.rows * pairs.n_neg)
        # the smallest d² is the largest similarity
        picked = pairs.nearest(semihard=self.mining == "semihard")
        return torch.clamp(picked - pairs.pos + self.margin, min=0).mean()

    def extra_repr(self) -> str:
        return (
            f"margin={self.margin:g}, mining={self.mining!r}, normalize={self.normalize}, "
            f"negatives={self.negatives!r}"
        )
