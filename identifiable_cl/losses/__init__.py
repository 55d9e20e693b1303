"""Contrastive losses, registered by name in :data:`LOSSES`.

``infonce``, ``aninfonce``, ``hard_negative`` and ``ensemble`` (InfoNCE's family); ``nce`` (binary
noise-contrastive estimation), ``nwj`` (the Nguyen–Wainwright–Jordan bound), ``margin`` (the pairwise
contrastive loss with a margin), ``triplet``, ``scl`` (the spectral contrastive loss), ``pcl``
(permutation-contrastive learning, real against time-permuted pairs), ``tcl`` (time-contrastive learning, a
classifier of the segment) and ``gcl`` (generalized contrastive learning, real against permuted segment labels);
see each module for the equation it implements and its source, and ``base`` for the negative sets and reductions.
"""

from dgp.registry import Registry

LOSSES = Registry("losses", "loss")
"""Losses by name."""

from identifiable_cl.losses import (  # noqa: E402,F401
    aninfonce, blocked, ensemble, gcl, hard_negative, infonce, margin, native, nce, nwj, pcl, scl, tcl, triplet,
)
from identifiable_cl.losses.aninfonce import AnInfoNCE  # noqa: E402
from identifiable_cl.losses.base import ContrastiveLoss  # noqa: E402
from identifiable_cl.losses.ensemble import Ensemble  # noqa: E402
from identifiable_cl.losses.hard_negative import HardNegativeInfoNCE  # noqa: E402
from identifiable_cl.losses.infonce import InfoNCE  # noqa: E402

__all__ = ["LOSSES", "AnInfoNCE", "ContrastiveLoss", "Ensemble", "HardNegativeInfoNCE", "InfoNCE"]
