"""How ``icl train``'s command line is read: its own options, the config file, and the config overrides.

One reading for everything that starts or checks a run: ``icl train`` itself, the
pack files of ``icl sweep run --pack``, and the check of every planned sweep run,
which renders the sweep's own command as a W&B agent would and reads it here.

An override is any argument of the forms of :data:`OVERRIDE`
(``--key=value``, ``key=value``, ``+key=value``, ``++key=value``) or ``--key value``
(two arguments, as ``${args_no_equals}`` renders them); :data:`TRAIN_OPTIONS` are ``icl train``'s own.
"""

from __future__ import annotations

import argparse
import re
from itertools import islice
from typing import Any, Sequence

OVERRIDE = re.compile(r"(?:--?|\+\+?)?([A-Za-z_][\w.\-]*)=(.*)", flags=re.S)
"""A config override argument: ``--key=value``, ``-key=value``, ``key=value``, ``+key=value`` or ``++key=value``."""

TRAIN_OPTIONS: dict[str, dict[str, Any]] = {
    "--out": {"default": "runs", "help": "parent folder of the new run directory (default: runs)"},
    "--run-dir": {"help": "exact run directory to create"},
    "--resume": {"metavar": "RUN_DIR", "help": "continue a saved run from its last checkpoint"},
    "--quiet": {"action": "store_true", "help": "no progress bar"},
    "--pack-seeds": {"metavar": "SEEDS", "help": "train one run per seed (e.g. 0-7, or 1,3,5) in one process "
                     "(batched on a GPU, in turn on a CPU)"},
    "--pack-file": {"metavar": "FILE", "help": argparse.SUPPRESS},
}
"""``icl train``'s own options (argparse keywords), declared once: its parser and :func:`split` read them."""
FLAGS = tuple(name for name, kw in TRAIN_OPTIONS.items() if kw.get("action") == "store_true")
OPTIONS_WITH_VALUE = tuple(name for name in TRAIN_OPTIONS if name not in FLAGS)
_DOTTED_FLAG = re.compile(r"--[A-Za-z_][\w.\-]*")

UNREADABLE_MACROS = {
    "args_no_boolean_flags": "it renders True as a bare --flag and drops parameters whose value is False",
    "args_json": "it passes every parameter as one JSON argument",
    "args_json_file": "it passes the parameters in a JSON file",
}
"""W&B command macros whose arguments ``icl train`` cannot read, and why."""


def split(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """``(options, overrides)``: ``icl train``'s own arguments (with the config file) and the
    overrides, each as one ``--key=value``-like string for :func:`identifiable_cl.config.parse_overrides`.

    Done before argparse, which would take a value with a space (``--k=[1, 2]``, as a sweep
    agent renders lists) for a positional argument.
    """
    options: list[str] = []
    overrides: list[str] = []
    args = iter(argv)
    for arg in args:
        if arg.split("=", 1)[0] in TRAIN_OPTIONS:
            options += [arg, *islice(args, 1)] if arg in OPTIONS_WITH_VALUE else [arg]
        elif OVERRIDE.fullmatch(arg):
            overrides.append(arg)
        elif _DOTTED_FLAG.fullmatch(arg) and arg != "--help" and (value := next(args, None)) is not None:
            overrides.append(f"{arg}={value}")
        else:
            options.append(arg)
    return options, overrides


def config_file(options: Sequence[str]) -> str | None:
    """The config file (or preset name) among :func:`split`'s options, if one is given."""
    args = iter(options)
    for arg in args:
        if arg in OPTIONS_WITH_VALUE:
            next(args, None)  # its value
        elif not arg.startswith("-"):
            return arg
    return None


def after_train(argv: Sequence[str]) -> list[str] | None:
    """The arguments after ``train`` in a command line, or None when it does not run ``icl train``."""
    words = [str(w) for w in argv]
    return words[words.index("train") + 1 :] if "train" in words else None
