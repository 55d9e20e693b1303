"""A run's training step as an object, one file per variant of the step.

- :mod:`~identifiable_cl.solvers.base`: :class:`Solver`, the plain step (one encoder pass, the loss, Adam);
- :mod:`~identifiable_cl.solvers.queue`: MoCo's momentum encoder and key queue (a loss with ``negatives: queue``);
- :mod:`~identifiable_cl.solvers.views`: a process with views (``dgp.views``), every pair of views contrasted;
- :mod:`~identifiable_cl.solvers.packed`: K runs stepped together, one batched encoder pass.

:func:`solver_class` chooses a run's variant from its process and loss.
"""

from __future__ import annotations

from torch import nn

import dgp
from identifiable_cl.solvers.base import Solver
from identifiable_cl.solvers.queue import QueueSolver
from identifiable_cl.solvers.views import ViewSolver

__all__ = ["QueueSolver", "Solver", "ViewSolver", "solver_class"]


def solver_class(process: dgp.Process, loss: nn.Module) -> type[Solver]:
    """The step a run takes: with views :class:`ViewSolver`, with MoCo's queue :class:`QueueSolver` (the two
    are never combined: :func:`identifiable_cl.components.check_views`), else :class:`Solver`."""
    if process.view_count > 1:
        return ViewSolver
    if getattr(loss, "queue", None):
        return QueueSolver
    return Solver
