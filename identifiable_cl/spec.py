"""A run spec: a config as a run trains it, resolved and fully checked once, and what each way of opening a run
may change.

A run is opened in one of three modes: ``new`` (defaults ← a YAML file or preset ← overrides), ``resume`` (a
saved run's config, migrated, ← overrides of the keys :data:`CHANGEABLE` allows) and ``evaluate`` (a saved
run's config ← ``eval.*`` overrides). :func:`identifiable_cl.components.load_config` and
:func:`identifiable_cl.components.load_run` make the spec with one full check
(:func:`identifiable_cl.components.check`); :func:`identifiable_cl.components.build` trusts a :class:`RunSpec`
whose content is still the one checked and checks anything else.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

CHANGEABLE: dict[str, tuple[str, ...]] = {"resume": ("train", "eval", "device", "wandb"), "evaluate": ("eval",)}
"""The top-level config keys an override may change when a saved run is opened to resume or to evaluate."""
REFUSED = {
    "resume": "cannot be changed on resume; only train.*, eval.*, device and wandb.* can",
    "evaluate": "only eval.* keys can be overridden when evaluating a run (e.g. --eval.final_n_fit=4096); the rest "
                "of its config is the one it was trained with",
}
"""Why an override of another key is refused, by mode."""


def _content(config: Mapping[str, Any]) -> str:
    return json.dumps(config, sort_keys=True, default=repr)


class RunSpec(dict):
    """A resolved config that passed the full check, as the run trains it (a dict of the config's sections)."""

    def __init__(self, config: Mapping[str, Any]):
        super().__init__(config)
        self._checked = _content(self)

    def unchanged(self) -> bool:
        """Whether the spec still holds what was checked (a caller may have edited it since)."""
        return _content(self) == self._checked
