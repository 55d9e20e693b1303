"""The registries of the ``dgp`` package."""

from dgp.registry import Registry

SPACES = Registry("spaces")
MARGINALS = Registry("marginals")
CONDITIONALS = Registry("conditionals")
NEGATIVES = Registry("negatives")
MIXINGS = Registry("mixings")
