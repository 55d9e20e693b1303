"""A captured step (``train.capture: graph``): the device work of a step recorded once as a CUDA graph, then replayed.

A step's device work (draw, encode, loss, backward, clip, Adam: :meth:`Solver.work`) has static shapes and reads
nothing back, so on a GPU it can be recorded once and replayed as one launch each step: :class:`GraphStep`
runs the first :data:`WARMUP` steps eagerly on a side stream (lazy state such as Adam's moments is allocated
there), records the next with ``torch.cuda.graph``, and replays that recording for it and every step after.
Adam steps with ``capturable`` set, its step counts on the device. The random streams a step draws from are
registered with the graph, so each replay draws afresh. What a step keeps on the host (the step count, logging)
stays outside the graph.

On a CPU nothing is recorded: the captured solver runs the same steps eagerly, equal to ``train.capture: eager``.
MoCo's queue keeps its counters on the host and is not captured (:func:`identifiable_cl.solvers.solver_class`).
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch import Tensor

from identifiable_cl.solvers.base import Solver

WARMUP = 3
"""Eager steps before the recorded one."""


def make_capturable(optimizer: torch.optim.Optimizer, device: torch.device) -> None:
    """``optimizer`` (torch's Adam) steps with ``capturable`` set: its step counts on ``device``."""
    for group in optimizer.param_groups:
        group["capturable"] = True
    for state in optimizer.state.values():
        if "step" in state:
            state["step"] = state["step"].to(device=device, dtype=torch.float32)


class GraphStep:
    """``work()`` (a step's device work, its outputs a sequence of tensors), called once per step: eager on a CPU
    or unless ``enabled``; on CUDA eager for :data:`WARMUP` calls on a side stream, then recorded once with every
    generator of ``generators`` registered, and replayed (module docstring). Returns copies of the outputs."""

    def __init__(self, work: Callable[[], Sequence[Tensor]], generators: Sequence[torch.Generator],
                 device: torch.device, enabled: bool = True):
        self.work, self.generators = work, list(generators)
        self.recording = enabled and device.type == "cuda"
        self.device = device
        self.graph: torch.cuda.CUDAGraph | None = None
        self.outputs: Sequence[Tensor] = ()
        self.eager_calls = 0

    def __call__(self) -> list[Tensor]:
        if not self.recording:
            return list(self.work())
        if self.graph is None and self.eager_calls < WARMUP:
            self.eager_calls += 1
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                outputs = list(self.work())
            torch.cuda.current_stream(self.device).wait_stream(side)
            return outputs
        if self.graph is None:
            self.graph = torch.cuda.CUDAGraph()
            for generator in self.generators:
                self.graph.register_generator_state(generator)
            with torch.cuda.graph(self.graph):
                self.outputs = list(self.work())
        self.graph.replay()
        return [t.clone() for t in self.outputs]


class CapturedSolver(Solver):
    """:class:`Solver` whose :meth:`work` is a :class:`GraphStep` (module docstring)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.graph = GraphStep(super().work, [self.batches], self.device)

    def step(self) -> Tensor:
        if self.graph.recording and self.graph.graph is None:
            make_capturable(self.optimizer, self.device)
        loss, keys = self.graph()
        self.advance(keys)
        return loss
