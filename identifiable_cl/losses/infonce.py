"""InfoNCE with a chosen similarity, negative set and reduction (Z21, vK21, R24)."""

from __future__ import annotations

import functools

from torch import Tensor

from dgp import checks
from identifiable_cl.losses.base import (
    NEGATIVE_SETS,
    REDUCTIONS,
    SIMILARITIES,
    ContrastiveLoss,
    InfoNCEBound,
    Temperature,
    Terms,
    assemble,
    check_dim,
    check_lr,
    check_tau,
    contrastive_loss,
    infonce_row,
)
from identifiable_cl.losses.queue import QUEUE, queue_options
from identifiable_cl.losses import LOSSES
from identifiable_cl.predictions import Prediction


@LOSSES.register("infonce")
class InfoNCE(InfoNCEBound, ContrastiveLoss):
    """InfoNCE (Oord et al. 2018; the objective of Z21):

        L = mean over anchors of  -l(a, a+) + log sum_{c in {a+} u N(a)} exp l(a, c),
        l(a, b) = sim(a, b) / tau,

    with ``log mean`` in place of ``log sum`` for ``reduction="logmeanexp"``. The decoupled
    reductions leave the positive out of the denominator (CEBRA's InfoNCE; the loss of
    Decoupled Contrastive Learning, Yeh et al. 2022, with the symmetric negatives):

        L = mean over anchors of  -l(a, a+) + log sum_{c in N(a)} exp l(a, c)

    Reference codes reproduced exactly:
        Z21 (cl-ica, LpSimCLRLoss with simclr_compatibility_mode / SimCLRLoss on the fixed
        unit sphere): negatives="first_view", reduction="logsumexp", similarity l1/l2/l3 or
        dot (cosine gives the same on unit-norm outputs).
        vK21 (ssl_identifiability, LpSimCLRLoss defaults): negatives="independent" with a
        shared fresh batch, reduction="logmeanexp", similarity="l2", tau=1.
        R24 (AnInfoNCE code): negatives="r24", reduction="logsumexp" (see ``aninfonce``).
    Their other modes, with the positive out of the denominator:
        Z21 (LpSimCLRLoss with its default simclr_compatibility_mode=False, roll negatives):
        negatives="first_view", reduction="decoupled_logmeanexp", similarity l1/l2/l3.
        vK21 (LpSimCLRLoss with simclr_denominator=False): negatives="independent",
        reduction="decoupled_logmeanexp", similarity="l2".
        CEBRA (FixedCosineInfoNCE, FixedEuclideanInfoNCE on (ref, pos, neg) samples):
        negatives="independent" with shared (M, d) negatives, reduction="decoupled_logsumexp",
        similarity "dot" on unit vectors resp. "l2" (CEBRA expands the squared distance, so
        agreement is up to rounding).
    MoCo's form (He et al. 2020, with MoCo v3's in-batch keys): negatives="queue" with its ``queue``
    option, reduction="logsumexp", similarity="cosine" (``identifiable_cl.losses.queue``).
    """

    batches_over_runs = True
    predictions = (
        Prediction("sphere_vmf", "an orthogonal map", "Zimmermann et al. 2021, Theorem 2, for vMF positives and a "
                   "cosine critic matched to them, τ = 1/κ", "r2_linear", {"paper": 0.98, "smoke": 0.9}, loss={"similarity": ("cosine", "dot")},
                   setting={"loss.tau": 0.1, "dgp.conditional.kappa": 10.0}),
        Prediction("box_lp", "a permutation and signs", "Zimmermann et al. 2021, Theorem 5, for a critic whose p is "
                   "the positives'", "mcc_pearson", {"paper": 0.95, "smoke": 0.85}, loss={"similarity": ("l1",)},
                   process={"conditional.name": ("laplace",)}),
        Prediction("box_lp", "an affine map", "Zimmermann et al. 2021, Theorem 5, for a critic whose p is the "
                   "positives'", "r2_linear", {"paper": 0.98, "smoke": 0.85}, loss={"similarity": ("l2",)},
                   process={"conditional.name": ("normal",)}),
        Prediction("content_style", "an invertible map of the content block", "von Kügelgen et al. 2021, Theorem "
                   "4.4", "r2_nonlinear_content", {"paper": 0.95, "smoke": 0.9}),
        Prediction("views", "an invertible map of the content block the views share", "Daunhawer et al. 2023, "
                   "Theorem 1", "r2_nonlinear_content", {"paper": 0.95, "smoke": 0.8}),
        Prediction("sphere_anisotropic", "an isotropic critic loses the strongly changing (low-Λ) latents",
                   "Rusak et al. 2024", "r2_linear_lambda_5", {"paper": 0.5, "smoke": 0.5}, recovers=False,
                   loss={"similarity": ("cosine", "dot")}, process={"conditional.lambdas": ("bimodal",)},
                   setting={"loss.tau": 1.0, "loss.negatives": "r24", "dgp.conditional.shell": 0.1}),
    )
    """What theory predicts for this loss (:mod:`identifiable_cl.predictions`; thresholds as the experiments
    zimmermann2021, vonkugelgen2021, daunhawer2023 and rusak2024 state them)."""

    OPTION_DOCS = {
        'similarity': 'cosine (aᵀb / (||a|| ||b||); the encoder should output unit vectors), dot (aᵀb), or l1/l2/l3 (-||a - b||_p^p, p = 1, 2, 3: the Laplace, Gaussian and generalised-normal conditionals of Z21)',
        'tau': 'temperature > 0 (Z21 default 1)',
        'learn_tau': 'learn tau (parametrised as exp(log tau), started at tau)',
        'negatives': 'the negative set N(a), see identifiable_cl.losses.base; queue: MoCo\'s queue of momentum-encoder keys',
        'queue': 'with negatives: queue, {size: S keys queued (default 4096), momentum: m in [0, 1] of the key encoder (default 0.999)}; see identifiable_cl.losses.queue',
        'reduction': 'logsumexp or logmeanexp (positive in the denominator), or decoupled_logsumexp or decoupled_logmeanexp (negatives only); see identifiable_cl.losses.base for the equations',
        'lr': "learning rate of the learnt tau (None = the trainer's loss lr)",
    }

    def __init__(
        self,
        *,
        dim: int,
        similarity: str = "cosine",
        tau: float = 1.0,
        learn_tau: bool = False,
        negatives: str = "symmetric",
        reduction: str = "logsumexp",
        lr: float | None = None,
        queue: dict | None = None,
    ):
        super().__init__()
        self.dim = check_dim(dim)
        self.similarity = checks.choice("similarity", similarity, SIMILARITIES)
        self.temperature = Temperature(check_tau(tau), checks.boolean("learn_tau", learn_tau))
        self.negatives = checks.choice("negatives", negatives, NEGATIVE_SETS + (QUEUE,))
        self.reduction = checks.choice("reduction", reduction, REDUCTIONS)
        self.lr = check_lr(lr)
        self.queue = queue_options(queue, self.negatives)
        self.requires_negatives = self.negatives == "independent"
        self.needs_unit_norm = self.similarity == "cosine"

    def terms(self, h: Tensor, h_pos: Tensor, h_neg: Tensor | None = None) -> Terms:
        """Logits sim / tau of positives ``(R,)`` and negatives ``(R, K)`` (-inf = excluded)."""
        h, h_pos, h_neg, kind = self._prepare(h, h_pos, h_neg)
        return assemble(self.negatives, h, h_pos, h_neg, kind, self.temperature.value(), self.config_key)

    def forward(self, h: Tensor, h_pos: Tensor, h_neg: Tensor | None = None) -> Tensor:
        """Scalar loss for h, h_pos (B, d) and h_neg None | (M, d) | (B, K, d)."""
        h, h_pos, h_neg, kind = self._prepare(h, h_pos, h_neg)
        row = functools.partial(infonce_row, reduction=self.reduction)
        scale = 1.0 / self.temperature.value()
        return contrastive_loss(self.negatives, h, h_pos, h_neg, kind, scale, (1.0,), row, self.config_key)

    def logs(self) -> dict[str, float | list[float]]:
        return {"tau": self.temperature.item()}

    def extra_repr(self) -> str:
        return (
            f"similarity={self.similarity!r}, tau={self.temperature.item():g}, "
            f"learn_tau={self.temperature.learn}, negatives={self.negatives!r}, "
            f"reduction={self.reduction!r}" + (f", queue={dict(self.queue._asdict())}" if self.queue else "")
        )

