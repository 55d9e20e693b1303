"""The Nguyen–Wainwright–Jordan lower bound on the mutual information of the views, as a loss."""

from __future__ import annotations

import torch
from torch import Tensor

from identifiable_cl.losses.base import Pairs, bound_candidates
from identifiable_cl.losses.nce import CriticLoss
from identifiable_cl.losses import LOSSES


@LOSSES.register("nwj")
class NWJ(CriticLoss):
    """The NWJ bound (Nguyen, Wainwright & Jordan, IEEE Trans. Inf. Theory 2010; I_NWJ of Poole et al.,
    "On variational bounds of mutual information", ICML 2019), the f-divergence (KL) bound

        I(x; y) >= E_{p(x, y)}[f(x, y)] - e^{-1} E_{p(x) p(y)}[e^{f(x, y)}]    for every critic f,

    with equality at f(x, y) = 1 + log p(y | x) / p(y). The critic is

        f(a, b) = s · sim(a, b) + c,    s = 1 / tau,

    with the offset c learnt by default (it can then supply the optimum's constant 1), and the
    loss is minus the bound's estimate on a batch:

        L = -( (1/R) Σ_r f(a_r, a_r+) - e^{-1} (1/(R ν)) Σ_r Σ_{b in N(a_r)} e^{f(a_r, b)} ),

    the positive term averaged over the R anchor rows (2B for ``symmetric`` and ``r24``, with
    their positive logits as in ``identifiable_cl.losses.base.assemble``; B otherwise) and the
    negative term over every finite (row, negative) pair, ν = n_neg a row; it is computed as
    mean e^{f - 1}.

    -L is a lower bound on I(z; z+) for any critic when the negatives are drawn from the marginal:
    its expectation over batches is the right-hand side above for the critic f(g(x), g(x')) of the
    encoder g's outputs, which is at most I(x; x+), and I(x; x+) = I(z; z+) for an invertible mixing. A
    batch's pairs (a_r, a_r+) are draws of the joint and each (a_r, b) with b in N(a_r) one of the
    product of the marginals, as long as the negatives are independent of their anchor: the other
    pairs' encodings for the in-batch sets (for ``symmetric``, a view of another pair stands for a
    draw of the anchor's view's marginal; the two views share one marginal in this project's
    processes), the DGP's separate samples for ``independent`` when they are drawn from p(z) (not
    when tilted). One batch gives an unbiased, noisy estimate of the bound for its critic; unlike
    InfoNCE's log K - L, the bound is not capped at log K. ``mi_bound`` reports (K, -L), K the
    candidates per anchor (:func:`identifiable_cl.losses.base.bound_candidates`). ``first_view``
    is refused (:class:`identifiable_cl.losses.nce.CriticLoss`): the anchor is no draw of the
    marginal independent of itself.
    """

    LOSS_NAME = "nwj"

    def objective(self, pos: Tensor, pairs: Pairs, scale: float, offset: Tensor) -> Tensor:
        negative = pairs.total(lambda sim, _, c: torch.exp(scale * sim + c - 1.0), offset)
        return negative / (pairs.rows * pairs.n_neg) - pos.mean()

    mi_bound_key = "mi_nwj_bound"

    def mi_bound(self, value: float, batch: int, separate: int | None) -> tuple[int, float] | None:
        """(K, -value): -L is the NWJ bound itself; K as InfoNCE's bound counts the candidates per anchor
        (2B - 1, B, or separate + 1), None where that count is (``independent`` without ``separate``)."""
        k = bound_candidates(self.negatives, "logsumexp", batch, separate)
        return None if k is None else (k, -value)
