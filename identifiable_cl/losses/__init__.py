"""Contrastive losses, registered by name in ``identifiable_cl.registries.LOSSES``.

``infonce``, ``aninfonce``, ``hard_negative`` and ``ensemble``; see each module for the
equation it implements and ``base`` for the negative sets and reductions.
"""

from identifiable_cl.losses import aninfonce, blocked, ensemble, hard_negative, infonce, native  # noqa: F401
from identifiable_cl.losses.aninfonce import AnInfoNCE
from identifiable_cl.losses.base import ContrastiveLoss
from identifiable_cl.losses.ensemble import Ensemble
from identifiable_cl.losses.hard_negative import HardNegativeInfoNCE
from identifiable_cl.losses.infonce import InfoNCE

__all__ = ["AnInfoNCE", "ContrastiveLoss", "Ensemble", "HardNegativeInfoNCE", "InfoNCE"]
