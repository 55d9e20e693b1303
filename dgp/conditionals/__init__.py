"""Positive conditionals p(z+ | z); importing this package registers them all."""

from dgp.conditionals import anisotropic, content_style, isotropic, vmf  # noqa: F401
