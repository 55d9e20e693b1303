"""Binary noise-contrastive estimation (Gutmann & Hyvärinen 2010, 2012) with a scaled, offset critic.

Also home of :class:`CriticLoss`, the shared part of the losses that score pairs with the critic
f(a, b) = s · sim(a, b) + c (``nce`` here, ``nwj`` in :mod:`identifiable_cl.losses.nwj`).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dgp import checks
from identifiable_cl.losses.base import (
    NEGATIVE_SETS,
    SIMILARITIES,
    ContrastiveLoss,
    Pairs,
    Terms,
    assemble,
    check_dim,
    check_lr,
    check_tau,
)
from identifiable_cl.losses import LOSSES

CRITIC_NEGATIVE_SETS = tuple(n for n in NEGATIVE_SETS if n != "first_view")
"""The negative sets a critic loss takes: every one but ``first_view``, whose anchor is its own negative."""


def check_offset(value: Any) -> float:
    """A finite starting offset that float32 holds as a finite number."""
    v = checks.number("offset", value)
    if abs(v) > checks.FLOAT32_RANGE[1]:
        checks.fail("offset", value, f"must lie in [-{checks.FLOAT32_RANGE[1]:.3g}, {checks.FLOAT32_RANGE[1]:.3g}]: "
                                     "float32 turns it into inf")
    return checks.trainable("offset", v, "the logits are shifted by it")


class CriticLoss(ContrastiveLoss):
    """Base of the losses built on the critic f(a, b) = s · sim(a, b) + c, s = 1 / tau, c the offset.

    ``forward`` scores each anchor's positive and its negative pairs (:class:`identifiable_cl.losses.base.Pairs`,
    never their (R, K) matrix); a subclass turns them into the loss in ``objective``. ``terms`` gives the
    critic's values as the dense matrices of :func:`identifiable_cl.losses.base.assemble`, for inspection.
    The offset c is a learnt scalar (``learn_offset``) or a fixed buffer; tau is fixed.

    The negative set ``first_view`` is refused: it makes each anchor its own negative, a pair that is
    no draw of the noise (marginal) distribution these objectives contrast the positives with, and
    that cosine and Lp critics score highest of all (s + c resp. c). Both losses sum over the pairs
    with the same weight in every row, so ``r24`` gives the value and gradients of ``symmetric``: the
    two sets hold the same pairs, ``r24`` only hands the cross-view negatives to other rows.
    """

    OPTION_DOCS = {
        'similarity': 'cosine (aᵀb / (||a|| ||b||); the encoder should output unit vectors), dot (aᵀb), or l1/l2/l3 (-||a - b||_p^p, p = 1, 2, 3)',
        'tau': 'temperature > 0: the critic is sim / tau + offset',
        'offset': 'the critic offset c (its starting value when learnt)',
        'learn_offset': 'learn the offset c (otherwise it stays at offset)',
        'negatives': "the negative set N(a), see identifiable_cl.losses.base; every set but 'first_view' (the anchor would be its own negative)",
        'lr': "learning rate of the learnt offset (None = the trainer's loss lr)",
    }

    LOSS_NAME = "critic"
    """The registry name, for messages."""

    def __init__(
        self,
        *,
        dim: int,
        similarity: str = "cosine",
        tau: float = 1.0,
        offset: float = 0.0,
        learn_offset: bool = True,
        negatives: str = "symmetric",
        lr: float | None = None,
    ):
        super().__init__()
        self.dim = check_dim(dim)
        self.similarity = checks.choice("similarity", similarity, SIMILARITIES)
        self.tau = check_tau(tau)
        start = check_offset(offset)
        self.learn_offset = checks.boolean("learn_offset", learn_offset)
        if negatives == "first_view":
            checks.fail(
                "negatives", negatives,
                f"{self.LOSS_NAME} contrasts each positive with negatives drawn independently of its anchor, and "
                "'first_view' makes every anchor its own negative; allowed: "
                + ", ".join(map(repr, CRITIC_NEGATIVE_SETS))
                + " ('first_view_others' is 'first_view' without the anchor itself)",
            )
        self.negatives = checks.choice("negatives", negatives, CRITIC_NEGATIVE_SETS)
        self.lr = check_lr(lr)
        if self.learn_offset:
            self.offset = nn.Parameter(torch.tensor(start))
        else:
            self.register_buffer("offset", torch.tensor(start))
        self.requires_negatives = self.negatives == "independent"
        self.needs_unit_norm = self.similarity == "cosine"

    def terms(self, h: Tensor, h_pos: Tensor, h_neg: Tensor | None = None) -> Terms:
        """Critic values f = sim / tau + c of the positives ``(R,)`` and negatives ``(R, K)`` (-inf = excluded)."""
        h, h_pos, h_neg, kind = self._prepare(h, h_pos, h_neg)
        logits = assemble(self.negatives, h, h_pos, h_neg, kind, 1.0, self.config_key)
        self._check_count(logits.n_neg)
        scale = 1.0 / self.tau
        c = self.offset.to(logits.pos.dtype)
        return Terms(scale * logits.pos + c, scale * logits.neg + c, logits.n_neg)

    def forward(self, h: Tensor, h_pos: Tensor, h_neg: Tensor | None = None) -> Tensor:
        """Scalar loss for h, h_pos (B, d) and h_neg None | (M, d) | (B, K, d)."""
        h, h_pos, h_neg, kind = self._prepare(h, h_pos, h_neg)
        pairs = Pairs(self.negatives, h, h_pos, h_neg, kind, self.config_key)
        self._check_count(pairs.n_neg)
        scale = 1.0 / self.tau
        offset = self.offset.to(pairs.pos.dtype)
        return self.objective(scale * pairs.pos + offset, pairs, scale, offset)

    def _check_count(self, n_neg: int) -> None:
        if n_neg < 1:
            raise ValueError(
                f"{self.config_key}.name={self.LOSS_NAME!r} needs at least one negative per anchor; "
                "got none (h_neg holds 0 negatives)"
            )

    def objective(self, pos: Tensor, pairs: Pairs, scale: float, offset: Tensor) -> Tensor:
        """The scalar loss from the critic's values on the positives ``pos (R,)`` and the negative ``pairs``, on
        which the critic is ``scale · sim + offset``."""
        raise NotImplementedError

    def logs(self) -> dict[str, float | list[float]]:
        return {"tau": self.tau, "offset": float(self.offset.detach())}

    def extra_repr(self) -> str:
        return (
            f"similarity={self.similarity!r}, tau={self.tau:g}, offset={float(self.offset.detach()):g}, "
            f"learn_offset={self.learn_offset}, negatives={self.negatives!r}"
        )


def softplus(x: Tensor) -> Tensor:
    """log(1 + e^x), exact for every x (``F.softplus`` returns x itself above its threshold)."""
    return -F.logsigmoid(-x)


@LOSSES.register("nce")
class NCE(CriticLoss):
    """Binary noise-contrastive estimation (Gutmann & Hyvärinen, AISTATS 2010; JMLR 13, 2012).

    NCE fits an unnormalised log-model G by logistic regression of data against ν times as many
    noise samples: with the log-prior correction the classifier's probability of "data" is
    h(u) = σ(G(u) - log ν) (the 2012 paper's r_ν(G) = 1 / (1 + ν e^{-G})), and the loss is
    the negative log-likelihood -log h(x) - Σ_j log(1 - h(y_j)) per data sample x and its ν
    noise samples y_j. Here it is the conditional form (one classification per anchor, as in
    Mnih & Teh 2012 and the "binary" NCE of Ma & Collins 2018): the data sample is the anchor's
    positive, the noise samples are its ν = n_neg negatives N(a) of the negative set
    (``identifiable_cl.losses.base``), and G is the critic

        f(a, b) = s · sim(a, b) + c,    s = 1 / tau,

    whose offset c, learnt by default, plays the part of the negative log-partition NCE
    estimates as a parameter (2012, Section 2.1). The code implements, with σ(-x) = e^{-softplus(x)},

        L_row(a) = softplus(-(f(a, a+) - log ν)) + Σ_{b in N(a)} softplus(f(a, b) - log ν)
        L = mean over the anchor rows of L_row

    (rows: 2B for ``symmetric`` and ``r24``, with their positive logits as in ``assemble``; B
    otherwise); excluded pairs contribute nothing. At the population optimum of a rich enough critic
    f(a, b) = log p(b | a) / p_n(b), the log-ratio of the positive's conditional to the noise
    density (the pointwise mutual information when the negatives are draws of the marginal). The
    loss bounds no mutual information here (its ``mi_bound`` is None). ``first_view`` is refused
    (:class:`CriticLoss`): the anchor itself would be one of its noise samples.
    """

    LOSS_NAME = "nce"

    def objective(self, pos: Tensor, pairs: Pairs, scale: float, offset: Tensor) -> Tensor:
        log_nu = math.log(pairs.n_neg)
        noise = pairs.total(lambda sim, _, c: softplus(scale * sim + c - log_nu), offset)
        return softplus(log_nu - pos).mean() + noise / pairs.rows
