"""Bayes search and hyperband stopping without a W&B server, through W&B's own engine.

W&B's sweep server runs the PyPI package ``sweeps`` (0.3 or later): ``next_run(config, runs)``
proposes the next point from the runs so far and ``stop_runs(config, runs)`` names the runs
hyperband would stop. Here the same functions get the runs this machine knows (as
``SweepRun``: name, state, config ``{key: {"value": v}}``, summary metrics, history), so a
bayes search or a hyperband schedule runs offline exactly as the server would run it. The
package is optional (see :data:`INSTALL`; grid and random never need it).

Known properties of the engine, handled here:

- it draws from the process-global ``random`` and ``numpy.random``: each proposal is drawn
  with both seeded from the sweep's ``--seed`` and the proposal's position, and their
  previous states restored, so a search is repeatable and disturbs nothing else;
- categorical values ``0`` and ``False`` are mis-encoded by its bayes search, so categorical
  parameters are given to it as the tokens ``"v0"``, ``"v1"``, ... and decoded back;
- with fewer than a handful of finished runs its bayes search proposes random points;
- hyperband counts logged entries of the metric (here: evaluations), not training steps;
  a stopped run is given to it as ``killed``, as the server does.
"""

from __future__ import annotations

import contextlib
import random
import warnings
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from dgp.seeding import stream_seed
from identifiable_cl.sweeps.spec import SweepSpec

INSTALL = "pip install 'identifiable-cl[sweeps]' && pip install --no-deps 'sweeps>=0.3,<0.4'"
"""How to install the engine: ``sweeps`` 0.3 declares ``numpy<2`` but works with numpy 2, so it is
installed without its dependencies (the extra brings the others) and numpy is left alone."""
MINIMUM = (0, 3)

STATES = {"finished": "finished", "failed": "failed", "stopped": "killed", "running": "running"}
"""The state of a run here → its state for the engine."""


def engine():
    """The ``sweeps`` module; a ValueError with the install command when it is missing or too old."""
    try:
        with warnings.catch_warnings():  # 0.3.0 still spells a pydantic 1 option; harmless
            warnings.simplefilter("ignore", UserWarning)
            import sweeps
    except ImportError:
        sweeps = None
    if not hasattr(sweeps, "next_run"):  # missing, or a folder named sweeps/ found as a namespace package
        raise ValueError(f"method bayes and early_terminate need W&B's sweep engine (the `sweeps` package): {INSTALL}")
    version = tuple(int(part) for part in sweeps.__version__.split(".")[:2] if part.isdigit())
    if version < MINIMUM:
        raise ValueError(f"sweeps {sweeps.__version__} is too old (0.2 drops run metrics under pydantic 2): {INSTALL}")
    return sweeps


@dataclass
class SearchRun:
    """What the runner knows of one run: its folder name, parameters, state, summary and history."""

    name: str
    params: dict[str, Any]
    state: str
    summary: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)


def _tokens(spec: SweepSpec) -> dict[str, list[Any]]:
    """Each categorical parameter's values, in the order of its tokens."""
    return {p.name: list(p.spec["values"]) for p in spec.parameters if p.kind == "categorical"}


def engine_config(spec: SweepSpec) -> dict[str, Any]:
    """The sweep config the engine gets: categorical values replaced by their tokens."""
    config = {k: v for k, v in spec.raw.items() if k != "parameters"}
    tokens = _tokens(spec)
    config["parameters"] = {
        name: ({**dict(raw), "values": [f"v{i}" for i in range(len(tokens[name]))]} if name in tokens else dict(raw))
        for name, raw in spec.raw["parameters"].items()
    }
    return config


def _encode(spec: SweepSpec, params: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    tokens = _tokens(spec)
    out = {}
    for name, value in params.items():
        if name in tokens:
            matches = [i for i, v in enumerate(tokens[name]) if v == value and type(v) is type(value)]
            value = f"v{matches[0]}" if matches else value
        out[name] = {"value": value}
    return out


def _plain(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


def decode(spec: SweepSpec, config: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """A proposal's ``{key: {"value": v}}`` as the run's parameters, in name order, as Python values."""
    tokens = _tokens(spec)
    kinds = {p.name: p.kind for p in spec.parameters}
    params = {}
    for name in sorted(config):
        value = _plain(config[name]["value"])
        if name in tokens and isinstance(value, str) and value.startswith("v") and value[1:].isdigit():
            value = tokens[name][int(value[1:])]
        elif kinds.get(name) == "int_uniform" and isinstance(value, float) and value.is_integer():
            value = int(value)
        params[name] = value
    return params


def _engine_runs(spec: SweepSpec, runs: Sequence[SearchRun]) -> list:
    sweeps = engine()
    return [
        sweeps.SweepRun(name=r.name, state=STATES[r.state], config=_encode(spec, r.params),
                        summary_metrics=dict(r.summary), history=list(r.history))
        for r in runs
    ]


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """The global ``random`` and ``numpy.random`` seeded with ``seed`` inside, restored after."""
    saved = random.getstate(), np.random.get_state()
    random.seed(seed)
    np.random.seed(seed % 2**32)
    try:
        yield
    finally:
        random.setstate(saved[0])
        np.random.set_state(saved[1])


def propose(spec: SweepSpec, runs: Sequence[SearchRun], seed: int, position: int) -> dict[str, Any] | None:
    """The engine's next point given ``runs`` (None when it has no more), drawn reproducibly."""
    sweeps = engine()
    with seeded(stream_seed(seed, f"sweep.{spec.name}.{position}")):
        proposal = sweeps.next_run(engine_config(spec), _engine_runs(spec, runs))
    return None if proposal is None else decode(spec, proposal.config)


def to_stop(spec: SweepSpec, runs: Sequence[SearchRun]) -> set[str]:
    """The names of the running runs hyperband stops now (``early_terminate`` of the sweep file)."""
    if "early_terminate" not in spec.raw:
        return set()
    stopped = engine().stop_runs(engine_config(spec), _engine_runs(spec, runs))
    return {r.name for r in stopped}
