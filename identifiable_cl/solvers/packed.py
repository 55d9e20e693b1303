"""Packed runs: K runs whose tensors have the same shapes train in one process, one batched encoder pass.

Runs may differ in anything that leaves the shapes alone (seed, τ, κ, β, Λ, learning rates,
p_change, the loss itself ...), not in the encoder's architecture, the data dimension, the
batch size, the number of DGP negatives, device, dtype or precision (:func:`pack_key`).

One packed step: each run draws its batch from its own process and generator, exactly as
alone. Batched (:func:`batched_step`, the default for a pack on a GPU), the K encoders run as one
computation, ``torch.func.vmap`` over their parameters stacked (K, ...) (torch's own batched matrix
products, ``linear.blas_only``); each run's loss is taken on its own encodings and the K losses are
summed, so every run's parameters receive exactly their own gradient; each run's optimizer then
steps. On a CPU the runs take their own steps in turn instead (the default there: the encoders'
matrix products already keep the cores busy, so the batched pass gains nothing; the README's
Benchmarks section has the figures), and each run follows its stand-alone trajectory exactly.
The run loop is :func:`identifiable_cl.training.run_packed`, the one every run takes (a single run
is a pack of one): evaluation, checkpoints, logs and the run directory are those of
:class:`identifiable_cl.training.Trainer`, one per run, so a packed run's directory is the one it
would write alone (its ``wall_s`` is the pack's wall time) and it resumes alone."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch
from torch import Tensor, nn
from torch.func import functional_call, vmap

from identifiable_cl.linear import blas_only
from identifiable_cl.solvers.base import Solver, observations, split_encodings


def pack_key(config: Mapping[str, Any]) -> tuple:
    """What must agree between runs of one pack (see the module docstring)."""
    negatives = config["dgp"]["negatives"]
    return (
        repr(sorted(config["encoder"].items())),
        config["device"],
        config["dgp"]["dim"],
        config["dgp"]["dtype"],
        config["train"]["batch_size"],
        config["train"]["precision"],
        negatives["name"] != "none",
        negatives.get("num"),
    )


def _shapes(encoder: nn.Module) -> list[tuple[str, tuple[int, ...]]]:
    return [(name, tuple(p.shape)) for name, p in encoder.named_parameters()]


def check_packable(cs: Sequence[Solver]) -> None:
    """Every run of ``cs`` can share one batched encoder pass; otherwise a ValueError says why."""
    first = cs[0]
    for c in cs[1:]:
        if pack_key(c.config) != pack_key(first.config) or _shapes(c.encoder) != _shapes(first.encoder):
            raise ValueError(
                "runs cannot be packed together: they must agree in the encoder, device, dgp.dim, "
                "dgp.dtype, train.batch_size, train.precision and the number of DGP negatives "
                f"(seed {first.config['seed']} and seed {c.config['seed']} differ)"
            )


def _stacked(cs: Sequence[Solver], kind: str) -> dict[str, Tensor]:
    """Each encoder parameter (or buffer) of the K runs stacked (K, ...), differentiably: the
    gradient of the stack reaches every run's own parameter."""
    named = [dict(getattr(c.encoder, kind)()) for c in cs]
    return {name: torch.stack([n[name] for n in named]) for name in named[0]}


def batched_by_default(cs: Sequence[Solver]) -> bool:
    """Whether a pack steps as one batched computation unless told: a pack of several runs on a GPU
    yes; on a CPU, a single run, or runs whose solver cannot be batched
    (:attr:`~identifiable_cl.solvers.base.Solver.unbatched_because`), no."""
    return len(cs) > 1 and cs[0].device.type != "cpu" and all(c.unbatched_because is None for c in cs)


def batched_step(cs: Sequence[Solver]) -> list[Tensor]:
    """One training step of every run in ``cs`` as one batched computation (the module docstring);
    their losses, on device."""
    for c in cs:
        if c.unbatched_because is not None:
            raise ValueError(f"{c.unbatched_because}: they take their steps in turn, not batched")
    batches = [c.batch() for c in cs]
    x = torch.stack([observations(b, c.process.dim) for c, b in zip(cs, batches)])
    params, buffers = _stacked(cs, "named_parameters"), _stacked(cs, "named_buffers")
    with cs[0].precision(), blas_only():
        h_all = vmap(lambda p, b, rows: functional_call(cs[0].encoder, (p, b), (rows,)))(params, buffers, x)
    h_all = h_all.to(cs[0].process.dtype)
    encoded = [split_encodings(h, batch) for batch, h in zip(batches, h_all)]
    losses = []
    for c, inputs in zip(cs, encoded):
        with c.loss_memory():
            losses.append(c.loss(*inputs))
    for c in cs:
        c.optimizer.zero_grad(set_to_none=True)
    torch.stack(losses).sum().backward()
    for c, (_, h_pos, _) in zip(cs, encoded):
        c.update(h_pos)
    return [loss.detach() for loss in losses]


def step_pack(cs: Sequence[Solver], batched: bool | None = None) -> list[Tensor]:
    """One training step of every run in ``cs``: one batched computation (:func:`batched_step`) or each run's
    own :meth:`~identifiable_cl.solvers.base.Solver.step` in turn (None: :func:`batched_by_default`); their
    losses, on device."""
    if batched_by_default(cs) if batched is None else batched:
        return batched_step(cs)
    return [c.step() for c in cs]
