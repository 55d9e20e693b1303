"""A run spec: a config as a run trains it, resolved and fully checked once, and the one policy of what each way
of opening a run may change.

A run is opened in one of three :data:`MODES`: ``new`` (defaults ← a YAML file, preset or mapping ← overrides),
``resume`` (a saved run's config, migrated, ← overrides of the keys :data:`CHANGEABLE` allows; ``train.steps`` at
least the step reached) and ``evaluate`` (a saved run's config ← ``eval.*`` overrides; its last checkpoint).
:func:`identifiable_cl.components.resolve` makes every spec, with one full check
(:func:`identifiable_cl.components.check`); everything downstream takes the spec and trusts it while its content
is still the one checked (:meth:`RunSpec.unchanged`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from dgp.checks import canonical, fail

CHANGEABLE: dict[str, tuple[str, ...]] = {"resume": ("train", "eval", "device", "wandb"), "evaluate": ("eval",)}
"""The top-level config keys an override may change when a saved run is opened to resume or to evaluate."""
MODES = ("new", *CHANGEABLE)
"""The ways of opening a run."""
REFUSED = {
    "resume": "cannot be changed on resume; only train.*, eval.*, device and wandb.* can",
    "evaluate": "only eval.* keys can be overridden when evaluating a run (e.g. --eval.final_n_fit=4096); the rest "
                "of its config is the one it was trained with",
}
"""Why an override of another key is refused, by mode."""


def _content(config: Mapping[str, Any]) -> str:
    return json.dumps(config, sort_keys=True, default=repr)


class RunSpec(dict):
    """A resolved config that passed the full check, as the run trains it (a dict of the config's sections), and
    where the run comes from: ``mode`` (one of :data:`MODES`), and for a saved run its folder ``run_dir``, its
    ``process`` (``dgp.pt``'s, never re-drawn) and its last checkpoint's ``state`` (None before the first)."""

    def __init__(self, config: Mapping[str, Any], mode: str = "new", run_dir: Path | None = None,
                 process: Any = None, state: Mapping[str, Any] | None = None):
        super().__init__(config)
        self.mode, self.run_dir, self.process, self.state = mode, run_dir, process, state
        self._checked = _content(self)

    def unchanged(self) -> bool:
        """Whether the spec still holds what was checked (a caller may have edited it since)."""
        return _content(self) == self._checked


def checked_spec(spec: Any, where: str) -> RunSpec:
    """``spec`` when it is a :class:`RunSpec`, else a one-line ValueError naming ``where`` and what to pass."""
    if not isinstance(spec, RunSpec):
        raise ValueError(f"{where}: a spec of type {type(spec).__name__} is invalid: give the RunSpec that "
                         "identifiable_cl.resolve returns (resolve(config) for a new run's config)")
    return spec


def _saved_as(config: Mapping[str, Any], key: str, value: Any) -> bool:
    """Whether the saved ``config`` already holds ``value`` at the dotted ``key`` (an override that
    changes nothing, as a sweep repeating a run's own parameters passes)."""
    node: Any = config
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False
        node = node[part]
    return canonical(node) == canonical(value)


def refuse_overrides(mode: str, overrides: Mapping[str, Any], config: Mapping[str, Any]) -> None:
    """A ValueError for the overrides a saved run opened in ``mode`` may not take (:data:`CHANGEABLE`); to resume,
    an override that repeats the saved ``config``'s value (as a sweep repeating a run's own parameters passes) is
    no change."""
    refused = [key for key in overrides if key.split(".")[0] not in CHANGEABLE[mode]
               and not (mode == "resume" and _saved_as(config, key, overrides[key]))]
    if refused and mode == "resume":
        fail(refused[0], overrides[refused[0]], REFUSED[mode])
    if refused:
        raise ValueError(f"{', '.join(f'{k}={overrides[k]!r}' for k in refused)}: {REFUSED[mode]}")


def refuse_going_back(steps: int, reached: int) -> None:
    """A resumed run only goes on: ``train.steps`` may not fall below the step its checkpoint ``reached``."""
    if steps < reached:
        raise ValueError(f"train.steps={steps} is invalid: the run has reached step {reached}, and a resumed run only "
                         f"goes on (give train.steps >= {reached})")
