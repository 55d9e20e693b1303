"""Synthetic data-generating processes for identifiability studies.

Standalone: this package never imports ``identifiable_cl``. Build a process
from a plain config dict with :func:`build_process`.
"""

from dgp import conditionals, content_style, marginals, mixing, negatives, spaces, views  # noqa: F401  (registration)
from dgp.process import Batch, Process, build_process, check_process, load_process
from dgp.conditionals import CONDITIONALS
from dgp.marginals import MARGINALS
from dgp.mixing import MIXINGS
from dgp.negatives import NEGATIVES
from dgp.spaces import SPACES
from dgp.views import VIEWS

__all__ = ["Batch", "Process", "build_process", "check_process", "load_process",
           "SPACES", "MARGINALS", "CONDITIONALS", "NEGATIVES", "MIXINGS", "VIEWS"]
