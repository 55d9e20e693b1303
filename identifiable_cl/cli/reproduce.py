"""``icl reproduce``: rerun a paper's experiments and check its claims."""

from __future__ import annotations

import argparse
import shlex

from identifiable_cl.cli import VERBS
from identifiable_cl.reproduce.experiment import EXPERIMENTS_DIR, SCALES, experiment_names, load_experiment
from identifiable_cl.reproduce.runner import DEFAULT_OUT, reproduce


def list_experiments() -> int:
    """Print every packaged experiment with its title, one a line."""
    names = experiment_names()
    if not names:
        print(f"no experiments in {EXPERIMENTS_DIR}")
        return 0
    width = max(len(n) for n in names)
    for name in names:
        try:
            title = load_experiment(name).title
        except ValueError as exc:
            title = f"(invalid: {exc})"
        print(f"{name:<{width}}  {title}")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.list:
        if args.name is not None:
            raise ValueError(f"--list takes no experiment name (got {args.name!r})")
        return list_experiments()
    if args.name is None:
        raise ValueError("the experiment NAME is required (`icl reproduce --list` shows them); experiments: "
                         f"{', '.join(experiment_names()) or 'none'}")
    words = [args.name, "--scale", args.scale, "--seeds", args.seeds, "--workers", args.workers]
    words += (["--pack", args.pack] if args.pack > 1 else []) + (["--runs", args.runs] if args.runs else [])
    words += (["--out", args.out] if args.out else []) + (["--report-only"] if args.report_only else [])
    words += ["--retune"] if args.retune else []
    command = "icl reproduce " + " ".join(shlex.quote(str(a)) for a in words)
    runs = None if args.runs is None else [label.strip() for label in args.runs.split(",") if label.strip()]
    result = reproduce(args.name, args.scale, seeds=args.seeds, workers=args.workers, pack=args.pack, runs=runs,
                       out=args.out, report_only=args.report_only, retune=args.retune, command=command)
    return 1 if any(r.failed for r in result.results.values()) else 0


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``reproduce`` to the ``icl`` subcommands."""
    p = subparsers.add_parser(
        "reproduce",
        help=VERBS["reproduce"],
        description="Run every configuration of experiments/NAME/experiment.yaml over seeds through the local "
        "sweep runner, then write OUT/results.md: mean ± std beside the reference numbers and the identity "
        "baseline, a verdict per claim, and figures. Rerunning skips finished runs. A run the experiment tunes "
        "trains its seeds with the values shipped in experiments/NAME/tuned.yaml, the ones its recorded tables used, "
        "without tuning: a bayes search does not retrace itself on another CPU, so tuning again may choose other "
        "values and give another table. Runs the file has no values for at the scale are tuned first, with the "
        "experiment's tuning budget; --retune tunes every run afresh. Tuned values on the edge of their searched "
        "range are flagged in the report.",
        epilog=f"experiments in {EXPERIMENTS_DIR}: {', '.join(experiment_names()) or 'none'}",
    )
    p.add_argument("name", nargs="?",
                   help="experiment name (a folder of experiments/) or the path of its folder; required unless --list")
    p.add_argument("--list", action="store_true", help="list the packaged experiments with their titles and exit")
    p.add_argument("--scale", choices=SCALES, default="smoke",
                   help="paper: the published settings; medium: the published settings for fewer steps, sized "
                   "for one machine (where the experiment defines it); smoke: reduced for a CPU (default); tiny: a "
                   "few steps, checks the plumbing only")
    p.add_argument("--seeds", type=int, default=1, help="seeds 0..K-1 per configuration (default: 1)")
    p.add_argument("--workers", type=int, default=1, help="runs in parallel (default: 1)")
    p.add_argument("--pack", type=int, default=1, metavar="K",
                   help="train up to K seeds of a run in one process, as `icl sweep run --pack` (default: 1)")
    p.add_argument("--runs", metavar="LABEL,...",
                   help="only these run labels of the experiment (default: all); claims about others get no data")
    p.add_argument("--out", help=f"output folder (default: {DEFAULT_OUT}/NAME-SCALE)")
    p.add_argument("--report-only", action="store_true",
                   help="start no run: write the report from the runs of OUT that have finished, listing the others")
    p.add_argument("--retune", action="store_true",
                   help="tune every tuned run afresh (an offline bayes search per run) instead of training it with "
                   "the values shipped in experiments/NAME/tuned.yaml (default: the shipped values, which reproduce "
                   "the recorded tables)")
    p.set_defaults(func=run)
    return p
