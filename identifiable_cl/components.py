"""Building the run's components from config sections through the registries."""

from __future__ import annotations

from typing import Any, Mapping

from torch import nn

import dgp
from dgp.checks import fail
from dgp.registry import Registry, accepts_var_kwargs, user_options
from identifiable_cl import encoders, losses  # noqa: F401  (registration)
from identifiable_cl.registries import ENCODERS, LOSSES

_REGISTRY_OF: dict[str, tuple[Registry, frozenset[str]]] = {
    "dgp.space": (dgp.SPACES, frozenset()),
    "dgp.marginal": (dgp.MARGINALS, frozenset()),
    "dgp.conditional": (dgp.CONDITIONALS, frozenset()),
    "dgp.negatives": (dgp.NEGATIVES, frozenset()),
    "dgp.mixing": (dgp.MIXINGS, frozenset()),
    "encoder": (ENCODERS, frozenset({"input_dim", "latent_dim"})),
    "loss": (LOSSES, frozenset({"dim"})),
}


def check_component(section: str, spec: Any) -> None:
    """The component named in ``spec`` exists and accepts every option given (nothing is built)."""
    registry, supplied = _REGISTRY_OF[section]
    if not isinstance(spec, Mapping) or "name" not in spec:
        fail(section, spec, "a mapping with a 'name' entry")
    obj = registry.get(spec["name"], f"{section}.name")
    allowed = user_options(obj, exclude=set(supplied))
    for option in spec:
        if option != "name" and option not in allowed and not accepts_var_kwargs(obj):
            fail(
                f"{section}.{option}",
                spec[option],
                f"unknown option for {section} {spec['name']!r}; allowed: {', '.join(allowed) or '(none)'}",
            )


def build_encoder(spec: Mapping[str, Any], input_dim: int, latent_dim: int) -> nn.Module:
    return ENCODERS.build(spec, key="encoder", input_dim=input_dim, latent_dim=latent_dim)


def build_loss(spec: Mapping[str, Any], dim: int) -> nn.Module:
    return LOSSES.build(spec, key="loss", dim=dim)
