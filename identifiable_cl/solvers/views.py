"""The step of a process with views: every ordered pair of views contrasted, each view through its encoder.

A process with V > 1 views (``dgp.views``) observes one latent through V mixings; the encoder is one shared
network, or one per view (``encoder.shared: false``,
:class:`identifiable_cl.encoders.ViewEncoders`). The loss is :func:`pair_loss` over the views' encodings.
"""

from __future__ import annotations

from typing import Sequence

from torch import Tensor, nn
import torch

import dgp
from identifiable_cl.encoders import view_encoder
from identifiable_cl.solvers.base import Solver


def view_encodings(encoder: nn.Module, batch: dgp.Batch) -> tuple[list[Tensor], list[Tensor | None]]:
    """Each view's encodings ``(B, d)`` and those of its negatives (in ``x_neg``'s leading shape, or None), one
    pass of the view's encoder (:func:`identifiable_cl.encoders.view_encoder`) per view."""
    size = batch.x.shape[0]
    hs, negs = [], []
    for v, x in enumerate(batch.views):
        neg = batch.views_neg[v] if batch.views_neg is not None else None
        rows = x if neg is None else torch.cat([x, neg.reshape(-1, neg.shape[-1])])
        h_all = view_encoder(encoder, v)(rows)
        hs.append(h_all[:size])
        negs.append(None if neg is None else h_all[size:].reshape(*neg.shape[:-1], -1))
    return hs, negs


def pair_loss(loss: nn.Module, hs: Sequence[Tensor], negs: Sequence[Tensor | None]) -> Tensor:
    """The loss over every ordered pair of views (i, j), i ≠ j, averaged: mean of ``loss(h_i, h_j, h⁻_i)``,
    view i's encodings as anchors, view j's as positives and view i's negatives (None: the loss takes them from
    the batch). For two views ½[L(h_1, h_2, h⁻_1) + L(h_2, h_1, h⁻_2)], the symmetrised loss of Daunhawer et
    al. 2023 (``main_mlp.py``'s ``train_step``)."""
    terms = [loss(hs[i], hs[j], negs[i]) for i in range(len(hs)) for j in range(len(hs)) if i != j]
    return torch.stack(terms).mean()


class ViewSolver(Solver):
    """:class:`Solver` for a process with views; the keys of a step are view 2's encodings."""

    unbatched_because = "runs of a process with views (dgp.views) take one encoder pass per view"

    def views_encoded(self, batch: dgp.Batch) -> tuple[list[Tensor], list[Tensor | None]]:
        """:func:`view_encodings` of ``batch`` (under ``train.precision``) in the process's dtype."""
        dtype = self.process.dtype
        with self.precision():
            hs, negs = view_encodings(self.encoder, batch)
        return [h.to(dtype) for h in hs], [None if n is None else n.to(dtype) for n in negs]

    def objective(self, batch: dgp.Batch) -> tuple[Tensor, Tensor]:
        hs, negs = self.views_encoded(batch)
        return pair_loss(self.loss, hs, negs), hs[1]
