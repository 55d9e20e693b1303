"""``icl results``: mean ± std over seeds of finished runs, grouped by the swept parameters."""

from __future__ import annotations

import argparse

from identifiable_cl.aggregate import DEFAULT_METRICS, FORMATS, grouped, refuse_unknown_metrics, table
from identifiable_cl.cli import VERBS


def _keys(option: str, text: str | None) -> list[str] | None:
    keys = None if text is None else [k.strip() for k in text.split(",") if k.strip()]
    if keys == []:
        raise ValueError(f"{option} {text!r}: name at least one key (comma-separated), or leave the option out")
    return keys


def run(args: argparse.Namespace) -> int:
    if args.consistency:
        from identifiable_cl.aggregate import find_runs
        from identifiable_cl.consistency import consistency_table

        ignored = [option for option, value in (("--group-by", args.group_by), ("--metrics", args.metrics),
                                                ("--format", args.format)) if value is not None]
        if ignored:
            raise ValueError(f"--consistency prints its own table and takes no {', '.join(ignored)}; give them "
                             "without --consistency")
        print(consistency_table(find_runs(args.dirs)))
        return 0
    group_by, metrics, fmt = _keys("--group-by", args.group_by), _keys("--metrics", args.metrics), args.format or "md"
    runs, keys, groups = grouped(args.dirs, group_by)
    refuse_unknown_metrics(metrics, runs)
    print(table(runs, keys, groups, metrics=metrics, fmt=fmt))
    if fmt == "md" and metrics is None:
        from identifiable_cl.cli.tables import subset_group_tables

        subsets = subset_group_tables(groups)
        if subsets:
            print(subsets)
    return 0


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``results`` to the ``icl`` subcommands."""
    p = subparsers.add_parser(
        "results",
        help=VERBS["results"],
        description="Read sweep run folders and run directories under DIR..., group them by the swept "
        "parameters except the seed, and print mean ± std, the number of seeds and failed runs per group; runs "
        "whose views contrast subsets (dgp.views.contrast) add, in md without --metrics, a table per group of every "
        "subset's blocks from every view of it.",
    )
    p.add_argument("dirs", nargs="+", metavar="DIR", help="sweep output folders, run folders or run directories")
    p.add_argument("--group-by", metavar="KEYS", help="comma-separated config keys (default: the swept keys except seed)")
    p.add_argument("--metrics", metavar="KEYS", help=f"comma-separated summary keys (default: {','.join(DEFAULT_METRICS)})")
    p.add_argument("--format", choices=FORMATS, help="md (default), csv, json or latex (a booktabs tabular)")
    p.add_argument("--consistency", action="store_true",
                   help="instead: CEBRA's consistency score between every two finished runs of one process (same "
                   "dgp.seed), R² of one run's embedding from the other's on the same held-out x, beside linear R²")
    p.set_defaults(func=run)
    return p
