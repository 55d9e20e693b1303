"""Shared pieces of the contrastive losses: base class, similarities, negative sets, reductions.

Every loss scores an anchor encoding ``a`` against its positive ``a+`` and a set N(a) of
n_neg negatives ``{a-_k}`` through logits ``l(a, b) = sim(a, b) / tau`` and takes, per anchor,

    L = -l(a, a+) + log sum_{c in {a+} u N(a)} exp l(a, c)       (reduction "logsumexp")
    L = -l(a, a+) + log mean_{c in {a+} u N(a)} exp l(a, c)      (reduction "logmeanexp")
    L = -l(a, a+) + log sum_{c in N(a)} exp l(a, c)              (reduction "decoupled_logsumexp")
    L = -l(a, a+) + log mean_{c in N(a)} exp l(a, c)             (reduction "decoupled_logmeanexp")

averaged over anchors. The first two put the positive in the denominator (the softmax
cross-entropy of the positive); the ``decoupled_*`` reductions leave it out, so that with
lse = log sum_{c in N(a)} exp l(a, c) and p = e^{l(a, a+)} / (e^{l(a, a+)} + e^{lse}),

    L_decoupled_logsumexp = L_logsumexp - log(1 + e^{l(a, a+) - lse}) = -log(p / (1 - p)).

The positive's logit then gets the gradient -1 instead of -(1 - p): the negative-positive
coupling factor 1 - p is gone, which is the point of the Decoupled Contrastive Learning loss
(Yeh et al., ECCV 2022; ``decoupled_logsumexp`` with the ``symmetric`` negatives below). Each
log-mean form is its log-sum form minus a constant, log(1 + n_neg) resp. log n_neg: the same
gradients and minimisers, and the value 0 when all logits are equal. Both decoupled forms are
offered because the reference codes contain both: ``decoupled_logmeanexp`` is a mode of Z21's
and vK21's loss class, ``decoupled_logsumexp`` is CEBRA's InfoNCE. The decoupled forms need
n_neg >= 1 and can be negative: unlike the coupled forms they are not bounded below by 0
(``logsumexp``) or -log(1 + n_neg) (``logmeanexp``). For cosine they are bounded below by
-2/tau (plus log n_neg for the log-sum); for dot and Lp similarities on unbounded encodings
they have no lower bound in general.

Which configuration of each reference code puts the positive in the denominator (read in
the repositories' ``losses.py`` and main scripts):

- Z21 (brendel-group/cl-ica): ``SimCLRLoss`` and ``LpSimCLRLoss(simclr_compatibility_mode=True)``,
  the only configurations ``main_mlp.py``, ``main_3dident.py`` and ``kitti_masks/solver.py``
  build, take the logsumexp over negatives and positive (``logsumexp``). The class default
  ``simclr_compatibility_mode=False`` takes the logmeanexp over the negatives alone
  (``decoupled_logmeanexp``), and its ``AlignmentUniformityLoss`` pairs an alignment term with
  a logmeanexp over negatives only (no positive, no tau).
- vK21 (ysharma1126/ssl_identifiability): ``LpSimCLRLoss()`` with its defaults, which
  ``main_mlp.py`` builds, takes the logmeanexp over negatives and positive (``logmeanexp``);
  ``simclr_compatibility_mode=True`` gives ``logsumexp``; with the compatibility mode off,
  ``simclr_denominator=False`` drops the positive (``decoupled_logmeanexp``). Its
  ``main_3dident.py`` uses a cross-entropy with the positive among the logits.
- R24 (brendel-group/AnInfoNCE): ``AnInfoNCELoss`` has no other mode, logsumexp over
  negatives and positive; the repository's copy of Z21's ``LpSimCLRLoss`` keeps Z21's modes.
  ``main_mlp.py`` builds ``AnInfoNCELoss``, ``SimCLRLoss`` or ``LpSimCLRLoss`` with
  ``simclr_compatibility_mode=True``: the positive always in the denominator.
- CEBRA (AdaptiveMotorControlLab/CEBRA, ``cebra/models/criterions.py``): ``infonce`` returns
  -mean(pos) + mean(logsumexp over the negatives): ``decoupled_logsumexp``.

The negative set is chosen by the ``negatives`` option:

- ``symmetric`` (default): NT-Xent (SimCLR). Both views are anchors; anchor ``h_i`` has the
  negatives ``{h_j, h+_j : j != i}`` and anchor ``h+_i`` has ``{h+_j, h_j : j != i}``:
  2B anchors, 2B - 2 negatives each. The textbook form of R24's loss.
- ``r24``: the arrangement of R24's official AnInfoNCE code (brendel-group/AnInfoNCE):
  like ``symmetric``, except that the anchor ``h+_i`` gets the cross-view negatives of
  ``h_i``, i.e. ``{h+_j : j != i} u {sim(h_i, h+_j) : j != i}``, and its positive logit is
  ``l(h_i, h+_i)``.
- ``one_sided``: only ``h_i`` is an anchor; negatives ``{h+_j : j != i}`` (B - 1 each).
- ``first_view``: only ``h_i`` is an anchor; negatives are all first-view encodings
  ``{h_j : j = 1..B}`` *including the anchor itself* (B each). Z21's code
  (brendel-group/cl-ica) forms its negatives this way (``torch.roll`` of the first view).
  A decoupled reduction drops only the positive ``h+_i``: the self-pair term e^{l(h_i, h_i)}
  stays in the denominator. For cosine and Lp similarities l(h_i, h_i) (1/tau, resp. 0) is the
  largest logit there is, so this term plays the positive's part in bounding the loss:
  L >= l(h_i, h_i) - l(h_i, h+_i) >= 0 (minus log B for the log-mean); for ``dot`` the
  self-pair logit is ||h_i||² / tau. ``decoupled_logmeanexp`` with these negatives is Z21's
  ``LpSimCLRLoss`` in its default mode.
- ``first_view_others``: ``first_view`` without the anchor itself: negatives
  ``{h_j : j != i}`` (B - 1 each), the other first-view encodings. It isolates the self-pair
  term of ``first_view`` (everything else is the same).
- ``independent``: the encodings of the DGP's separate negative samples, ``h_neg`` of
  shape (M, d) shared by all anchors or (B, K, d) per anchor. vK21's code
  (ysharma1126/ssl_identifiability) uses a fresh batch (M = B) with ``logmeanexp``.
- ``queue`` (InfoNCE only): MoCo's. Only ``h_i`` is an anchor; ``h_pos`` holds the keys of a momentum
  encoder and ``h_neg`` (M, d) the keys of a queue (``identifiable_cl.losses.queue``); negatives
  ``{h+_j : j != i}`` and the M queued keys (B - 1 + M each).

Losses are computed by :func:`contrastive_loss`, which hands batch and shared negatives to the
row-blocked core (``identifiable_cl.losses.blocked``: O(B · block) memory, analytic gradient);
:func:`assemble` builds the dense logit matrices, for inspection (``terms()``) and as the plain
reference the core is tested against. Excluded pairs are marked on the fly on the inputs' device
for the batch at hand.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dgp import checks
from identifiable_cl.losses.blocked import Pairing, Plan, blocked_loss, scale_tensor
from identifiable_cl.losses.elementwise import Phi, blocked_sum, nearest
from identifiable_cl.losses.queue import QUEUE, QueueOptions

SIMILARITIES = ("cosine", "dot", "l1", "l2", "l3")
NEGATIVE_SETS = ("symmetric", "r24", "one_sided", "first_view", "first_view_others", "independent")
REDUCTIONS = ("logsumexp", "logmeanexp", "decoupled_logsumexp", "decoupled_logmeanexp")
DECOUPLED = ("decoupled_logsumexp", "decoupled_logmeanexp")
"""The reductions whose denominator leaves the positive out (module docstring)."""


def bound_candidates(negatives: str, reduction: str, batch: int, separate: int | None) -> int | None:
    """K of InfoNCE's bound on the mutual information of the views, I(z; z+) >= log K - L with L in its
    log-sum form (van den Oord et al. 2018; Poole et al. 2019): an anchor's candidates, its positive and its
    negatives, for a batch of ``batch`` pairs and ``separate`` DGP negatives per anchor (shared or not):
    2B - 1 (``symmetric``, ``r24``), B (``one_sided``, ``first_view_others``), separate + 1 (``independent``),
    B + separate (``queue``, with ``separate`` keys queued). None where the loss is no such bound: a decoupled reduction (the positive is no candidate) or
    ``first_view`` (the anchor itself is one)."""
    if reduction in DECOUPLED or negatives == "first_view":
        return None
    if negatives == "independent":
        return None if separate is None else separate + 1
    if negatives == QUEUE:
        return batch + (separate or 0)
    return 2 * batch - 1 if negatives in ("symmetric", "r24") else batch


def check_tau(value: Any) -> float:
    """A temperature τ > 0 that float32 holds and float32 training can use (the logits are similarities / τ)."""
    tau = checks.float32_positive("tau", value)
    return checks.trainable("tau", tau, "the logits are similarities divided by τ", smallest=1.0 / checks.TRAINABLE)


def check_lr(value: Any) -> float | None:
    """``None`` (the trainer's loss lr) or a positive learning rate for the loss parameters."""
    return None if value is None else checks.positive("lr", value)


def check_dim(value: Any) -> int:
    return checks.integer("dim", value, minimum=1)


def check_segments(value: Any) -> int:
    """The number S >= 2 of segments a loss with ``uses_aux`` tells apart, at most the most a process draws."""
    from dgp.segments import MAX_SEGMENTS

    return checks.integer("segments", value, minimum=2, maximum=MAX_SEGMENTS,
                          why="the loss holds parameters per segment, and no process draws more")


def checked_labels(u: Tensor | None, batch: int, key: str, name: str) -> Tensor:
    """``u`` checked to be ``(batch,)`` int64 segment labels (their values are not read: that would make a GPU
    wait; the run's check matches the loss's segments with the process's)."""
    if u is None:
        raise ValueError(f"{key}.name={name!r} is invalid: it reads each anchor's segment u, and none was given: "
                         "train it on a process whose marginal draws one (dgp.marginal.name: segments)")
    if u.shape != (batch,) or u.dtype != torch.int64:
        raise ValueError(f"u must hold (B={batch},) int64 segment labels; got shape {tuple(u.shape)} and {u.dtype}")
    return u


def pairwise_similarity(a: Tensor, b: Tensor, kind: str) -> Tensor:
    """All-pairs similarity ``(..., n, m)`` of rows ``a (..., n, d)`` and ``b (..., m, d)``.

    ``dot``: aᵀb. ``lp`` (p = 1, 2, 3): -||a - b||_p^p = -sum_k |a_k - b_k|^p, computed
    without the matrix-product shortcut so that equal rows give exactly 0.
    """
    if kind == "dot":
        return a @ b.transpose(-1, -2)
    p = _lp_exponent(kind)
    dist = torch.cdist(a, b, p=float(p), compute_mode="donot_use_mm_for_euclid_dist")
    return -dist.pow(p)


def paired_similarity(a: Tensor, b: Tensor, kind: str) -> Tensor:
    """Row-wise similarity ``(...)`` of ``a (..., d)`` and ``b (..., d)``, as ``pairwise_similarity``."""
    if kind == "dot":
        return (a * b).sum(-1)
    p = _lp_exponent(kind)
    return -(a - b).abs().pow(p).sum(-1)


def _lp_exponent(kind: str) -> int:
    if kind not in ("l1", "l2", "l3"):
        raise ValueError(f"unknown similarity {kind!r}; allowed: 'dot', 'l1', 'l2', 'l3'")
    return int(kind[1])


class Terms(NamedTuple):
    """Logits of each anchor to its positive ``pos (R,)`` and negatives ``neg (R, K)``.

    Excluded pairs of ``neg`` hold ``-inf``; every row has exactly ``n_neg`` finite entries.
    """

    pos: Tensor
    neg: Tensor
    n_neg: int


def _without_diagonal(s: Tensor) -> Tensor:
    eye = torch.eye(s.shape[-1], dtype=torch.bool, device=s.device)
    return s.masked_fill(eye, float("-inf"))


def assemble(
    negatives: str,
    h: Tensor,
    h_pos: Tensor,
    h_neg: Tensor | None,
    kind: str,
    tau: Tensor | float = 1.0,
    key: str = "loss",
) -> Terms:
    """Logits sim / tau for the negative set ``negatives`` (module docstring).

    h, h_pos: (B, d); h_neg: None, (M, d) or (B, K, d). ``kind`` as in ``pairwise_similarity``.
    Rows R = 2B for ``symmetric``/``r24``, else B. Pairs are excluded after the division by
    tau, so no gradient flows through the excluded entries. ``key`` names the loss's config
    key in error messages.
    """
    batch = h.shape[0]

    def pairwise(a: Tensor, b: Tensor) -> Tensor:
        return pairwise_similarity(a, b, kind) / tau

    pos = paired_similarity(h, h_pos, kind) / tau
    if negatives == "independent":
        if _check_negatives(h, h_neg, key) == "shared":
            return Terms(pos, pairwise(h, h_neg), h_neg.shape[0])
        return Terms(pos, pairwise(h.unsqueeze(1), h_neg).squeeze(1), h_neg.shape[1])
    _check_batch(negatives, batch, key)
    if negatives == QUEUE:
        queued = _queued(h, h_neg)
        cross = _without_diagonal(pairwise(h, h_pos))
        return Terms(pos, torch.cat([cross, pairwise(h, queued)], 1), batch - 1 + queued.shape[0])
    if negatives == "first_view":
        return Terms(pos, pairwise(h, h), batch)
    if negatives == "symmetric":
        # one (2B, 2B) matrix over both views; each row's own entry and its positive are excluded
        both = torch.cat([h, h_pos])
        neg = pairwise(both, both).clone()
        for offset in (0, batch, -batch):
            neg.diagonal(offset).fill_(float("-inf"))
        return Terms(torch.cat([pos, pos]), neg, 2 * batch - 2)
    if negatives == "first_view_others":
        return Terms(pos, _without_diagonal(pairwise(h, h)), batch - 1)
    cross = _without_diagonal(pairwise(h, h_pos))
    if negatives == "one_sided":
        return Terms(pos, cross, batch - 1)
    same_a = _without_diagonal(pairwise(h, h))
    same_b = _without_diagonal(pairwise(h_pos, h_pos))
    cross_b = cross if negatives == "r24" else cross.transpose(0, 1)
    neg = torch.cat([torch.cat([same_a, cross], 1), torch.cat([same_b, cross_b], 1)], 0)
    return Terms(torch.cat([pos, pos]), neg, 2 * batch - 2)


def infonce_row(pos: Tensor, lse: Tensor, scale: Tensor, n_neg: int, reduction: str) -> Tensor:
    """Per-anchor InfoNCE ``(R,)`` from the positive logits ``pos (R,)`` and ``lse (R, 1)``.

    ``lse[:, 0]`` = log Σ_k exp l(a, a-_k) over the anchor's n_neg negatives; the row is

        -pos + log(exp pos + exp lse)        (``logsumexp``; minus log(1 + n_neg) for ``logmeanexp``)
        -pos + lse                           (``decoupled_logsumexp``; minus log n_neg for ``decoupled_logmeanexp``)
    """
    check_has_negatives(reduction, n_neg)
    total = lse[:, 0] if reduction in DECOUPLED else torch.logaddexp(pos, lse[:, 0])
    if reduction == "decoupled_logmeanexp":
        total = total - math.log(n_neg)
    elif reduction == "logmeanexp":
        total = total - math.log(1 + n_neg)
    return total - pos


def check_has_negatives(reduction: str, n_neg: int) -> None:
    """A decoupled reduction's denominator is the negatives alone: it needs at least one."""
    if reduction in DECOUPLED and n_neg < 1:
        raise ValueError(
            f"reduction={reduction!r} leaves the positive out of the denominator and needs at "
            "least one negative per anchor; got none (h_neg holds 0 negatives)"
        )


def contrastive_loss(
    negatives: str,
    h: Tensor,
    h_pos: Tensor,
    h_neg: Tensor | None,
    kind: str,
    scale: Tensor | float,
    multipliers: tuple[float, ...],
    row_loss: Callable[..., Tensor],
    key: str = "loss",
) -> Tensor:
    """Mean over anchors of ``row_loss(pos, lse, scale, n_neg=...)`` for the negative set ``negatives``.

    Logits are l(a, b) = scale · sim(a, b) (``kind`` as in ``pairwise_similarity``);
    ``lse[:, m]`` = log Σ_k exp(multipliers[m] · l(a, a-_k)) over the anchor's negatives
    (module docstring) and ``pos`` = l(a, a+). Batch negatives and shared DGP negatives
    (M, d) go through the row-blocked core (``identifiable_cl.losses.blocked``); per-anchor
    DGP negatives (B, K, d) hold only B·K logits and are scored directly. Inputs come from
    :func:`prepared_inputs`.
    """
    pos = paired_similarity(h, h_pos, kind) * scale
    if negatives == "independent" and _check_negatives(h, h_neg, key) == "per_anchor":
        logits = pairwise_similarity(h.unsqueeze(1), h_neg, kind).squeeze(1) * scale
        lse = torch.stack([torch.logsumexp(c * logits, 1) for c in multipliers], 1)
        return row_loss(pos, lse, scale_tensor(scale, pos), n_neg=h_neg.shape[1]).mean()
    tensors, pairings, groups, n_neg, count = negative_plan(negatives, h, h_pos, h_neg, key)
    if negatives == "symmetric":
        pos = torch.cat([pos, pos])
    plan = Plan(kind, pairings, groups, tuple(multipliers), functools.partial(row_loss, n_neg=n_neg), count)
    return blocked_loss(plan, tensors, pos, scale)


def negative_plan(negatives: str, h: Tensor, h_pos: Tensor, h_neg: Tensor | None, key: str = "loss"):
    """Tensors, pairings, groups (``identifiable_cl.losses.blocked.Plan``), negatives per anchor and row count of
    a negative set whose negatives the anchors share: every set but ``independent`` with (B, K, d) negatives."""
    if negatives == "independent":
        _check_negatives(h, h_neg, key)
        return (h, h_neg), (Pairing(0, 1),), ((0,),), h_neg.shape[0], h.shape[0]
    _check_batch(negatives, h.shape[0], key)
    return _batch_plan(negatives, h, h_pos, h_neg)


class Pairs:
    """Each anchor row's positive similarity ``pos (R,)`` and its ``n_neg`` negative pairs, for the losses that add
    a function over the pairs (:mod:`identifiable_cl.losses.elementwise`): the rows and pairs of :func:`assemble`
    (unscaled similarities ``kind``), never held as its (R, K) matrix unless the negatives are the DGP's own per
    anchor ((B, K, d): B·K pairs in all)."""

    def __init__(self, negatives: str, h: Tensor, h_pos: Tensor, h_neg: Tensor | None, kind: str, key: str):
        self.kind = kind
        self.dense: Terms | None = None
        if negatives == "independent" and _check_negatives(h, h_neg, key) == "per_anchor":
            self.dense = assemble(negatives, h, h_pos, h_neg, kind, 1.0, key)
            self.pos, self.n_neg = self.dense.pos, self.dense.n_neg
            return
        self.tensors, self.pairings, self.groups, self.n_neg, rows = negative_plan(negatives, h, h_pos, h_neg, key)
        pos = paired_similarity(h, h_pos, kind)
        self.pos = torch.cat([pos] * (rows // pos.shape[0]))

    @property
    def rows(self) -> int:
        return self.pos.shape[0]

    def require(self, key: str, negatives: str, loss: str) -> None:
        """Every row has a negative: otherwise a ValueError naming ``key.negatives`` and ``loss`` (e.g. "the margin
        loss")."""
        if self.n_neg < 1:
            raise ValueError(f"{key}.negatives={negatives!r}: {loss} needs at least one negative per anchor; got none "
                             "(h_neg holds 0 negatives)")

    def total(self, phi: Phi, *params: Tensor) -> Tensor:
        """Σ over rows r and their negatives j of ``phi(sim_rj, pos_r (·, 1), *params)`` (a scalar); excluded pairs
        reach ``phi`` as 0 and add nothing."""
        if self.dense is not None:
            kept = ~torch.isneginf(self.dense.neg)
            neg = torch.where(kept, self.dense.neg, torch.zeros_like(self.dense.neg))
            return torch.where(kept, phi(neg, self.pos[:, None], *params), torch.zeros_like(neg)).sum()
        weights = [sum(i in group for group in self.groups) for i in range(len(self.pairings))]
        anchors = self.tensors[self.pairings[0].anchors].shape[0]
        return blocked_sum(self.kind, self.pairings, weights, self.tensors, self.pos[:anchors], params, phi)

    def nearest(self, semihard: bool) -> Tensor:
        """Each row's nearest negative's similarity ``(R,)`` (the largest), or with ``semihard`` the nearest whose
        similarity is below the positive's where there is one; differentiable in the encodings."""
        if self.dense is not None:
            neg, pos = self.dense.neg, self.pos
            with torch.no_grad():
                chosen = neg.argmax(1)  # -inf entries are never the largest (n_neg >= 1)
                if semihard:
                    farther = ~torch.isneginf(neg) & (neg < pos.unsqueeze(1))
                    below = neg.masked_fill(~farther, float("-inf")).argmax(1)
                    chosen = torch.where(farther.any(1), below, chosen)
            return neg.gather(1, chosen.unsqueeze(1)).squeeze(1)
        values = []
        for group in self.groups:
            pairings = [self.pairings[i] for i in group]
            rows = self.tensors[pairings[0].anchors].shape[0]
            choice = nearest(self.kind, pairings, self.tensors, self.pos[:rows] if semihard else None)
            values.append(paired_similarity(*self._chosen_pairs(pairings, choice), self.kind))
        return torch.cat(values)

    def _chosen_pairs(self, pairings: list[Pairing], choice: Tensor) -> tuple[Tensor, Tensor]:
        """The anchor ``(R, d)`` and the candidate ``(R, d)`` of each row's chosen pair (``choice (R, 2)``: the
        pairing and the column), selected with gathers and ``torch.where``: fixed shapes, no host wait."""
        anchor = candidate = None
        for index, pairing in enumerate(pairings):
            here = (choice[:, 0] == index).unsqueeze(1)
            column = torch.where(here.squeeze(1), choice[:, 1], torch.zeros_like(choice[:, 1]))
            a = self.tensors[pairing.anchors]
            c = self.tensors[pairing.candidates].index_select(0, column)
            anchor = a if anchor is None else torch.where(here, a, anchor)
            candidate = c if candidate is None else torch.where(here, c, candidate)
        return anchor, candidate


def _batch_plan(negatives: str, h: Tensor, h_pos: Tensor, h_neg: Tensor | None):
    """Tensors, pairings, groups, negatives per anchor and row count of an in-batch negative set (and of
    ``queue``, which adds the queued keys ``h_neg`` to ``one_sided``'s)."""
    batch = h.shape[0]
    if negatives == QUEUE and _queued(h, h_neg).shape[0]:
        pairings = (Pairing(0, 1, "diagonal"), Pairing(0, 2))
        return (h, h_pos, h_neg), pairings, ((0, 1),), batch - 1 + h_neg.shape[0], batch
    if negatives == "symmetric":
        return (torch.cat([h, h_pos]),), (Pairing(0, 0, "views"),), ((0,),), 2 * batch - 2, 2 * batch
    if negatives == "first_view":
        return (h,), (Pairing(0, 0),), ((0,),), batch, batch
    if negatives == "first_view_others":
        return (h,), (Pairing(0, 0, "diagonal"),), ((0,),), batch - 1, batch
    if negatives in ("one_sided", QUEUE):
        return (h, h_pos), (Pairing(0, 1, "diagonal"),), ((0,),), batch - 1, batch
    # r24: h_i pools {h_j} and {h+_j}; h+_i pools {h+_j} and the same {sim(h_i, h+_j)}, j != i
    pairings = (Pairing(0, 0, "diagonal"), Pairing(1, 1, "diagonal"), Pairing(0, 1, "diagonal"))
    return (h, h_pos), pairings, ((0, 2), (1, 2)), 2 * batch - 2, 2 * batch


def _check_batch(negatives: str, batch: int, key: str) -> None:
    if batch < 2:
        raise ValueError(
            f"{key}.negatives={negatives!r} draws negatives from the batch and needs "
            f"at least 2 samples; got a batch of {batch}"
        )


def _queued(h: Tensor, h_neg: Tensor | None) -> Tensor:
    """The queued keys ``(M, d)`` of the ``queue`` negative set (none: M = 0)."""
    if h_neg is None:
        return h.new_zeros(0, h.shape[1])
    if h_neg.dim() != 2 or h_neg.shape[1] != h.shape[1]:
        raise ValueError(f"the queued keys h_neg must have shape (M, d={h.shape[1]}); got {tuple(h_neg.shape)}")
    return h_neg


def _check_negatives(h: Tensor, h_neg: Tensor | None, key: str) -> str:
    """``shared`` for h_neg (M, d), ``per_anchor`` for (B, K, d); anything else is an error."""
    batch = h.shape[0]
    if h_neg is None:
        raise ValueError(
            f"{key}.negatives='independent' needs the encodings of the DGP's "
            "negative samples (h_neg), but none were given; configure a negatives sampler"
        )
    if h_neg.dim() == 2 and h_neg.shape[1] == h.shape[1]:
        return "shared"
    if h_neg.dim() == 3 and h_neg.shape[0] == batch and h_neg.shape[2] == h.shape[1]:
        return "per_anchor"
    raise ValueError(
        f"h_neg must have shape (M, d={h.shape[1]}) or (B={batch}, K, d={h.shape[1]}); "
        f"got {tuple(h_neg.shape)}"
    )


def prepared_inputs(
    h: Tensor, h_pos: Tensor, h_neg: Tensor | None, dim: int, uses_negatives: bool
) -> tuple[Tensor, Tensor, Tensor | None]:
    """Encodings checked to be (B, dim) alike; h_neg dropped unless the loss uses it; bfloat16 and
    float16 promoted to float32 before anything is computed from them, so reductions run in float32."""
    if h.dim() != 2 or h.shape != h_pos.shape:
        raise ValueError(f"h and h_pos must both have shape (B, d); got {tuple(h.shape)} and {tuple(h_pos.shape)}")
    if h.shape[1] != dim:
        raise ValueError(f"the loss was built for dim={dim}, got encodings of dim {h.shape[1]}")
    low = (torch.bfloat16, torch.float16)
    h, h_pos, h_neg = (x.float() if x is not None and x.dtype in low else x for x in (h, h_pos, h_neg))
    return h, h_pos, h_neg if uses_negatives else None


class Temperature(nn.Module):
    """The temperature tau > 0, fixed or learnt as ``tau = exp(log_tau)``."""

    def __init__(self, tau: float, learn: bool):
        super().__init__()
        self.learn = learn
        if learn:
            self.log_tau = nn.Parameter(torch.tensor(math.log(tau)))
        else:
            self.fixed = tau

    def value(self) -> Tensor | float:
        return self.log_tau.exp() if self.learn else self.fixed

    def item(self) -> float:
        return float(self.log_tau.detach().exp()) if self.learn else self.fixed


class ContrastiveLoss(nn.Module):
    """Base of all losses. Built as ``cls(*, dim, **options)``; ``dim`` = encoder output dim.

    ``forward(h (B, d), h_pos (B, d), h_neg=None | (M, d) | (B, K, d)) -> scalar``.
    ``requires_negatives``: the loss uses the DGP's separate negatives (``h_neg``); other
    losses ignore ``h_neg``. ``needs_unit_norm``: the encoder should output unit vectors.
    ``lr``: learning rate of the loss's own parameters (None = the trainer's default).
    ``config_key``: where its options sit in the config (``loss``, ``loss.members[0]``, ...).
    """

    requires_negatives: bool = False
    needs_unit_norm: bool = False
    lr: float | None = None
    queue: QueueOptions | None = None
    """MoCo's queue (``identifiable_cl.losses.queue``) of a loss with ``negatives: queue``: the trainer then
    passes the momentum encoder's keys as ``h_pos`` and the queued keys as ``h_neg`` (M, d)."""
    uses_aux: bool = False
    """The loss reads each anchor's auxiliary variable: the step calls ``forward(h, h_pos, h_neg, u=batch.u)``
    with the ``(B,)`` int64 segment labels of ``dgp.Batch.u`` (:func:`identifiable_cl.solvers.base.loss_arguments`),
    and a run whose process draws none, another number of segments than the loss's ``segments``, or positives
    outside the anchor's segment, is refused when it is checked (:func:`identifiable_cl.rules.check_aux`)."""

    batches_over_runs: bool = False
    """The loss can be evaluated under ``torch.func.vmap`` over a run axis: a pack's runs whose losses are configured
    alike then compute theirs in one call (:class:`identifiable_cl.solvers.packed.StackedPack`), the InfoNCE
    family's fused operations taking every run at once; otherwise each run's loss is called in turn."""

    def __init__(self) -> None:
        super().__init__()
        self.config_key = checks.current_section("loss")

    def logs(self) -> dict[str, float | list[float]]:
        """Scalars and vectors worth logging (learnt temperature, learnt Λ̂, ...)."""
        return {}

    def _prepare(self, h: Tensor, h_pos: Tensor, h_neg: Tensor | None) -> tuple[Tensor, Tensor, Tensor | None, str]:
        """For a loss with a ``similarity`` option: its checked inputs (:func:`prepared_inputs`; unit-normalised
        for cosine) and the similarity to compute on them (``dot`` for cosine)."""
        h, h_pos, h_neg = prepared_inputs(h, h_pos, h_neg, self.dim, self.requires_negatives or self.queue is not None)
        if self.similarity == "cosine":
            h, h_pos, h_neg = normalise(h, h_pos, h_neg)
            return h, h_pos, h_neg, "dot"
        return h, h_pos, h_neg, self.similarity

    mi_bound: Callable[[float, int, int | None], tuple[int, float] | None] | None = None
    """``mi_bound(value, batch, separate)`` -> (K, bound): the lower bound on I(z; z+) that the loss's value ``value``
    on a batch of ``batch`` pairs (with ``separate`` DGP negatives per anchor) gives, with its K candidates per
    anchor, or None; None (the default) for a loss that is no such bound."""

    def param_groups(self) -> list[dict[str, Any]]:
        """Optimizer groups ``{"params": [...], "lr": float | None}`` of the loss's parameters."""
        params = [p for p in self.parameters() if p.requires_grad]
        return [{"params": params, "lr": self.lr}] if params else []


class InfoNCEBound:
    """:meth:`ContrastiveLoss.mi_bound` of a loss in InfoNCE's form, with ``negatives`` and ``reduction``:
    (K, log K - L) with K from :func:`bound_candidates` (a log-mean reduction's value is already L - log K,
    its bound -L)."""

    negatives: str
    reduction: str
    mi_bound_key = "mi_infonce_bound"
    """The metric key of the bound (:data:`identifiable_cl.losses.contract.BOUND_KEYS`)."""

    def mi_bound(self, value: float, batch: int, separate: int | None) -> tuple[int, float] | None:
        k = bound_candidates(self.negatives, self.reduction, batch, separate)
        if k is None:
            return None
        return k, -value if self.reduction == "logmeanexp" else math.log(k) - value


def normalise(*xs: Tensor | None) -> tuple[Tensor | None, ...]:
    """Each tensor scaled to unit L2 norm along its last axis (None passes through)."""
    return tuple(None if x is None else F.normalize(x, dim=-1) for x in xs)
