"""Positive conditionals p(z+ | z), registered by name in :data:`CONDITIONALS`; importing this package fills it."""

from dgp.base import CONDITIONAL_CONTRACT
from dgp.defaults import BUILTIN_MODULES
from dgp.registry import Registry

CONDITIONALS = Registry("conditionals", "dgp.conditional", builtins=BUILTIN_MODULES,
                        contract=CONDITIONAL_CONTRACT)
"""Positive conditionals by name (the content-style one lives in :mod:`dgp.content_style`)."""

from dgp.conditionals import anisotropic, isotropic, vmf  # noqa: E402,F401  (registration)
