"""What a training step asks of a GPU, counted on any device: the kernels it launches and the bytes they move.

A dispatch mode (:class:`Cost`) sees every aten operation. One that computes is a kernel launch on a GPU; a view
or metadata operation is not (its results alias its arguments without writing them, or it only allocates:
:func:`launches`). A launch reads its tensor arguments and writes its results, ``numel × element_size`` bytes
each. On a device of bandwidth W and launch cost λ, a step of L launches moving M bytes takes at least
max(M / W, L · λ) (the step captured as a CUDA graph removes most of λ, none of M / W).

:func:`step_cost` counts one steady-state step of a run as a GPU runs it: the InfoNCE family's fused operations
(:mod:`identifiable_cl.losses.fused`, one Triton kernel each on CUDA; ``kernels="eager"`` counts the eager torch
kernels instead, whose row blocks are then sized as on CUDA, :func:`identifiable_cl.losses.blocked.use_kernels`
``sized_for="cuda"``), and Adam's ``foreach`` implementation (torch's CUDA default), split into the parts of
:meth:`identifiable_cl.solvers.base.Solver.work`:

- ``sampling``: the run's batch (latents, conditional, negatives, mixing): :meth:`~Solver.batch`;
- ``optimizer``: gradient clipping and the optimizer's step: :meth:`~Solver.optimize`;
- ``encoder``: the encoder's forward and backward on the step's rows, counted alone on the same rows;
- ``loss``: the rest (the loss's forward and backward, and the glue between the parts);

beside the floor: the encoder's own forward, backward and Adam step on those rows
(:func:`identifiable_cl.benchmarks.sections.encoder_own_step`), what no implementation of the step avoids.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

PARTS = ("sampling", "encoder", "loss", "optimizer")
"""The parts of a step :func:`step_cost` reports, in the order a step runs them."""
ALLOCATIONS = frozenset(name for name in ("empty", "empty_like", "empty_strided", "lift_fresh", "lift_fresh_copy",
                                          "_local_scalar_dense", "detach", "alias", "set_"))
"""Operations that launch no kernel although their results do not alias an argument (allocation, metadata)."""


def launches(func: Any) -> bool:
    """Whether the aten operation ``func`` runs a kernel on a GPU: not a view (every result an alias of an argument
    that it does not write) and not an allocation or metadata operation (:data:`ALLOCATIONS`)."""
    if func.overloadpacket.__name__ in ALLOCATIONS:
        return False
    returns = func._schema.returns
    return not (returns and all(r.alias_info is not None and not r.alias_info.is_write for r in returns))


def tensor_bytes(values: Any) -> int:
    """Σ numel × element size over the tensors among ``values`` (any nesting of lists, tuples and dicts)."""
    return sum(t.numel() * t.element_size() for t in tree_leaves(values) if isinstance(t, torch.Tensor))


@dataclass
class Tally:
    """Launches and bytes (read + written) of one part of a step."""

    launches: int = 0
    bytes: int = 0

    def __sub__(self, other: "Tally") -> "Tally":
        return Tally(self.launches - other.launches, self.bytes - other.bytes)

    def __add__(self, other: "Tally") -> "Tally":
        return Tally(self.launches + other.launches, self.bytes + other.bytes)


class Cost(TorchDispatchMode):
    """Counts the kernel launches and bytes of every operation run inside it, into ``parts[name]`` for the part
    in force (:meth:`part`; ``rest`` outside any)."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: dict[str, Tally] = {}
        self.current = "rest"

    @contextlib.contextmanager
    def part(self, name: str) -> Iterator[None]:
        """Count what runs inside the block into ``name``."""
        before, self.current = self.current, name
        try:
            yield
        finally:
            self.current = before

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[override]
        out = func(*args, **(kwargs or {}))
        if launches(func):
            tally = self.parts.setdefault(self.current, Tally())
            tally.launches += 1
            tally.bytes += tensor_bytes((args, kwargs)) + tensor_bytes(out)
        return out

    def total(self) -> Tally:
        """Every part's launches and bytes together."""
        return sum(self.parts.values(), Tally())


def counted(fn: Callable[[], Any]) -> Cost:
    """The :class:`Cost` of one call of ``fn``, all of it in part ``rest``."""
    with Cost() as cost:
        fn()
    return cost


@contextlib.contextmanager
def as_on_cuda(c: Any, kernels: str = "fused") -> Iterator[None]:
    """Within the block, run ``c``'s step as on CUDA: the loss's ``kernels`` (``fused``, or ``eager`` with blocks
    sized for CUDA) and the optimizer's ``foreach`` implementation (each param group's setting restored after)."""
    from identifiable_cl.losses.blocked import use_kernels

    foreach = [group.get("foreach") for group in c.optimizer.param_groups]
    for group in c.optimizer.param_groups:
        group["foreach"] = True
    try:
        with use_kernels(kernels, sized_for="cuda"):
            yield
    finally:
        for group, value in zip(c.optimizer.param_groups, foreach):
            group["foreach"] = value


def step_cost(c: Any, warmup: int = 2, kernels: str = "fused") -> dict[str, Tally]:
    """Per part of one steady-state step of the solver ``c`` (after ``warmup`` steps), its :class:`Tally` as on
    CUDA with the loss's ``kernels`` (module docstring): ``sampling``, ``encoder``, ``loss``, ``optimizer``, then
    ``step`` (their sum) and ``floor`` (the encoder's own forward, backward and Adam step on the step's rows). The
    run advances by ``warmup`` + 1 steps and its gradients are left cleared."""
    from identifiable_cl.solvers.base import observations

    with as_on_cuda(c, kernels):
        for _ in range(warmup):
            c.step()
        cost = Cost()
        batch, optimize = c.batch, c.optimize

        def in_part(name: str, fn: Callable[[], Any]) -> Callable[[], Any]:
            def wrapped() -> Any:
                with cost.part(name):
                    return fn()
            return wrapped

        c.batch, c.optimize = in_part("sampling", batch), in_part("optimizer", optimize)
        try:
            with cost:
                c.step()
        finally:
            del c.batch, c.optimize
        rows = observations(c.batch(), c.process.dim)

        def forward_backward() -> None:
            with c.precision():
                h = c.encoder(rows)
            h.sum().backward()

        c.optimizer.zero_grad(set_to_none=True)
        encoder = counted(forward_backward).total()
        adam = counted(c.optimizer.step).total()
        c.optimizer.zero_grad(set_to_none=True)
    parts = {"sampling": cost.parts.get("sampling", Tally()), "encoder": encoder,
             "loss": cost.parts.get("rest", Tally()) - encoder, "optimizer": cost.parts.get("optimizer", Tally())}
    return {**parts, "step": cost.total(), "floor": encoder + adam}


def pack_cost(cs: Any, warmup: int = 1, kernels: str = "fused") -> dict[str, Any]:
    """One steady-state step of the solvers ``cs`` as one :class:`~identifiable_cl.solvers.packed.StackedPack`
    (after ``warmup`` steps), counted as on CUDA with the loss's ``kernels``: its :class:`Tally` per part
    (``sampling``: every run's batch; ``optimizer``: clipping and the stacked Adam step; ``model``: the encoder pass
    over the stacked weights, the losses and the glue), ``step`` (their sum), and ``calls``: how often each
    operation ran (a Counter of names such as ``aten.mm`` or ``icl.pair_lse``). The pack is released after."""
    from collections import Counter

    from identifiable_cl.losses.blocked import use_kernels
    from identifiable_cl.solvers.packed import StackedPack

    pack = StackedPack(cs)
    try:
        with use_kernels(kernels, sized_for="cuda"):
            for _ in range(warmup):
                pack.step()
            cost = Calls()
            batches, optimize = pack.batches, pack.optimizer.step

            def in_part(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
                def wrapped(*args: Any, **kwargs: Any) -> Any:
                    with cost.part(name):
                        return fn(*args, **kwargs)
                return wrapped

            pack.batches, pack.optimizer.step = in_part("sampling", batches), in_part("optimizer", optimize)
            try:
                with cost:
                    pack.step()
            finally:
                del pack.batches, pack.optimizer.step
    finally:
        pack.release()
    parts = {"sampling": cost.parts.get("sampling", Tally()), "model": cost.parts.get("rest", Tally()),
             "optimizer": cost.parts.get("optimizer", Tally())}
    return {**parts, "step": cost.total(), "calls": cost.calls}


class Calls(Cost):
    """A :class:`Cost` that also counts each launching operation by name (``calls``)."""

    def __init__(self) -> None:
        from collections import Counter

        super().__init__()
        self.calls: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[override]
        if launches(func):
            self.calls[str(func.overloadpacket)] += 1
        return super().__torch_dispatch__(func, types, args, kwargs)


COST_CASES: list[tuple[str, str | None, dict[str, Any], int]] = [
    ("box, L1 InfoNCE", "box", {"dgp.conditional.name": "laplace", "loss.similarity": "l1"}, 6144),
    ("sphere vMF, cosine InfoNCE", "sphere", {}, 6144),
    ("R24: sphere, AnInfoNCE", "sphere", {"dgp.conditional.name": "anisotropic", "dgp.conditional.lambdas": "bimodal",
                                          "loss.name": "aninfonce", "loss.negatives": "r24"}, 1000),
]
"""(label, preset, overrides, batch) of the settings :func:`bench_cost` counts, on the reference encoder."""


def bench_cost(quick: bool = False, print_fn: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Each of :data:`COST_CASES` (at batch 1024 at most with ``quick``): :func:`step_cost` per part, the step's
    launches and bytes over its floor's. Counted on the CPU as on CUDA (module docstring); the same figures on
    every machine."""
    from identifiable_cl.components import build, load_config

    print_fn("\nstep cost as on CUDA, counted on the CPU (kernels launched, GB moved per steady-state step; the "
             "loss's fused operations, foreach Adam; floor = the encoder's own forward + backward + Adam)")
    print_fn(f"{'setting':<28}{'batch':>6}" + "".join(f"{part:>17}" for part in (*PARTS, "step", "floor"))
             + f"{'step/floor':>18}")
    rows = []
    for label, preset, overrides, batch in COST_CASES:
        batch = min(batch, 1024) if quick else batch
        c = build(load_config(preset, {**overrides, "train.batch_size": batch, "dgp.mixing.cond_draws": 2500,
                                       "device": "cpu"}))
        cost = step_cost(c, warmup=1)
        step, floor = cost["step"], cost["floor"]
        row = {"case": label, "batch": batch, **{f"{part}_launches": t.launches for part, t in cost.items()},
               **{f"{part}_bytes": t.bytes for part, t in cost.items()},
               "launch_ratio": step.launches / floor.launches, "byte_ratio": step.bytes / floor.bytes}
        rows.append(row)
        cells = "".join(f"{t.launches:>8} {t.bytes / 1e9:>7.3f}" for t in cost.values())
        print_fn(f"{label:<28}{batch:>6}{cells}{row['launch_ratio']:>8.1f}x {row['byte_ratio']:>7.1f}x")
    label, preset, overrides, batch = PACK_CASE
    print_fn(f"\npacks as on CUDA (one StackedPack step; kernels launched and GB moved per run-step)\n"
             f"{'setting':<28}{'batch':>6}{'runs':>6}" + "".join(f"{part:>17}" for part in PACK_PARTS))
    for runs in (1, 4) if quick else (1, 4, 12):
        cs = [build(load_config(preset, {**overrides, "train.batch_size": batch, "dgp.mixing.cond_draws": 2500,
                                         "device": "cpu", "seed": seed})) for seed in range(runs)]
        cost = pack_cost(cs)
        rows.append({"case": label, "batch": batch, "runs": runs,
                     **{f"{part}_launches_per_run": cost[part].launches / runs for part in PACK_PARTS},
                     **{f"{part}_bytes_per_run": cost[part].bytes / runs for part in PACK_PARTS}})
        cells = "".join(f"{cost[part].launches / runs:>8.1f} {cost[part].bytes / runs / 1e9:>7.3f}"
                        for part in PACK_PARTS)
        print_fn(f"{label:<28}{batch:>6}{runs:>6}{cells}")
    return rows


PACK_PARTS = ("sampling", "model", "optimizer", "step")
PACK_CASE = COST_CASES[2]
"""The setting whose packs :func:`bench_cost` counts: R24's, as its paper trains 12 runs (4 settings × 3 seeds)."""
