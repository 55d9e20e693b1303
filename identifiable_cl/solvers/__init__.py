"""A run's training step as an object, one file per variant of the step.

- :mod:`~identifiable_cl.solvers.base`: :class:`Solver`, the plain step (one encoder pass, the loss, Adam);
- :mod:`~identifiable_cl.solvers.queue`: MoCo's momentum encoder and key queue (a loss with ``negatives: queue``);
- :mod:`~identifiable_cl.solvers.views`: a process with views (``dgp.views``), every pair of views contrasted;
- :mod:`~identifiable_cl.solvers.subsets`: views with contrasted subsets (``dgp.views.contrast``), each subset on
  the coordinates of its shared block (Yao et al. 2024);
- :mod:`~identifiable_cl.solvers.captured`: the plain step recorded once as a CUDA graph and replayed
  (``train.capture: graph``);
- :mod:`~identifiable_cl.solvers.packed`: K runs stepped together along a run axis.

:func:`solver_class` chooses a run's variant from its process and loss.
"""

from __future__ import annotations

from typing import Any, Mapping

from torch import nn

import dgp
from identifiable_cl.losses.contract import traits
from identifiable_cl.solvers.base import Solver
from identifiable_cl.solvers.captured import CapturedSolver
from identifiable_cl.solvers.queue import QueueSolver
from identifiable_cl.solvers.subsets import SubsetSolver
from identifiable_cl.solvers.views import ViewSolver

__all__ = ["CapturedSolver", "QueueSolver", "Solver", "SubsetSolver", "ViewSolver", "solver_class"]


def solver_class(config: Mapping[str, Any], process: dgp.Process, loss: nn.Module) -> type[Solver]:
    """The step a run takes: with views :class:`ViewSolver` (:class:`SubsetSolver` when they contrast subsets,
    ``dgp.views.contrast``), with MoCo's queue :class:`QueueSolver` (the two are never combined:
    :func:`identifiable_cl.rules.check_views`), else :class:`CapturedSolver` under ``train.capture: graph``
    and :class:`Solver` otherwise."""
    if process.view_count > 1:
        return ViewSolver if process.views.contrasted is None else SubsetSolver
    if traits(loss).queue:
        return QueueSolver
    return CapturedSolver if config["train"]["capture"] == "graph" else Solver
