"""The registries of the ``identifiable_cl`` package (the ``dgp`` ones live in ``dgp.registries``)."""

from dgp.registry import Registry

LOSSES = Registry("losses")
ENCODERS = Registry("encoders")
