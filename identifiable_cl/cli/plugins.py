"""``icl plugins``: every registered component by kind and name, with where it came from."""

from __future__ import annotations

import argparse


def run(args: argparse.Namespace) -> int:
    import dgp  # noqa: F401  (registration)
    import identifiable_cl.encoders  # noqa: F401
    import identifiable_cl.losses  # noqa: F401
    from dgp.registry import REGISTRIES

    for kind in sorted(REGISTRIES):
        print(f"{kind}:")
        for entry in REGISTRIES[kind]:
            print(f"  {entry.name:<20} {entry.origin}")
    return 0


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``plugins`` to the ``icl`` subcommands."""
    p = subparsers.add_parser("plugins", help="list every registered component by kind and name, with its origin")
    p.set_defaults(func=run)
    return p
