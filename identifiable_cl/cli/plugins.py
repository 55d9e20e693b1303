"""``icl plugins``: every registered component by kind and name, with where it came from and its options."""

from __future__ import annotations

import argparse
import inspect
from typing import Any

from identifiable_cl.cli import VERBS

SUPPLIED = {"losses": ("dim",), "encoders": ("input_dim", "latent_dim")}
"""Options that ``icl`` itself passes when it builds a component of the kind (not set in a config)."""


def option_lines(kind: str, obj: Any) -> list[str]:
    """``name = default  description`` for each option of ``obj`` (indented for the listing)."""
    from dgp.registry import option_docs, option_parameters
    from identifiable_cl.config import yaml_text

    try:
        params, var_kwargs = option_parameters(obj)
    except (TypeError, ValueError) as exc:
        return [f"    (options cannot be read: {exc})"]
    docs = option_docs(obj)
    cells = []
    for name, param in params.items():
        if name in SUPPLIED.get(kind, ()):
            default = "(set by icl)"
        elif param.default is inspect.Parameter.empty:
            default = "(required)"
        else:
            default = f"= {yaml_text(param.default)}"
        cells.append((f"{name} {default}", docs.get(name, "")))
    if var_kwargs:
        cells.append(("**options", "takes any other option too"))
    width = max((len(left) for left, _ in cells), default=0)
    return [f"    {left:<{width}}  {doc}".rstrip() for left, doc in cells]


def run(args: argparse.Namespace) -> int:
    import dgp
    import identifiable_cl.encoders  # noqa: F401
    import identifiable_cl.evaluation  # noqa: F401
    import identifiable_cl.losses  # noqa: F401
    from dgp.registry import REGISTRIES

    dgp.load_builtins()

    kinds = sorted(REGISTRIES)
    if args.kind is not None:
        if args.kind not in REGISTRIES:
            raise ValueError(f"--kind {args.kind!r} is not a kind of component; kinds: {', '.join(kinds)}")
        kinds = [args.kind]
    for kind in kinds:
        print(f"{kind}:")
        for entry in REGISTRIES[kind]:
            print(f"  {entry.name:<20} {entry.origin}")
            if kind == "metrics":  # what it measures
                print(f"    {entry.obj().summary()}")
            for line in option_lines(kind, entry.obj):
                print(line)
    return 0


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``plugins`` to the ``icl`` subcommands."""
    p = subparsers.add_parser(
        "plugins",
        help=VERBS["plugins"],
        description="Every registered component (built-in or from an installed plugin) by kind and name, "
        "where it came from, and below it each option with its default and, where the component "
        "declares it (OPTION_DOCS), what it means.",
    )
    p.add_argument("--kind", metavar="KIND", help="show this kind only (e.g. losses, conditionals)")
    p.set_defaults(func=run)
    return p
