"""The spectral contrastive loss (HaoChen, Wei, Gaidon & Ma, NeurIPS 2021)."""

from __future__ import annotations

from torch import Tensor

from dgp import checks
from identifiable_cl.losses.base import NEGATIVE_SETS, ContrastiveLoss, Pairs, check_dim, prepared_inputs
from identifiable_cl.losses import LOSSES


@LOSSES.register("scl")
class SpectralContrastive(ContrastiveLoss):
    """The spectral contrastive loss of HaoChen et al. (2021). Its population form is

        L(f) = -2 E_{x, x+}[f(x)ᵀ f(x+)] + E_{x, x'}[(f(x)ᵀ f(x'))²]

    with (x, x+) a positive pair and x, x' independent. Estimated on a batch with the anchors'
    positives a+ and negative sets N(a) (``negatives``; see ``identifiable_cl.losses.base``):

        L = -2 · mean over anchors a of aᵀa+  +  mean over all pairs (a, c), c in N(a), of (aᵀc)²

    Plain dot products of the encodings: no normalisation, no temperature. Every anchor has
    the same number |N(a)| of negatives, so the second term is also the mean over anchors of
    (1 / |N(a)|) Σ_{c in N(a)} (aᵀc)².

    Negative sets: all of ``NEGATIVE_SETS``. The authors' code
    (jhaochenz96/spectral_contrastive_learning) takes the negatives from the other samples of
    the batch, pairing each first view with the second views of the other samples:

        L = -2/B Σ_i h_iᵀh+_i + 1/(B(B-1)) Σ_{i≠j} (h_iᵀh+_j)²,

    which is ``one_sided`` here. ``symmetric`` (the default), ``r24`` and ``first_view_others``
    use other pairs of distinct samples, which estimate the same second term when both views
    have the same marginal; ``r24`` gives the same loss as ``symmetric`` (the two pool the same
    pairs, only assigned to other anchors). ``independent`` uses the DGP's separate negatives
    (at least one per anchor). ``first_view`` includes each anchor's pair with itself,
    (hᵀh)² = ||h||⁴: its second term is (B - 1)/B times that of ``first_view_others`` plus
    mean_i ||h_i||⁴ / B, a biased estimate. The authors' code also moves any encoding whose
    norm exceeds sqrt(μ) onto the sphere of radius sqrt(μ) and divides the loss by μ (a
    hyperparameter, 1 by default); that is not done here.
    """

    OPTION_DOCS = {
        'negatives': "the negative set N(a), see identifiable_cl.losses.base; 'one_sided' is the batch estimate of the authors' code, 'first_view' adds each anchor's (hᵀh)² = ||h||⁴",
    }

    def __init__(self, *, dim: int, negatives: str = "symmetric"):
        super().__init__()
        self.dim = check_dim(dim)
        self.negatives = checks.choice("negatives", negatives, NEGATIVE_SETS)
        self.requires_negatives = self.negatives == "independent"

    def forward(self, h: Tensor, h_pos: Tensor, h_neg: Tensor | None = None) -> Tensor:
        """Scalar loss for h, h_pos (B, d) and h_neg None | (M, d) | (B, K, d)."""
        h, h_pos, h_neg = prepared_inputs(h, h_pos, h_neg, self.dim, self.requires_negatives)
        pairs = Pairs(self.negatives, h, h_pos, h_neg, "dot", self.config_key)
        pairs.require(self.config_key, self.negatives, "the spectral contrastive loss")
        squares = pairs.total(lambda sim, _: sim.square())
        return -2 * pairs.pos.mean() + squares / (pairs.rows * pairs.n_neg)

    def extra_repr(self) -> str:
        return f"negatives={self.negatives!r}"
