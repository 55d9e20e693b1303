"""MoCo's negative set: a first-in-first-out queue of keys from a momentum copy of the encoder.

Momentum Contrast (He, Fan, Wu, Xie, Girshick, CVPR 2020) encodes the anchor x with the
encoder f_q (the query q = f_q(x), trained) and its positive x+ with a momentum copy f_k (the key
k = f_k(x+), no gradient), whose parameters follow the encoder's after every step,

    θ_k ← m θ_k + (1 − m) θ_q,                                                           (1)

and scores each query against its own key and the S keys of a queue Q, into which every step's
keys are pushed (the oldest dropped): InfoNCE whose denominator reaches S more negatives than the
batch holds, at the cost of one encoder pass on B rows without a gradient. Here the negatives of
query q_i are the batch's other keys {k_j : j ≠ i} (as MoCo v3, Chen, Xie & He 2021, takes them)
and the queue's keys (as MoCo v1):

    L_i = −l(q_i, k_i) + log( Σ_j exp l(q_i, k_j) + Σ_{k ∈ Q} exp l(q_i, k) ),   K = B + |Q|

candidates. The loss is :class:`identifiable_cl.losses.infonce.InfoNCE` with ``negatives: queue``
and its ``queue`` option (:func:`queue_options`); :class:`KeyQueue` holds f_k and Q, which the
trainer builds beside the encoder (``identifiable_cl.components``), checkpoints and restores.
MoCo's published settings (ImageNet): S = 65,536, m = 0.999; m = 0 makes f_k the encoder itself
at every step (its keys still get no gradient).
"""

from __future__ import annotations

import copy
from typing import Any, Mapping, NamedTuple

import torch
from torch import Tensor, nn

from dgp import checks

QUEUE = "queue"
"""The name of this negative set (``loss.negatives``)."""


class QueueOptions(NamedTuple):
    """``size``: S, the keys the queue holds; ``momentum``: m of (1), in [0, 1]."""

    size: int = 4096
    momentum: float = 0.999


def queue_options(value: Any, negatives: str) -> QueueOptions | None:
    """The checked ``queue`` option of a loss whose negative set is ``negatives``: a mapping with ``size`` and
    ``momentum`` (each defaulting as :class:`QueueOptions`) for ``negatives: queue``, None otherwise."""
    if negatives != QUEUE:
        if value is not None:
            checks.fail("queue", value, f"only the negative set {QUEUE!r} takes a queue; set negatives: {QUEUE} "
                                        "or remove the option")
        return None
    value = {} if value is None else value
    if not isinstance(value, Mapping):
        checks.fail("queue", value, "expected a mapping with the keys size and momentum")
    unknown = sorted(set(value) - set(QueueOptions._fields))
    if unknown:
        checks.fail(f"queue.{unknown[0]}", value[unknown[0]], "unknown option; the queue takes size and momentum")
    defaults = QueueOptions()
    size = checks.integer("queue.size", value.get("size", defaults.size), minimum=1)
    momentum = checks.probability("queue.momentum", value.get("momentum", defaults.momentum))
    return QueueOptions(size, momentum)


class KeyQueue(nn.Module):
    """The momentum encoder f_k and the queue Q of its keys (module docstring).

    ``encoder``: a frozen copy of the trained encoder at construction (MoCo starts θ_k = θ_q).
    Buffers, saved in a checkpoint with the copy's parameters: ``keys (S, d)``, of which the first
    ``filled`` rows hold keys, and ``pointer``, the row the next key is written to. Both counters are
    mirrored on the host, so a step never waits on the device to read them; a loaded state dict is read
    back once.
    """

    def __init__(self, encoder: nn.Module, options: QueueOptions, dim: int):
        super().__init__()
        self.momentum = options.momentum
        self.encoder = copy.deepcopy(encoder).requires_grad_(False)
        reference = next(iter(encoder.parameters()))
        self.register_buffer("keys", torch.zeros(options.size, dim, dtype=reference.dtype, device=reference.device))
        self.register_buffer("filled", torch.zeros((), dtype=torch.long))
        self.register_buffer("pointer", torch.zeros((), dtype=torch.long))
        self._host: tuple[int, int] | None = (0, 0)  # (filled, pointer); None: read the buffers
        self.register_load_state_dict_post_hook(KeyQueue._forget_host)

    @staticmethod
    def _forget_host(module: "KeyQueue", _incompatible) -> None:
        module._host = None

    def _counts(self) -> tuple[int, int]:
        """(filled, pointer) as host integers."""
        if self._host is None:
            self._host = (int(self.filled), int(self.pointer))
        return self._host

    @torch.no_grad()
    def encode(self, x: Tensor) -> Tensor:
        """Keys f_k(x) ``(N, d)`` of observations ``x (N, D)``, without a gradient."""
        return self.encoder(x)

    def negatives(self) -> Tensor:
        """The queue's keys ``(filled, d)``: none before the first step."""
        return self.keys[: self._counts()[0]]

    @torch.no_grad()
    def follow(self, encoder: nn.Module) -> None:
        """θ_k ← m θ_k + (1 − m) θ_q for every parameter of ``encoder`` (1); its buffers are copied."""
        for mine, theirs in zip(self.encoder.parameters(), encoder.parameters()):
            mine.mul_(self.momentum).add_(theirs.detach(), alpha=1.0 - self.momentum)
        for mine, theirs in zip(self.encoder.buffers(), encoder.buffers()):
            mine.copy_(theirs)

    @torch.no_grad()
    def push(self, keys: Tensor) -> None:
        """Append ``keys (B, d)`` in order, overwriting the oldest once S keys are held (of more than S
        keys, the last S stay)."""
        size = self.keys.shape[0]
        keys = keys.detach()[-size:].to(self.keys.dtype)
        filled, pointer = self._counts()
        rows = (pointer + torch.arange(keys.shape[0], device=self.keys.device)) % size
        self.keys[rows] = keys
        self._host = (min(filled + keys.shape[0], size), (pointer + keys.shape[0]) % size)
        self.filled.fill_(self._host[0])
        self.pointer.fill_(self._host[1])
