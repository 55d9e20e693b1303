"""Packed runs: K runs whose tensors have the same shapes train in one process, along one run axis.

Runs may differ in anything that leaves the shapes alone (seed, τ, κ, β, Λ, learning rates, weight decay,
clipping, p_change, the loss itself ...), not in the encoder's architecture, the data dimension, the
batch size, the number of DGP negatives, device, dtype or precision (:func:`pack_key`).

One packed step: each run draws its batch from its own process and generator, exactly as alone.
Batched (:class:`StackedPack`, the default for a pack on a GPU), the runs' latents are drawn so and their
processes' mixings, where they are one network, mix every run's rows in one ``vmap`` pass; the K encoders'
parameters and the K
losses' learnt parameters live stacked (K, ...) for as long as the pack lasts: one encoder pass,
``torch.func.vmap`` over the stacked weights (torch's own batched matrix products,
``linear.blas_only``), each run's loss on its own encodings with its row of the stacked loss parameters (where
the runs' losses are alike, :func:`losses_alike`, one ``vmap`` call for all of them: the InfoNCE family's fused
operations then take every run at once),
the summed losses' gradient (each run receives exactly its own), clipped per run, and one Adam step of
the stacks with per-run learning rates and weight decays
(:class:`~identifiable_cl.solvers.stacked_adam.StackedAdam`). Each run follows its stand-alone
trajectory to rounding. On a CPU the runs take their own steps in turn instead (the default there: the
encoders' matrix products already keep the cores busy, so the batched pass gains nothing; docs/benchmarks.md
has the figures), and each run follows its stand-alone trajectory exactly.
The run loop is :func:`identifiable_cl.training.run_packed`, the one every run takes (a single run
is a pack of one): evaluation, checkpoints, logs and the run directory are those of
:class:`identifiable_cl.training.Trainer`, one per run, so a packed run's directory is the one it
would write alone (its ``wall_s`` is the pack's wall time) and it resumes alone."""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import torch
from torch import Tensor, nn
from torch.func import functional_call, vmap

from identifiable_cl.linear import blas_only
from identifiable_cl.losses.contract import traits
from dgp.process import mixed_rows
from identifiable_cl.solvers.base import Solver, loss_arguments, observations, one_thread, split_encodings
from identifiable_cl.solvers.captured import GraphStep
from identifiable_cl.solvers.stacked_adam import Slot, StackedAdam


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
        config["train"]["capture"],
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
                "dgp.dtype, train.batch_size, train.precision, train.capture and the number of DGP negatives "
                f"(seed {first.config['seed']} and seed {c.config['seed']} differ)"
            )


def by_name(modules: Sequence[nn.Module], kind: str) -> dict[str, list[Tensor]]:
    """Each named tensor of ``kind`` (``named_parameters`` or ``named_buffers``) of the K ``modules``, which share
    their names, as the list of the K modules' tensors of that name, in the order of the first module."""
    named = [dict(getattr(module, kind)()) for module in modules]
    return {name: [tensors[name] for tensors in named] for name in named[0]}


def unbatched_because(cs: Sequence[Solver]) -> str | None:
    """Why the runs ``cs`` cannot step as one computation along a run axis, or None: a run's own step needs
    passes of its own (:attr:`~identifiable_cl.solvers.base.Solver.unbatched_because`), or their losses' learnt
    parameters differ in name or shape (they are stacked too)."""
    for c in cs:
        if c.unbatched_because is not None:
            return c.unbatched_because
    if any(_shapes(c.loss) != _shapes(cs[0].loss) for c in cs):
        return "runs whose losses learn parameters of different names or shapes stack none of them"
    return None


def batched_by_default(cs: Sequence[Solver]) -> bool:
    """Whether a pack steps as one batched computation unless told: a pack of several runs on a GPU
    yes; on a CPU, a single run, or runs that cannot (:func:`unbatched_because`), no."""
    return len(cs) > 1 and cs[0].device.type != "cpu" and unbatched_because(cs) is None


def losses_alike(cs: Sequence[Solver]) -> bool:
    """Whether the runs' losses compute as one ``vmap`` call over the run axis: of one class that can
    (``batches_over_runs``), configured alike (their learnt parameters may differ), taking nothing from the batch
    but the encodings."""
    first, declared = cs[0], traits(cs[0].loss)
    return (declared.batches_over_runs and not declared.uses_aux
            and all(type(c.loss) is type(first.loss) and c.config["loss"] == first.config["loss"] for c in cs))


class StackedPack:
    """K runs whose encoder and loss parameters live stacked along a run axis (K, ...), stepped as one computation.

    Each run keeps its own modules, whose parameters become views of row k of the stacks, and its own
    optimizer, whose Adam state (moments, step count) becomes views of the :class:`StackedAdam`'s: evaluating a
    run reads its current weights, and its checkpoint (:meth:`~identifiable_cl.solvers.base.Solver.state_dict`
    saves compact copies) is the one it would write alone. :meth:`release` gives every run storage of its own
    again, to step alone or in another pack.
    """

    def __init__(self, cs: Sequence[Solver], capture: bool | None = None):
        """``capture``: record the step as a CUDA graph (None: as the runs' ``train.capture`` says)."""
        check_packable(cs)
        reason = unbatched_because(cs)
        if reason is not None:
            raise ValueError(f"{reason}: they take their steps in turn, not batched")
        self.solvers = list(cs)
        first, device = cs[0], cs[0].device
        runs = len(cs)
        group = first.optimizer.param_groups[0]
        self.steps = torch.zeros(runs, dtype=torch.float32, device=device)
        for k, c in enumerate(cs):
            state = next(iter(c.optimizer.state.values()), None)
            if state is not None:
                self.steps[k] = state["step"].to(device)
        self.encoder: dict[str, Tensor] = {}
        self.loss: dict[str, Tensor] = {}
        slots = [self._stack(name, own, into)
                 for modules, into in (([c.encoder for c in cs], self.encoder), ([c.loss for c in cs], self.loss))
                 for name, own in by_name(modules, "named_parameters").items()]
        self.optimizer = StackedAdam(slots, self.steps, group["betas"], group["eps"])
        captured = first.config["train"]["capture"] == "graph" if capture is None else capture
        self.graph = GraphStep(self.work, [c.batches for c in cs], device, enabled=captured)
        self.mixings = self._mixings()
        self.loss_axis = losses_alike(cs)
        clips = [c.config["optim"]["grad_clip"] for c in cs]
        self.clip = None if all(c is None for c in clips) else torch.tensor(
            [math.inf if c is None else c for c in clips], dtype=torch.float64, device=device)

    def _stack(self, name: str, own: list[Tensor], into: dict[str, Tensor]) -> Slot:
        """Stack the runs' parameters ``own`` (one per run) as ``into[name]``, point each at its row, and the Adam
        slot over the stack with each run's learning rate, weight decay and moments."""
        stack = torch.stack([p.detach() for p in own]).requires_grad_(own[0].requires_grad)
        moments = torch.zeros((2, *stack.shape), dtype=stack.dtype, device=stack.device)
        lr, decay = [], []
        for k, (c, p) in enumerate(zip(self.solvers, own)):
            group = next(g for g in c.optimizer.param_groups if any(q is p for q in g["params"]))
            lr.append(group["lr"])
            decay.append(group["weight_decay"])
            if p in c.optimizer.state:
                moments[0, k], moments[1, k] = c.optimizer.state[p]["exp_avg"], c.optimizer.state[p]["exp_avg_sq"]
            p.data = stack.data[k]
            c.optimizer.state[p] = {"step": self.steps[k], "exp_avg": moments[0, k], "exp_avg_sq": moments[1, k]}
        into[name] = stack
        options = {"dtype": torch.float64, "device": stack.device}
        return Slot(stack, torch.tensor(lr, **options), torch.tensor(decay, **options), moments[0], moments[1])

    def step(self) -> list[Tensor]:
        """One training step of every run (:meth:`work`, recorded and replayed as one CUDA graph under
        ``train.capture: graph``, :mod:`identifiable_cl.solvers.captured`); the runs' losses, on the device."""
        losses, *keys = self.graph()
        for c, h_pos in zip(self.solvers, keys):
            c.advance(h_pos)
        return list(losses)

    def work(self) -> list[Tensor]:
        """The device work of one step of every run: each draws its batch from its own process and stream, as
        alone; one encoder pass over the stacked weights (``torch.func.vmap``); each run's loss on its encodings
        with its row of the stacked loss parameters; the summed losses' gradient (each run's own), clipped per run
        to its ``optim.grad_clip``; one Adam step. The losses (K,) and each run's keys (its h_pos)."""
        with self.solvers[0].products():
            return self._work()

    def _work(self) -> list[Tensor]:
        cs = self.solvers
        batches = self.batches()
        x = torch.stack([observations(b, c.process.dim) for c, b in zip(cs, batches)])
        buffers = {name: torch.stack(own) for name, own in by_name([c.encoder for c in cs], "named_buffers").items()}
        with cs[0].precision(), blas_only():
            h_all = vmap(lambda p, b, rows: functional_call(cs[0].encoder, (p, b), (rows,)))(self.encoder, buffers, x)
        h_all = h_all.to(cs[0].process.dtype)
        encoded = [split_encodings(h, batch) for batch, h in zip(batches, h_all)]
        if self.loss_axis:
            loss, rows = cs[0].loss, batches[0]
            with cs[0].loss_memory():
                stacked = vmap(lambda p, h: functional_call(loss, p, split_encodings(h, rows)))(self.loss, h_all)
        else:
            losses = []
            for k, (c, batch, inputs) in enumerate(zip(cs, batches, encoded)):
                with c.loss_memory():
                    losses.append(functional_call(c.loss, {n: stack[k] for n, stack in self.loss.items()}, inputs,
                                                  loss_arguments(c.loss, batch)))
            stacked = torch.stack(losses)
        self.optimizer.zero_grad()
        stacked.sum().backward()
        if self.clip is not None:
            self._clip()
        self.optimizer.step()
        return [stacked.detach(), *(h_pos for _, h_pos, _ in encoded)]

    def _mixings(self) -> tuple[dict[str, Tensor], dict[str, Tensor]] | None:
        """The runs' frozen mixings stacked (K, ...) as (parameters, buffers), when they are one network of one
        configuration and no views (else None: each run mixes its own batch)."""
        configs = [c.process.config["mixing"] for c in self.solvers]
        if any(config != configs[0] for config in configs) or self.solvers[0].process.view_count > 1:
            return None
        mixings = [c.process.mixing for c in self.solvers]
        return tuple({name: torch.stack([t.detach() for t in own]) for name, own in by_name(mixings, kind).items()}
                     for kind in ("named_parameters", "named_buffers"))

    def batches(self) -> list:
        """Each run's next training batch, its latents drawn from its own process and stream as alone; the K
        processes' mixings, where they are one network (:meth:`_mixings`), as one ``vmap`` pass over the stacked
        rows (the draws are the same, the mixed rows equal to rounding)."""
        cs = self.solvers
        if self.mixings is None:
            return [c.batch() for c in cs]
        with one_thread():
            latents = [c.process.draw_latents(c.config["train"]["batch_size"], c.batches) for c in cs]
            rows = torch.stack([mixed_rows(z, z_pos, z_neg) for z, z_pos, z_neg, _ in latents])
            mixing = cs[0].process.mixing
            with torch.no_grad():
                x_all = vmap(lambda p, b, r: functional_call(mixing, (p, b), (r,)))(*self.mixings, rows)
        return [c.process.observed(*drawn, x) for c, drawn, x in zip(cs, latents, x_all)]

    @torch.no_grad()
    def _clip(self) -> None:
        """Each run's gradient scaled to norm at most its ``optim.grad_clip`` (torch's ``clip_grad_norm_`` per run:
        coefficient min(1, c / (‖g‖ + 1e-6)) over all its parameters)."""
        grads = [slot.param.grad for slot in self.optimizer.slots if slot.param.grad is not None]
        norms = torch.stack([torch.linalg.vector_norm(g.reshape(g.shape[0], -1), dim=1) for g in grads])
        coefficient = (self.clip / (torch.linalg.vector_norm(norms, dim=0).to(torch.float64) + 1e-6)).clamp(max=1.0)
        for g in grads:
            g.mul_(coefficient.to(g.dtype).view(-1, *([1] * (g.dim() - 1))))

    def release(self) -> None:
        """Every run's parameters and Adam state in storage of its own again (the values they hold now)."""
        for c in self.solvers:
            for p in [*c.encoder.parameters(), *c.loss.parameters()]:
                p.data = p.data.clone()
                state = c.optimizer.state.get(p)
                if state is not None:
                    c.optimizer.state[p] = {key: value.clone() for key, value in state.items()}


class PackStepper:
    """Steps the running runs of a pack: each run's own :meth:`~identifiable_cl.solvers.base.Solver.step` in turn,
    or ``batched`` as one :class:`StackedPack` (None: :func:`batched_by_default`), rebuilt when the running runs
    change. :meth:`close` releases it."""

    def __init__(self, batched: bool | None = None):
        self.batched = batched
        self.pack: StackedPack | None = None

    def step(self, cs: Sequence[Solver]) -> list[Tensor]:
        """One training step of every run in ``cs``; their losses, on the device. Runs that step in turn hold storage
        of their own (a pack that stepped them batched is released first: its runs' Adam step counts are views of
        one per run, which each parameter's own update would count again)."""
        if not (batched_by_default(cs) if self.batched is None else self.batched):
            self.close()
            return [c.step() for c in cs]
        if self.pack is None or self.pack.solvers != list(cs):
            self.close()
            self.pack = StackedPack(cs)
        return self.pack.step()

    def close(self) -> None:
        if self.pack is not None:
            self.pack.release()
            self.pack = None
