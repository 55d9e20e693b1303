"""MoCo's step: queries from the encoder, keys from its momentum copy, negatives from a queue of past keys.

The query encoder f_q encodes the anchors x, the momentum encoder f_k (no gradient) the positives x+, and
the loss contrasts each query with its key and with the queued keys of earlier steps
(:class:`identifiable_cl.losses.queue.KeyQueue`). After the optimizer's step f_k follows f_q and the
step's keys join the queue.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch
from torch import Tensor

import dgp
from identifiable_cl.losses.queue import KeyQueue
from identifiable_cl.solvers.base import Solver


class QueueSolver(Solver):
    """:class:`Solver` for a loss with ``negatives: queue``; ``queue``: its momentum encoder and key queue."""

    unbatched_because = ("runs with MoCo's queue (loss.negatives: queue) need a pass of their momentum encoders "
                         "of their own")

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.queue = KeyQueue(self.encoder, self.loss.queue, self.encoder.output_dim)

    def encodings(self, batch: dgp.Batch) -> tuple[Tensor, Tensor, Tensor | None]:
        """The queries f_q(x) ``(B, d)``, the keys f_k(x+) ``(B, d)`` and the queued keys ``(filled, d)``."""
        dtype = self.process.dtype
        with self.precision():
            h, keys = self.encoder(batch.x), self.queue.encode(batch.x_pos)
        return h.to(dtype), keys.to(dtype), self.queue.negatives()

    def after_step(self, keys: Tensor) -> None:
        """f_k follows f_q; ``keys`` join the queue."""
        self.queue.follow(self.encoder)
        self.queue.push(keys)

    def mi_negatives(self, h_neg: Tensor | None, generator: torch.Generator) -> Tensor | None:
        """Keys of fresh held-out pairs under the current momentum encoder, a full queue's worth: every
        candidate of the bound is scored by the same critic (the training queue holds older encoders' keys)."""
        fresh = self.process.sample(self.queue.keys.shape[0], generator).x_pos
        return self.queue.encode(fresh).to(self.process.dtype)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "queue": self.queue.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.queue.load_state_dict(state["queue"])
