"""Older run folders brought up to the files this code writes: one schema version, one :func:`migrate`.

``meta.json`` records the ``schema_version`` of a run folder's files (:data:`SCHEMA_VERSION` when this
code writes it); a folder without one is version 1. :func:`identifiable_cl.components.resolve` reads
a run's files as written (:mod:`identifiable_cl.rundir`) and upgrades them here, one version at a
time, in memory: nothing on disk changes until the run is written again (a resume rewrites its
config and meta).

Version 1 → 2 (runs saved before the schema version existed):

- two config keys added since then behaved otherwise than their default before they existed
  (:data:`VERSION_1_BEHAVIOUR`): the encoder's float32 CPU products ran through torch's BLAS
  (``train.matmul: blas``), and the periodic nonlinear R² was fitted on 1,000 Nyström centres
  (``eval.n_centres: 1000``); every other key a saved config lacks takes its default, as for any
  version (a saved config is a layer over the defaults);
- the process's fingerprint in ``dgp.pt`` may hash its config's numbers as written (``kappa: 10`` and
  ``kappa: 10.0`` then hashed differently); when it does, today's canonical fingerprint replaces it.

Version 2 → 3: the process drew with the first version of its rejection samplers (``dgp.sampler: 1``,
:mod:`dgp.blocks`), which consume the random streams differently from the blocks new runs use; the
config records it so that the run resumes with the draws it began with. ``dgp.pt`` needs no change: a
saved process without the entry drew with version 1 (:func:`dgp.process.saved_config`), and version 1 is
left out of its fingerprint.

Version 3 → 4: two objectives changed their default, which runs saved before trained without: ``gcl`` gained its
learnt term of x alone (``loss.x_term``, null before), and the objective over contrasted subsets of views became
the paper's joint form (``dgp.views.objective``, ``pairs`` before). The config records the earlier value where the
run used that loss or contrasted subsets, and ``dgp.pt``'s process its objective (with the fingerprint of that
config), so that the run resumes with the objective it began with.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Mapping

import dgp
from dgp import checks
from dgp.process import saved_config
from identifiable_cl.config import set_default
from identifiable_cl.rundir import SCHEMA_VERSION

VERSION_1_BEHAVIOUR: dict[str, Any] = {"train.matmul": "blas", "eval.n_centres": 1000}
"""Keys added before version 2 whose earlier behaviour differs from their default."""
VERSION_2_BEHAVIOUR: dict[str, Any] = {"dgp.sampler": 1}
"""Keys added between versions 2 and 3 whose earlier behaviour differs from their default."""

Saved = tuple[dict[str, Any], dict[str, Any]]
"""A run's config and its saved process (``dgp.pt``'s mapping)."""


def schema_version(meta: Mapping[str, Any] | None) -> int:
    """The schema version ``meta.json`` records (1 when it records none, or is missing)."""
    version = (meta or {}).get("schema_version", 1)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValueError(f"schema_version={version!r} is invalid: a version number >= 1")
    return version


def _from_1(config: dict[str, Any], saved: dict[str, Any]) -> Saved:
    for key, value in VERSION_1_BEHAVIOUR.items():
        set_default(config, key, value)
    process = _rebuilt(saved, saved.get("config"))
    if process is None:
        return config, saved  # damaged: dgp.load_process says what is wrong
    written = {k: v for k, v in process.config.items() if k != "sampler"}  # as version 1 wrote it
    if saved.get("fingerprint") == process.fingerprint_of({"config": written, "seed": process.seed}):
        saved = {**saved, "fingerprint": process.fingerprint()}
    return config, saved


def _from_2(config: dict[str, Any], saved: dict[str, Any]) -> Saved:
    for key, value in VERSION_2_BEHAVIOUR.items():
        set_default(config, key, value)
    return config, saved


def _from_3(config: dict[str, Any], saved: dict[str, Any]) -> Saved:
    loss = config.get("loss")
    if isinstance(loss, dict) and loss.get("name") == "gcl":
        loss.setdefault("x_term", None)
    views = (config.get("dgp") or {}).get("views")
    if isinstance(views, dict) and views.get("contrast") is not None:
        views.setdefault("objective", "pairs")
    drew = (saved.get("config") or {}).get("views") if isinstance(saved.get("config"), dict) else None
    if isinstance(drew, dict) and drew.get("contrast") is not None and "objective" not in drew:
        saved = _with_config(saved, {**saved["config"], "views": {**drew, "objective": "pairs"}})
    return config, saved


def _rebuilt(saved: dict[str, Any], config: Any) -> dgp.Process | None:
    """The process of ``config`` with ``saved``'s seed and drawn parameters (``dgp.pt``'s mapping), built as
    :func:`dgp.load_process` builds it; None when they do not fit (damaged: ``load_process`` then says why)."""
    try:
        with checks.checking():  # the saved state replaces every drawn parameter: skip the costly draws
            process = dgp.Process(saved_config(config), saved["seed"])
        process.load_state_dict(saved["state"])
    except (KeyError, RuntimeError, TypeError, ValueError, AttributeError):
        return None
    return process


def _with_config(saved: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """``saved`` (a ``dgp.pt`` mapping) with its process's ``config`` replaced by ``config``, which draws the same
    parameters, and its fingerprint recomputed; unchanged when it does not load as written (damaged or altered:
    :func:`dgp.load_process` then says what is wrong)."""
    written, now = _rebuilt(saved, saved["config"]), _rebuilt(saved, config)
    if written is None or now is None or saved.get("fingerprint") != written.fingerprint():
        return saved
    return {**saved, "config": config, "fingerprint": now.fingerprint()}


STEPS: dict[int, Callable[[dict[str, Any], dict[str, Any]], Saved]] = {1: _from_1, 2: _from_2, 3: _from_3}
"""``STEPS[v]`` upgrades version v to v + 1."""


def migrate(config: Mapping[str, Any], saved: Mapping[str, Any], version: int) -> Saved:
    """A run's config and saved process as this code writes them, from files of schema ``version``."""
    if version > SCHEMA_VERSION:
        raise ValueError(f"schema_version={version} is newer than this identifiable-cl reads (up to "
                         f"{SCHEMA_VERSION}): the run was saved by a later version; upgrade to read it")
    config, saved = copy.deepcopy(dict(config)), dict(saved)
    for step in range(version, SCHEMA_VERSION):
        config, saved = STEPS[step](config, saved)
    return config, saved
