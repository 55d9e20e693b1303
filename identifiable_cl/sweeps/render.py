"""The command line a W&B agent builds for one run (``wandb_agent.Agent._command_run``).

``${envvar:NAME}`` inside any entry becomes the variable's value (or ``NAME``
when unset). An entry that is exactly ``${macro}`` is replaced by a list:
``${args}`` → ``--key=value`` per parameter, the value written with Python's
``str`` (``True``, ``[1, 2]``, ``a b`` as one argument, no shell quoting);
``${args_no_equals}`` → ``--key value``; ``${args_no_hyphens}`` → ``key=value``;
``${args_no_boolean_flags}`` → ``--flag`` for True, nothing for False;
``${args_json}`` → one JSON argument; ``${args_json_file}`` → the path of a
file holding that JSON; ``${args_append_hydra}`` / ``${args_override_hydra}``
→ ``+key=value`` / ``++key=value``; ``${interpreter}`` → ``python``;
``${program}`` → the file's ``program``; ``${env}`` → ``/usr/bin/env``.
Any other entry is kept as ``str(entry)``.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Mapping, Sequence

ENVVAR = re.compile(r"\$\{envvar:([A-Z0-9_]*)\}")


def argument_forms(params: Mapping[str, Any]) -> dict[str, list[str]]:
    """Every list form of the parameters an agent offers as a macro."""
    return {
        "args": [f"--{k}={v}" for k, v in params.items()],
        "args_no_equals": [part for k, v in params.items() for part in (f"--{k}", str(v))],
        "args_no_hyphens": [f"{k}={v}" for k, v in params.items()],
        "args_no_boolean_flags": [
            f"--{k}" if v is True else f"--{k}={v}" for k, v in params.items() if not (isinstance(v, bool) and not v)
        ],
        "args_json": [json.dumps(dict(params))],
        "args_append_hydra": [f"+{k}={v}" for k, v in params.items()],
        "args_override_hydra": [f"++{k}={v}" for k, v in params.items()],
    }


def render_args(params: Mapping[str, Any]) -> list[str]:
    """``${args}``: ``--key=value`` for each parameter, in order."""
    return argument_forms(params)["args"]


def render_command(
    command: Sequence[Any],
    params: Mapping[str, Any],
    *,
    program: str | None = None,
    args_json_file: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> list[str]:
    """The argument list of one run, exactly as a W&B agent would start it."""
    environ = os.environ if environ is None else environ
    macros: dict[str, list[str]] = {
        **argument_forms(params),
        "interpreter": ["python"],
        "program": [program] if program is not None else [],
        "env": ["/usr/bin/env"],
        "args_json_file": [args_json_file] if args_json_file is not None else [],
    }
    out: list[str] = []
    for entry in command:
        text = ENVVAR.sub(lambda m: environ.get(m.group(1), m.group(1)), entry) if isinstance(entry, str) else str(entry)
        if text.startswith("${") and text.endswith("}"):
            out += macros.get(text[2:-1], [])
        else:
            out.append(text)
    return out


def describe(params: Mapping[str, Any]) -> str:
    """``key=value`` pairs on one line, for messages."""
    return " ".join(f"{k}={v}" for k, v in params.items())
