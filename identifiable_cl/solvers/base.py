"""The plain training step: one encoder pass over a fresh batch, the loss, Adam.

:class:`Solver` owns what a run's step reads and changes: the process and its batch stream, the encoder
``(N, D) -> (N, d)``, the loss on ``d``, the optimizer, the number of steps taken and ``extra`` (what the
trainer keeps beside them in a checkpoint). ``step()`` is

    work():   batch()  →  objective(batch) = (L, keys)  →  ∇L  →  optimize(): clip, optimizer step
    advance(keys): after_step(keys), one more step counted

and a variant of the step (MoCo's queue, views) overrides one hook in a file of its own
(:mod:`identifiable_cl.solvers`). A steady-state step reads nothing back from the device: its loss is
returned as a device tensor.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Mapping

import torch
from torch import Tensor, nn

import dgp
from identifiable_cl.encoders import view_encoder
from identifiable_cl.linear import tensor_float32
from identifiable_cl.losses.contract import traits
from identifiable_cl.spec import CHANGEABLE
from identifiable_cl.losses.blocked import loss_memory


def observations(batch: dgp.Batch, dim: int) -> Tensor:
    """The rows x (B, D), x+ (B, D) and the negatives' x (B·K or M, D) stacked for one encoder pass."""
    parts = [batch.x, batch.x_pos] + ([batch.x_neg.reshape(-1, dim)] if batch.x_neg is not None else [])
    return torch.cat(parts)


def split_encodings(h_all: Tensor, batch: dgp.Batch) -> tuple[Tensor, Tensor, Tensor | None]:
    """(h, h_pos, h_neg) back from the encodings of :func:`observations`' rows; h_neg in x_neg's shape."""
    size = batch.x.shape[0]
    h_neg = h_all[2 * size :].reshape(*batch.x_neg.shape[:-1], -1) if batch.x_neg is not None else None
    return h_all[:size], h_all[size : 2 * size], h_neg


def loss_arguments(loss: nn.Module, batch: dgp.Batch) -> dict[str, Tensor | None]:
    """The keyword arguments the loss takes from ``batch`` beside its encodings: ``u``, the anchors' auxiliary
    variable, for a loss that reads it (its ``uses_aux``); none for the others."""
    return {"u": batch.u} if traits(loss).uses_aux else {}


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Within the block torch uses one CPU thread: a batch's draws are tens of operations on small tensors, which
    more threads only slow down by synchronising. The draws are the same on any number of threads."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def compact(value: Any) -> Any:
    """``value`` (nested dicts, lists and tuples of tensors) with every tensor that views part of a larger storage
    (a run's row of a :class:`~identifiable_cl.solvers.packed.StackedPack`) copied: saved, a view would carry the
    whole storage with it."""
    if isinstance(value, Tensor):
        return value.clone() if value.untyped_storage().nbytes() > value.numel() * value.element_size() else value
    if isinstance(value, dict):
        out = type(value)((k, compact(v)) for k, v in value.items())
        if hasattr(value, "_metadata"):
            out._metadata = value._metadata  # a module state dict's versions
        return out
    if isinstance(value, (list, tuple)):
        return type(value)(compact(v) for v in value)
    return value


class Solver:
    """One run's training step and the state it changes (module docstring).

    ``steps_done``: the steps taken; ``extra``: the trainer's own entries of the checkpoint.
    """

    unbatched_because: str | None = None
    """Why packs may not step this run inside one batched encoder pass (:mod:`identifiable_cl.solvers.packed`);
    None: they may."""

    def __init__(self, config: dict[str, Any], device: torch.device, process: dgp.Process, encoder: nn.Module,
                 loss: nn.Module, optimizer: torch.optim.Optimizer, batches: torch.Generator):
        self.config, self.device, self.process = config, device, process
        self.encoder, self.loss, self.optimizer, self.batches = encoder, loss, optimizer, batches
        self.steps_done = 0
        self.extra: dict[str, Any] = {}

    # ------------------------------------------------------------------------------------------ the step

    def step(self) -> Tensor:
        """One step on a fresh batch; the loss, on the device (no host synchronisation)."""
        loss, keys = self.work()
        self.advance(keys)
        return loss

    def work(self) -> tuple[Tensor, Tensor]:
        """A step's device work: the batch, the loss, its gradient and the optimizer's step; the loss (detached)
        and the keys :meth:`advance` passes on."""
        with self.products():
            with self.loss_memory():
                loss, keys = self.objective(self.batch())
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimize()
        return loss.detach(), keys

    def batch(self) -> dgp.Batch:
        """The next training batch (``train.batch_size`` anchors), drawn on one CPU thread (:func:`one_thread`)."""
        with one_thread():
            return self.process.sample(self.config["train"]["batch_size"], self.batches)

    def encodings(self, batch: dgp.Batch) -> tuple[Tensor, Tensor, Tensor | None]:
        """The loss's inputs (h, h_pos, h_neg) for ``batch`` in the process's dtype: one encoder pass over
        :func:`observations`."""
        with self.precision():
            return split_encodings(self.encoder(observations(batch, self.process.dim)).to(self.process.dtype), batch)

    def objective(self, batch: dgp.Batch) -> tuple[Tensor, Tensor]:
        """The loss ``L(h, h_pos, h_neg)`` on ``batch`` (with its :func:`loss_arguments`) and the keys
        :meth:`after_step` receives (h_pos)."""
        h, h_pos, h_neg = self.encodings(batch)
        return self.loss(h, h_pos, h_neg, **loss_arguments(self.loss, batch)), h_pos

    def optimize(self) -> None:
        """The gradient's norm clipped to ``optim.grad_clip`` (when set), then the optimizer's step."""
        clip = self.config["optim"]["grad_clip"]
        if clip is not None:
            nn.utils.clip_grad_norm_([p for g in self.optimizer.param_groups for p in g["params"]], clip)
        self.optimizer.step()

    def advance(self, keys: Tensor) -> None:
        """After the optimizer's step: :meth:`after_step`, one more step counted."""
        self.after_step(keys)
        self.steps_done += 1

    def after_step(self, keys: Tensor) -> None:
        """What follows the optimizer's step (nothing here); ``keys``: the step's h_pos."""

    def loss_memory(self) -> contextlib.AbstractContextManager:
        """The loss's buffers within ``train.loss_memory`` MiB (:func:`identifiable_cl.losses.blocked.loss_memory`)."""
        return loss_memory(self.config["train"]["loss_memory"])

    def products(self) -> contextlib.AbstractContextManager:
        """CUDA's float32 products as TensorFloat-32 for the whole step under ``train.precision: tf32``
        (:func:`identifiable_cl.linear.tensor_float32`), else a no-op."""
        return tensor_float32(self.config["train"]["precision"] == "tf32")

    def precision(self) -> torch.autocast:
        """bfloat16 autocast for the encoder's forward pass under ``train.precision: bf16``, else a no-op; without
        autocast's cache of cast weights when the step is recorded as a CUDA graph (``train.capture: graph``: a
        cached cast would be a tensor of the recording, replayed stale)."""
        return torch.autocast(self.device.type, dtype=torch.bfloat16,
                              enabled=self.config["train"]["precision"] == "bf16",
                              cache_enabled=self.config["train"]["capture"] != "graph")

    # ------------------------------------------------------------------------------------- reading it

    def encode(self, x: Tensor, view: int = 0) -> Tensor:
        """Encodings ``(N, d)`` of observations ``x (N, D)`` of view ``view`` in evaluation mode, no gradient."""
        encoder = view_encoder(self.encoder, view)
        was_training = encoder.training
        encoder.eval()
        with torch.no_grad():
            h = encoder(x)
        encoder.train(was_training)
        return h

    def mi_negatives(self, h_neg: Tensor | None, generator: torch.Generator) -> Tensor | None:
        """The negatives of a held-out bound on I(z; z+), given the encodings of a held-out batch's own."""
        return h_neg

    # ------------------------------------------------------------------------------------ its state

    def state_dict(self) -> dict[str, Any]:
        """Tensors and plain containers only (loadable with ``torch.load(..., weights_only=True)``), each tensor
        in storage of its own (:func:`compact`); ``trained``: the config sections a resume may not change, as this
        run trains them, which opening the run checks its ``config.yaml`` against."""
        state = {
            "step": self.steps_done,
            "encoder": self.encoder.state_dict(),
            "loss": self.loss.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "rng": {"batches": self.batches.get_state(), "torch": torch.get_rng_state()},
            "extra": self.extra,
            "trained": {k: v for k, v in self.config.items() if k not in CHANGEABLE["resume"]},
        }
        if torch.cuda.is_available():
            state["rng"]["cuda"] = torch.cuda.get_rng_state_all()
        return compact(state)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Back to the state :meth:`state_dict` saved."""
        self.steps_done = int(state["step"])
        self.encoder.load_state_dict(state["encoder"])
        self.loss.load_state_dict(state["loss"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.batches.set_state(state["rng"]["batches"])
        torch.set_rng_state(state["rng"]["torch"])
        if "cuda" in state["rng"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["rng"]["cuda"])
        self.extra = dict(state.get("extra", {}))
