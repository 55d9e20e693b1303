"""InfoNCE with importance-weighted hard negatives (Robinson et al., ICLR 2021)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from dgp import checks
from identifiable_cl.losses.base import DECOUPLED, check_has_negatives, contrastive_loss
from identifiable_cl.losses.infonce import InfoNCE
from identifiable_cl.losses import LOSSES


@LOSSES.register("hard_negative")
class HardNegativeInfoNCE(InfoNCE):
    """Hard-negative InfoNCE (Robinson, Chuang, Sra, Jegelka 2021), optionally debiased.

    With logits l = sim / tau, positive l+ and N negatives l_1..l_N per anchor, the negatives
    are importance-weighted by w_k = exp(β l_k) (as in the authors' code, i.e. e^{β·sim} at
    tau = 1) and, optionally, debiased with the positive-class prior τ⁺:

        G = N · sum_k w_k e^{l_k} / sum_k w_k
        G = max((G - τ⁺ N e^{l+}) / (1 - τ⁺),  N e^{-1/tau})          (only when τ⁺ > 0)
        L = mean over anchors of  -l+ + log(e^{l+} + G)

    (minus log(1 + N) for ``reduction="logmeanexp"``). The decoupled reductions drop the
    positive from the denominator (see ``identifiable_cl.losses.base``):

        L = mean over anchors of  -l+ + log G          (``decoupled_logsumexp``)

    minus log N for ``decoupled_logmeanexp``, i.e. -l+ plus the log of the importance-weighted
    mean Σ_k w_k e^{l_k} / Σ_k w_k. Everything is evaluated in log space. β = 0 and τ⁺ = 0
    give InfoNCE exactly, with every reduction. The floor N e^{-1/tau} is the smallest possible
    sum for cosine similarity, so τ⁺ > 0 needs ``similarity="cosine"``. Debiasing cannot be
    decoupled: the debiased G subtracts τ⁺ N e^{l+}, which puts the positive back into the
    denominator (with a negative weight, and the floor then decides whether it counts at all),
    so τ⁺ > 0 needs ``reduction`` ``logsumexp`` or ``logmeanexp``. Its options are those of ``infonce``
    and the two of :attr:`OPTION_DOCS`.
    """

    predictions = ()
    """InfoNCE's predictions do not carry over to reweighted negatives; none is declared."""

    OPTION_DOCS = {
        'beta': 'concentration β >= 0 of the importance weights',
        'tau_plus': 'debiasing prior τ⁺ in [0, 1); 0 turns debiasing off',
    }

    def __init__(self, *, beta: float = 1.0, tau_plus: float = 0.0, **options):
        super().__init__(**options)
        self.beta = checks.trainable("beta", checks.non_negative("beta", beta), "the negatives' logits are tilted by it")
        self.tau_plus = checks.probability("tau_plus", tau_plus)
        if self.tau_plus == 1.0:
            checks.fail("tau_plus", tau_plus, "must lie in [0, 1)")
        if self.tau_plus > 0 and self.similarity != "cosine":
            reason = f"debiasing (tau_plus > 0) needs similarity 'cosine', not {self.similarity!r}"
            checks.fail("tau_plus", tau_plus, reason)
        if self.tau_plus > 0 and self.reduction in DECOUPLED:
            checks.fail(
                "reduction",
                self.reduction,
                f"debiasing (tau_plus={self.tau_plus:g} > 0) subtracts the positive's term from the "
                "negatives' sum, so the positive cannot be left out of the denominator; allowed with "
                "tau_plus > 0: 'logsumexp', 'logmeanexp' (or set tau_plus to 0 to decouple)",
            )

    def mi_bound(self, value: float, batch: int, separate: int | None) -> tuple[int, float] | None:
        """InfoNCE's bound (:class:`~identifiable_cl.losses.base.InfoNCEBound`) only without reweighting (β = 0, τ⁺ = 0): the
        importance weights change the denominator, which the bound does not allow."""
        return super().mi_bound(value, batch, separate) if self.beta == 0 and self.tau_plus == 0 else None

    def forward(self, h: Tensor, h_pos: Tensor, h_neg: Tensor | None = None) -> Tensor:
        """Scalar loss for h, h_pos (B, d) and h_neg None | (M, d) | (B, K, d)."""
        h, h_pos, h_neg, kind = self._prepare(h, h_pos, h_neg)
        scale = 1.0 / self.temperature.value()
        multipliers = (self.beta + 1.0, self.beta)
        return contrastive_loss(self.negatives, h, h_pos, h_neg, kind, scale, multipliers, self._row, self.config_key)

    def _row(self, pos: Tensor, lse: Tensor, scale: Tensor, n_neg: int) -> Tensor:
        """Rows (R,) from l+ (R,) and lse (R, 2) = log Σ_k [e^{(β+1) l_k}, e^{β l_k}]; scale = 1/tau."""
        check_has_negatives(self.reduction, n_neg)
        if n_neg < 1:
            raise ValueError(f"{self.config_key}.name='hard_negative' reweights the negatives and needs at least one "
                             "negative per anchor; got none (h_neg holds 0 negatives)")
        log_n = math.log(n_neg)
        log_g = lse[:, 0] - lse[:, 1] + log_n
        if self.tau_plus > 0:
            log_g = self._debias(log_g, pos, log_n, scale)
        rows = (log_g if self.reduction in DECOUPLED else torch.logaddexp(pos, log_g)) - pos
        if self.reduction == "decoupled_logmeanexp":
            rows = rows - log_n
        elif self.reduction == "logmeanexp":
            rows = rows - math.log(1 + n_neg)
        return rows

    def _debias(self, log_g: Tensor, pos: Tensor, log_n: float, scale: Tensor) -> Tensor:
        """log max((G - τ⁺ N e^{l+}) / (1 - τ⁺), N e^{-1/tau}) from log G, l+ (all (R,))."""
        gap = math.log(self.tau_plus) + log_n + pos - log_g
        below = gap < 0
        safe_gap = torch.where(below, gap, torch.full_like(gap, -1.0))
        debiased = log_g + torch.log(-torch.expm1(safe_gap)) - math.log1p(-self.tau_plus)
        floor = (log_n - scale).to(pos.dtype).expand_as(pos)
        return torch.maximum(torch.where(below, debiased, floor), floor)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, beta={self.beta:g}, tau_plus={self.tau_plus:g}"
