"""Sweep files: plain W&B sweep YAML, read and checked before any run starts.

A file must pass W&B's own schema (:mod:`identifiable_cl.sweeps.schema`), so
``wandb sweep FILE`` accepts it unchanged, and the rules of this project:
flat dotted parameter names that are ``icl train`` config keys (W&B's engine
does not expand nested ``parameters`` blocks into ``--a.b=`` arguments), and,
to run without a W&B server, ``method: grid`` or ``random`` and no
``early_terminate``. Every error names the file and the offending entry.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping


from identifiable_cl.sweeps import schema

DEFAULT_COMMAND = ("${env}", "${interpreter}", "${program}", "${args}")
"""What a W&B agent runs when the file has no ``command``."""
MACROS = (
    "env", "interpreter", "program", "args", "args_no_equals", "args_no_hyphens", "args_no_boolean_flags", "args_json",
    "args_json_file", "args_append_hydra", "args_override_hydra",
)
"""The ``${...}`` entries a W&B agent replaces in ``command`` (besides ``${envvar:NAME}`` inside an entry)."""
LOCAL_METHODS = ("grid", "random", "bayes")
"""Methods ``icl sweep run`` runs (bayes through W&B's engine, :mod:`identifiable_cl.sweeps.search`)."""
GRID_KINDS = ("constant", "categorical", "int_uniform", "q_uniform")
"""The parameter distributions W&B's grid search accepts."""
SERVER_HINT = "run it with `wandb sweep FILE` and `wandb agent SWEEP_ID` (or `icl sweep submit FILE --sweep-id ID`)"


@dataclass(frozen=True)
class Parameter:
    """One swept parameter: its dotted config key, W&B distribution and spec with W&B's defaults filled in."""

    name: str
    kind: str
    spec: Mapping[str, Any]


@dataclass(frozen=True)
class SweepSpec:
    """A checked sweep file. ``parameters`` are sorted by name, the order W&B's engine uses."""

    source: str
    raw: Mapping[str, Any]
    parameters: tuple[Parameter, ...]

    @property
    def swept(self) -> tuple[str, ...]:
        """The parameters that take more than one value (not a ``value``, nor a list of one)."""
        return tuple(p.name for p in self.parameters
                     if p.kind != "constant" and not (p.kind == "categorical" and len(p.spec.get("values", ())) == 1))

    @property
    def name(self) -> str:
        """The file's ``name``, else its file name without extension; safe as a folder name."""
        name = self.raw.get("name") or Path(self.source).stem
        return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.") or "sweep"

    @property
    def method(self) -> str:
        return self.raw["method"]

    @property
    def command(self) -> list[Any]:
        return list(self.raw.get("command") or DEFAULT_COMMAND)

    @property
    def program(self) -> str | None:
        return self.raw.get("program")

    @property
    def run_cap(self) -> int | None:
        cap = self.raw.get("run_cap")
        return None if cap is None else int(cap)

    @property
    def content_id(self) -> str:
        """A stable 8-character id of the file's parsed content (recorded in each run's ``status.json``)."""
        return digest(self.raw)


def digest(value: Any, length: int = 8) -> str:
    """A short lowercase hex digest of a YAML/JSON-like value, independent of key order."""
    text = json.dumps(value, sort_keys=True, default=repr, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def fail(source: str, problems: list[str]) -> None:
    lines = "\n".join(f"  - {p}" for p in problems)
    raise ValueError(f"sweep file {source}: rejected before any run started:\n{lines}")


def parse_sweep(raw: Any, source: str = "<sweep>") -> SweepSpec:
    """Check a parsed sweep config against W&B's schema and this project's rules."""
    from identifiable_cl.config import suggest

    problems = schema.violations(raw)
    if not problems and "parameters" not in raw:
        problems = ["parameters: required by icl, which checks, plans and runs each set of parameters itself; a sweep "
                    "whose search space is the scheduler's (scheduler.search_space) runs on W&B's server only "
                    "(wandb sweep, then wandb agent)"]
    if problems:
        fail(source, problems)
    parameters = []
    for name in sorted(raw["parameters"]):
        kind, spec = schema.classify(raw["parameters"][name])
        where = f"parameters.{name}"
        if kind == schema.NESTED:
            inner = ", ".join(f"{name}.{k}" for k in raw["parameters"][name]["parameters"])
            problems.append(
                f"{where}: nested 'parameters' blocks are not passed to `icl train` as dotted arguments by W&B; "
                f"write flat dotted names instead ({inner})"
            )
            continue
        if not is_config_key(name):
            problems.append(f"{where}: not an `icl train` config key{suggest(name)}")
        parameters.append(Parameter(name, kind, spec))
    command = [str(c) for c in raw.get("command") or DEFAULT_COMMAND]
    macros = [(i, entry, m.group(1)) for i, entry in enumerate(command) if (m := re.fullmatch(r"\$\{(.*)\}", entry))]
    known = ", ".join("${" + m + "}" for m in MACROS)
    problems += [f"command[{i}]: {entry!r} is not a W&B macro; known: {known}"
                 for i, entry, name in macros if name not in MACROS and not name.startswith("envvar:")]
    if "train" in command:
        from identifiable_cl.arguments import UNREADABLE_MACROS

        problems += [
            f"command[{i}]: `icl train` cannot read {entry}: {UNREADABLE_MACROS[name]}; use "
            "${args} (--key=value), ${args_no_hyphens}, ${args_no_equals} or the Hydra forms "
            "${args_append_hydra} / ${args_override_hydra}"
            for i, entry, name in macros if name in UNREADABLE_MACROS
        ]
    if (raw.get("method") == "bayes" or "early_terminate" in raw) and not isinstance(raw.get("metric"), dict):
        what = "a bayes search" if raw.get("method") == "bayes" else "early_terminate"
        problems.append(f"metric: {what} needs the metric to optimise, e.g. metric: {{name: r2_linear, goal: maximize}}")
    passing = [m for m in MACROS if m.startswith("args")]
    if parameters and not any(name in passing for _, _, name in macros):
        problems.append(f"command: {command} passes no argument macro ({', '.join('${' + m + '}' for m in passing)}), "
                        "so no run would see its swept parameters")
    if "${program}" in command and not raw.get("program"):
        problems.append("program: the command uses ${program} but the file names no program")
    if problems:
        fail(source, problems)
    return SweepSpec(source, raw, tuple(parameters))


def local_problems(spec: SweepSpec) -> list[str]:
    """Why this file cannot run without a W&B server (empty when it can)."""
    problems = []
    if spec.method not in LOCAL_METHODS:
        problems.append(f"method: {spec.method!r} needs a W&B server; {SERVER_HINT}. Locally: grid, random or bayes")
    if spec.method == "grid":
        problems += [f"parameters.{p.name}: distribution {p.kind!r} cannot be used with method grid; "
                     f"grid allows {', '.join(GRID_KINDS)}" for p in spec.parameters if p.kind not in GRID_KINDS]
    return problems


def load_sweep(path: str | Path, *, local: bool = True) -> SweepSpec:
    """Read and check a sweep file; with ``local`` also check that it can run without a W&B server."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"sweep file {str(path)!r} does not exist")
    from identifiable_cl.yamlfiles import read_yaml_mapping

    spec = parse_sweep(dict(read_yaml_mapping(path, "sweep file")), str(path))
    if local:
        problems = local_problems(spec)
        if problems:
            fail(str(path), problems)
    return spec


def is_config_key(name: str) -> bool:
    """Whether ``name`` can be set by ``icl train --name=...``: a typed leaf, the ``eval.*`` switch a metric declares
    itself, or an option of a component section.

    Whether a component accepts a given option depends on the component chosen in
    the same run, so that is checked later on each planned run's full config.
    """
    from identifiable_cl.config import COMPONENT_SECTIONS, DEFAULTS, flat_keys, metric_switches

    if name in flat_keys(DEFAULTS) or name in COMPONENT_SECTIONS or name in metric_switches(name):
        return True
    return any(name.startswith(section + ".") for section in COMPONENT_SECTIONS)
