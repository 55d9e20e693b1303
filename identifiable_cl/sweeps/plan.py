"""The planned runs of a sweep: expanded, checked as ``icl train`` would read them, and given stable ids.

Each run's command is rendered as a W&B agent renders it (whatever argument
macro it uses), read back the way ``icl train`` reads it
(:mod:`identifiable_cl.arguments`), and checked in full with
:func:`identifiable_cl.config.load_config`. So a bad key or value, or a
combination of components that cannot train, is reported for the first run
that has it, before any run starts.

A run's id is derived from the sweep's name, its command and its parameters
(and how many earlier runs had the same parameters), so a rerun of the same
file finds the runs that already finished, even after seeds or values were
added to the file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from identifiable_cl import arguments
from identifiable_cl.sweeps.expand import expand
from identifiable_cl.sweeps.render import describe, render_args, render_command
from identifiable_cl.sweeps.spec import SweepSpec, digest

@dataclass(frozen=True)
class PlannedRun:
    """One run of a sweep: its position, id, parameters and folder ``OUT/<sweep name>/<run id>``."""

    index: int
    run_id: str
    params: dict[str, Any]
    folder: Path

    @property
    def wandb_id(self) -> str:
        """The W&B run id: the run id together with the absolute folder, so the same sweep run
        into two output folders gives two W&B runs (``wandb sync`` would merge equal ids)."""
        return digest({"run": self.run_id, "folder": str(self.folder.resolve())})


def rendered_train_arguments(spec: SweepSpec, params: Mapping[str, Any]) -> tuple[str | None, list[str]]:
    """The config file and the overrides one run's ``icl train`` receives: the sweep's command
    rendered for ``params`` as a W&B agent renders it, then read as ``icl train`` reads it."""
    words = arguments.after_train(render_command(spec.command, params, program=spec.program, environ={}))
    return _config_and_overrides(words, render_args(params))


def train_arguments(command: list[Any]) -> tuple[str | None, list[str]]:
    """The config file and fixed overrides that follow ``train`` in a sweep command (no parameters)."""
    return _config_and_overrides(arguments.after_train([w for w in map(str, command) if not w.startswith("${")]), [])


def _config_and_overrides(words: list[str] | None, otherwise: list[str]) -> tuple[str | None, list[str]]:
    """The config file and overrides of the words after ``train``; ``(None, otherwise)`` without ``train``."""
    if words is None:
        return None, otherwise
    options, overrides = arguments.split(words)
    return arguments.config_file(options), overrides


def run_config(spec: SweepSpec, params: Mapping[str, Any]) -> dict[str, Any]:
    """The resolved config this run's ``icl train`` builds (a ValueError names the key)."""
    from identifiable_cl.components import load_config
    from identifiable_cl.config import parse_overrides

    config_file, overrides = rendered_train_arguments(spec, params)
    return load_config(config_file, parse_overrides(overrides))


def check_run(spec: SweepSpec, index: int, params: Mapping[str, Any]) -> None:
    """Resolve the config this run's ``icl train`` would build; a ValueError names the run and the key."""
    try:
        run_config(spec, params)
    except ValueError as exc:
        raise ValueError(
            f"sweep file {spec.source}: rejected before any run started: run {index + 1} ({describe(params)}): {exc}"
        ) from exc


def run_id(spec: SweepSpec, params: Mapping[str, Any], repeat: int) -> str:
    """8 lowercase hex characters, like a W&B run id."""
    return digest({"sweep": spec.name, "command": spec.command, "program": spec.program, "params": dict(params), "repeat": repeat})


def plan_runs(spec: SweepSpec, out: str | Path, *, count: int | None = None, seed: int = 0) -> list[PlannedRun]:
    """Expand, check and place every run of the sweep (see the module docstring)."""
    points = expand(spec, count=count, seed=seed)
    runs: list[PlannedRun] = []
    repeats: dict[str, int] = {}
    for index, params in enumerate(points):
        check_run(spec, index, params)
        key = digest(params, length=64)
        repeat = repeats.get(key, 0)
        repeats[key] = repeat + 1
        rid = run_id(spec, params, repeat)
        runs.append(PlannedRun(index, rid, params, Path(out) / spec.name / rid))
    return runs
