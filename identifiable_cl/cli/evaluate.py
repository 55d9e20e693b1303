"""``icl evaluate``: re-evaluate a saved run from its own files (saved process, last checkpoint), optionally
with other ``eval.*`` settings (``--eval.final_n_fit=4096``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from identifiable_cl.cli import VERBS
from identifiable_cl.cli.tables import results_table


def run(args: argparse.Namespace) -> int:
    from identifiable_cl import rundir
    from identifiable_cl.config import parse_overrides
    from identifiable_cl.training import evaluate_run

    run_dir = Path(args.run_dir)
    summary = evaluate_run(run_dir, parse_overrides(args.overrides), write=False)
    print(results_table(summary))  # before writing: a folder that refuses the file still shows the measurement
    with rundir.owned(run_dir):
        rundir.write_json(run_dir / rundir.EVALUATION, summary)
    print(f"written to {run_dir / rundir.EVALUATION}")
    return 0


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``evaluate`` to the ``icl`` subcommands."""
    p = subparsers.add_parser(
        "evaluate",
        help=VERBS["evaluate"],
        description="Final-size held-out metrics of the run's last checkpoint beside the identity baseline, "
        "printed, then written to RUN_DIR/evaluation.json. The eval.* keys can be overridden as "
        "--eval.key=value (e.g. --eval.final_n_fit=4096 --eval.nonlinear=False); the run's files are only read.",
    )
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.set_defaults(func=run)
    return p
