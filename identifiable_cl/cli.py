"""The ``icl`` command line."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import re
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import identifiable_cl

OVERRIDE = re.compile(r"--?[A-Za-z_][\w.\-]*=.*", flags=re.S)

TABLE_ROWS = [
    ("linear R²", "r2_linear"),
    ("nonlinear R²", "r2_nonlinear"),
    ("MCC (Pearson)", "mcc_pearson"),
    ("MCC (Spearman)", "mcc_spearman"),
    ("block-aware MCC", "mcc_block_aware"),
]


def results_table(summary: Mapping[str, Any]) -> str:
    """A short plain-text table: each metric for the trained encoder beside the identity baseline."""
    rows = list(TABLE_ROWS)
    rows += [(f"linear R² [{k[len('r2_linear_'):]}]", k) for k in summary if k.startswith("r2_linear_") and not k.endswith("per_dim")]
    lines = [f"{'metric':<24}{'encoder':>10}{'identity g(z)':>16}"]
    for label, key in rows:
        if key in summary and isinstance(summary[key], (int, float)):
            base = summary.get(f"identity_{key}")
            lines.append(f"{label:<24}{summary[key]:>10.3f}{base:>16.3f}" if isinstance(base, (int, float)) else f"{label:<24}{summary[key]:>10.3f}{'':>16}")
    if "lambda_learned" in summary:
        lines.append("learned Λ̂: " + ", ".join(f"{v:.2f}" for v in summary["lambda_learned"]))
    if "lambda_true" in summary:
        lines.append("true Λ:    " + ", ".join(f"{v:.2f}" for v in summary["lambda_true"]))
    if "steps" in summary:
        lines.append(f"{summary['steps']} steps in {summary['wall_s']:.1f} s ({summary['steps_per_s']:.1f} steps/s)")
    return "\n".join(lines)


def default_run_dir(out: Path, config: Mapping[str, Any]) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    name = f"{stamp}-{config['loss']['name']}-{config['dgp']['conditional']['name']}-s{config['seed']}"
    path, i = out / name, 1
    while path.exists():
        path, i = out / f"{name}-{i}", i + 1
    return path


def parse_seeds(text: str) -> list[int]:
    """``--pack-seeds``: ``0-7``, ``1,3,5`` or a mix (``0-3,8``); each seed once."""
    seeds: list[int] = []
    for part in text.split(","):
        match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if not match or (match.group(2) and int(match.group(2)) < int(match.group(1))):
            raise ValueError(f"--pack-seeds={text!r} is invalid: expected seeds like 0-7, 1,3,5 or 0-3,8")
        first = int(match.group(1))
        seeds += range(first, int(match.group(2) or first) + 1)
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"--pack-seeds={text!r} is invalid: a seed is listed twice")
    return seeds


def train_pack(runs: Sequence[tuple[Mapping[str, Any], Path, str | None]]) -> list[dict[str, Any] | BaseException]:
    """Train ``(config, run_dir, wandb_id)`` runs as one pack, printing each run's table; their results.

    Everything is built and checked to fit one pack before any run directory is written.
    """
    from identifiable_cl.packing import check_packable, run_packed
    from identifiable_cl.training import Trainer, build

    built = [build(config) for config, _, _ in runs]
    check_packable(built)
    trainers = []
    for (config, run_dir, wandb_id), components in zip(runs, built):
        trainer = Trainer.create(config, run_dir, progress=False, components=components)
        trainer.wandb_id = wandb_id
        trainers.append(trainer)
        print(f"run directory: {run_dir}")
    print(trainers[0].c.process.describe())
    results = run_packed(trainers)
    for trainer, result in zip(trainers, results):
        print(f"\nseed {trainer.c.config['seed']} ({trainer.run_dir}):")
        print(f"failed: {result}" if isinstance(result, BaseException) else results_table(result))
    return results


def cmd_train_packed(args: argparse.Namespace, overrides: Mapping[str, Any]) -> int:
    """``icl train ... --pack-seeds S``: one run per seed, trained as one pack (``identifiable_cl.packing``)."""
    from identifiable_cl.config import load_config

    if args.resume or args.run_dir:
        raise ValueError("--pack-seeds starts new runs under --out; it takes neither --resume nor --run-dir")
    configs = [load_config(args.config, {**overrides, "seed": seed}) for seed in parse_seeds(args.pack_seeds)]
    results = train_pack([(config, default_run_dir(Path(args.out), config), None) for config in configs])
    return 1 if any(isinstance(r, BaseException) for r in results) else 0


def cmd_train_pack_file(args: argparse.Namespace) -> int:
    """``icl train --pack-file FILE``: the runs FILE lists, trained as one pack.

    FILE is JSON, a list of ``{"args": [...], "wandb_id": ..., "result": PATH}``: each run's
    ``icl train`` arguments (config, ``--key=value`` overrides, ``--run-dir``), its W&B run id,
    and where to write ``{"exit_code": 0 | 1, "error": ...}`` when it ends. The local sweep
    runner writes such files for ``icl sweep run --pack K``.
    """
    import json

    from identifiable_cl.config import load_config, parse_overrides
    from identifiable_cl.rundir import write_json

    try:
        entries = json.loads(Path(args.pack_file).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"--pack-file {args.pack_file!r}: cannot be read as JSON ({exc})") from exc
    runs = []
    for entry in entries:
        options, overrides = split_overrides(entry["args"])
        one = build_parser().parse_args(["train", *options])
        if one.run_dir is None:
            raise ValueError(f"--pack-file {args.pack_file!r}: every run needs --run-dir; got {entry['args']}")
        runs.append((load_config(one.config, parse_overrides(overrides)), Path(one.run_dir), entry.get("wandb_id")))
    results = train_pack(runs)
    for entry, result in zip(entries, results):
        failed = isinstance(result, BaseException)
        write_json(Path(entry["result"]), {"exit_code": 1 if failed else 0, "error": str(result) if failed else None})
    return 1 if any(isinstance(r, BaseException) for r in results) else 0


def cmd_train(args: argparse.Namespace) -> int:
    from identifiable_cl.config import load_config, parse_overrides
    from identifiable_cl.training import Trainer

    overrides = parse_overrides(args.overrides)
    if args.pack_file is not None:
        if overrides or args.config or args.pack_seeds or args.resume or args.run_dir:
            raise ValueError("--pack-file lists every run's arguments; give nothing else")
        return cmd_train_pack_file(args)
    if args.pack_seeds is not None:
        return cmd_train_packed(args, overrides)
    if args.resume:
        if args.config:
            raise ValueError("--resume takes the config saved in the run directory; do not pass CONFIG too")
        trainer = Trainer.resume(Path(args.resume), overrides, progress=None if not args.quiet else False)
    else:
        config = load_config(args.config, overrides)
        run_dir = Path(args.run_dir) if args.run_dir else default_run_dir(Path(args.out), config)
        trainer = Trainer.create(config, run_dir, progress=None if not args.quiet else False)
        print(f"run directory: {run_dir}")
        print(trainer.c.process.describe())
    summary = trainer.run()
    print(results_table(summary))
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from identifiable_cl.evaluate_run import evaluate_run

    summary = evaluate_run(Path(args.run_dir))
    print(results_table(summary))
    return 0


def cmd_plugins(args: argparse.Namespace) -> int:
    import identifiable_cl.components  # noqa: F401  (fills every registry)
    from dgp.registry import REGISTRIES

    for kind in sorted(REGISTRIES):
        print(f"{kind}:")
        for entry in REGISTRIES[kind]:
            print(f"  {entry.name:<20} {entry.origin}")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from identifiable_cl.bench import run_bench

    run_bench(quick=args.quick, sections=args.only)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="icl", description="Identifiability testbed for contrastive learning.")
    parser.add_argument("--version", action="version", version=f"identifiable-cl {identifiable_cl.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser(
        "train",
        help="train an encoder and measure latent recovery",
        description="Train one run. Any config key can be overridden as --dotted.key=value "
        "(e.g. --loss.tau=0.1 --dgp.conditional.kappa=5); see identifiable_cl/config.py.",
    )
    p.add_argument("config", nargs="?", help="YAML config (default: the built-in default experiment)")
    p.add_argument("--out", default="runs", help="parent folder of the new run directory (default: runs)")
    p.add_argument("--run-dir", help="exact run directory to create")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue a saved run from its last checkpoint")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--pack-seeds", metavar="SEEDS",
                   help="train one run per seed (e.g. 0-7, or 1,3,5) in one process, as one batched computation")
    p.add_argument("--pack-file", metavar="FILE", help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("evaluate", help="re-evaluate a saved run from its saved DGP and checkpoint")
    p.add_argument("run_dir")
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("plugins", help="list every registered component by kind and name, with its origin")
    p.set_defaults(func=cmd_plugins)

    from identifiable_cl.bench import SECTIONS

    p = sub.add_parser("bench", help="print sampling, evaluation, loss, training and precision figures")
    p.add_argument("--quick", action="store_true", help="smaller sizes, for a fast look")
    p.add_argument("--only", nargs="*", choices=SECTIONS, help="run only these sections")
    p.set_defaults(func=cmd_bench)

    for module, adder in (
        ("identifiable_cl.sweeps.cli", "add_sweep_parser"),
        ("identifiable_cl.results", "add_results_parser"),
        ("identifiable_cl.plots", "add_plot_parser"),
        ("identifiable_cl.reproduce", "add_reproduce_parser"),
    ):
        if importlib.util.find_spec(module) is not None:
            getattr(importlib.import_module(module), adder)(sub)
    return parser


TRAIN_OPTIONS = {"--out", "--run-dir", "--resume", "--quiet", "--pack-seeds", "--pack-file"}


def split_overrides(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Separate ``--dotted.key=value`` config overrides from the options argparse handles.

    Done before argparse, which would take a value with a space (``--k=[1, 2]``,
    as a sweep agent renders lists) for a positional argument.
    """
    options, overrides = [], []
    for arg in argv:
        if OVERRIDE.fullmatch(arg) and arg.split("=", 1)[0] not in TRAIN_OPTIONS:
            overrides.append(arg)
        else:
            options.append(arg)
    return options, overrides


def main(argv: Sequence[str] | None = None) -> int:
    from identifiable_cl.training import NonFiniteLoss

    argv = list(sys.argv[1:] if argv is None else argv)
    overrides: list[str] = []
    if argv[:1] == ["train"]:
        argv, overrides = split_overrides(argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    args.overrides = overrides
    try:
        return args.func(args)
    except ValueError as exc:
        print(f"icl {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except NonFiniteLoss as exc:
        print(f"icl {args.command}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
