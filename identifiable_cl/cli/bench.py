"""``icl bench``: sampling, evaluation, loss, training, step-cost, precision, packing and per-run overhead figures of this machine."""

from __future__ import annotations

import argparse

from identifiable_cl.cli import VERBS


def run(args: argparse.Namespace) -> int:
    """Run the sections; a stop signal (SIGTERM, SIGUSR2, Ctrl-C) ends the bench with its child processes and
    temporary folders (:func:`identifiable_cl.stops.stop_signals_interrupt`)."""
    from identifiable_cl.benchmarks import run_bench
    from identifiable_cl.stops import stop_signals_interrupt

    with stop_signals_interrupt():
        run_bench(quick=args.quick, sections=args.only, device=args.device)
    return 0


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``bench`` to the ``icl`` subcommands."""
    from identifiable_cl.benchmarks import DEVICES, SECTIONS

    p = subparsers.add_parser("bench", help=VERBS["bench"])
    p.add_argument("--quick", action="store_true", help="smaller sizes, for a fast look")
    p.add_argument("--only", nargs="+", choices=SECTIONS, help="run only these sections (one or more)")
    p.add_argument("--device", choices=DEVICES,
                   help="where every section runs (default: cuda when a CUDA device is present, else cpu)")
    p.set_defaults(func=run)
    return p
