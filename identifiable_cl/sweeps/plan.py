"""The planned runs of a sweep: expanded, checked as ``icl train`` would read them, and given stable ids.

Each run's ``${args}`` are rendered as a W&B agent renders them, parsed back
the way ``icl train`` parses them, and resolved with
:func:`identifiable_cl.config.load_config` over the config file and fixed
``--key=value`` entries the command itself gives after ``train``. So a bad key
or value is reported for the first run that has it, before any run starts.

A run's id is derived from the sweep's name, its command and its parameters
(and how many earlier runs had the same parameters), so a rerun of the same
file finds the runs that already finished, even after seeds or values were
added to the file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from identifiable_cl.cli import OVERRIDE
from identifiable_cl.sweeps.expand import expand
from identifiable_cl.sweeps.render import render_args
from identifiable_cl.sweeps.spec import SweepSpec, digest

TRAIN_OPTIONS = ("out", "run-dir", "resume")
"""``icl train`` options that are not config overrides."""


@dataclass(frozen=True)
class PlannedRun:
    """One run of a sweep: its position, id, parameters and folder ``OUT/<sweep name>/<run id>``."""

    index: int
    run_id: str
    params: dict[str, Any]
    folder: Path


def train_arguments(command: list[Any]) -> tuple[str | None, list[str]]:
    """The config file and fixed ``--key=value`` overrides that follow ``train`` in a sweep command."""
    words = [str(c) for c in command]
    if "train" not in words:
        return None, []
    config, overrides = None, []
    for word in words[words.index("train") + 1 :]:
        if word.startswith("${"):
            continue
        if OVERRIDE.fullmatch(word):
            if word.lstrip("-").split("=", 1)[0] not in TRAIN_OPTIONS:
                overrides.append(word)
        elif not word.startswith("-") and config is None:
            config = word
    return config, overrides


def run_config(spec: SweepSpec, params: Mapping[str, Any]) -> dict[str, Any]:
    """The resolved config this run's ``icl train`` builds (a ValueError names the key)."""
    from identifiable_cl.config import load_config, parse_overrides

    config_file, fixed = train_arguments(spec.command)
    return load_config(config_file, parse_overrides(fixed + render_args(params)))


def check_run(spec: SweepSpec, index: int, params: Mapping[str, Any]) -> None:
    """Resolve the config this run's ``icl train`` would build; a ValueError names the run and the key."""
    args = render_args(params)
    try:
        run_config(spec, params)
    except ValueError as exc:
        raise ValueError(
            f"sweep file {spec.source}: rejected before any run started: run {index + 1} ({' '.join(args)}): {exc}"
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
