"""``icl plot``: redraw a run's figures from its own files."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from identifiable_cl import rundir
from identifiable_cl.cli import VERBS
from identifiable_cl.plots import draw_figures


def run(args: argparse.Namespace) -> int:
    for run_dir in args.run_dirs:
        try:
            with rundir.owned(Path(run_dir)):
                figures = draw_figures(run_dir)
        except ModuleNotFoundError as exc:
            print(f"icl plot: {exc}", file=sys.stderr)
            return 2
        for name, path in figures.items():
            print(f"{name}: {path}")
    return 0


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``plot`` to the ``icl`` subcommands."""
    p = subparsers.add_parser(
        "plot",
        help=VERBS["plot"],
        description="Draw PNG figures into RUN_DIR/figures from the run's own files.",
    )
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run directories of `icl train`")
    p.set_defaults(func=run)
    return p
