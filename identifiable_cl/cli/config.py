"""``icl config``: the resolved, fully checked config a run would train with, or every config key."""

from __future__ import annotations

import argparse

from identifiable_cl.arguments import OVERRIDE
from identifiable_cl.cli import VERBS
from identifiable_cl.components import load_config
from identifiable_cl.config import dump, key_listing, parse_overrides


def run(args: argparse.Namespace) -> int:
    # ``--keys VALUE`` reaches here as the override ``--keys=VALUE`` (see ``identifiable_cl.arguments.split``)
    keys = [o for o in args.overrides if (m := OVERRIDE.fullmatch(o)) and m.group(1) == "keys"]
    if args.keys or keys:
        extra = ([args.config] if args.config else []) + [o.split("=", 1)[1] for o in keys]
        extra += [o for o in args.overrides if o not in keys]
        if extra:
            raise ValueError(
                f"--keys lists every config key and takes nothing else; got {' '.join(map(repr, extra))} "
                "(icl config [CONFIG] [--key=value ...] prints the resolved config)"
            )
        print(key_listing(components=True))
        return 0
    print(dump(load_config(args.config, parse_overrides(args.overrides))), end="")
    return 0


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``config`` to the ``icl`` subcommands."""
    p = subparsers.add_parser(
        "config",
        help=VERBS["config"],
        description="Print, as YAML, the config icl train would run with the same CONFIG and overrides: the "
        "defaults, then CONFIG (a YAML file or packaged preset), then the --dotted.key=value overrides, fully "
        "checked. With --keys, list every key with its type, default, allowed values and meaning, and the "
        "options of each component section's default component.",
    )
    p.add_argument("config", nargs="?", help="YAML config or packaged preset (default: the built-in default experiment)")
    p.add_argument("--keys", action="store_true", help="list every config key instead")
    p.set_defaults(func=run)
    return p
