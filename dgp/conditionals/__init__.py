"""Positive conditionals p(z+ | z); importing this package registers them all."""

from dgp.conditionals import anisotropic, isotropic, vmf  # noqa: F401
