"""``icl train``: one run, a resumed run, or several seeds trained as one pack."""

from __future__ import annotations

import argparse
import re
import signal
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Mapping, Sequence

from identifiable_cl import arguments
from identifiable_cl.cli import VERBS
from identifiable_cl.config import key_listing, parse_overrides

MAX_PACK = 1024
"""The most runs one ``--pack-seeds`` process trains."""


def parse_seeds(text: str) -> list[int]:
    """``--pack-seeds``: ``0-7``, ``1,3,5`` or a mix (``0-3,8``); each seed once, at most :data:`MAX_PACK`."""
    seeds: list[int] = []
    for part in text.split(","):
        match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if not match or (match.group(2) and int(match.group(2)) < int(match.group(1))):
            raise ValueError(f"--pack-seeds={text!r} is invalid: expected seeds like 0-7, 1,3,5 or 0-3,8")
        first, last = int(match.group(1)), int(match.group(2) or match.group(1))
        if len(seeds) + last - first + 1 > MAX_PACK:
            raise ValueError(f"--pack-seeds={text!r} is invalid: more than {MAX_PACK} runs in one pack")
        seeds += range(first, last + 1)
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"--pack-seeds={text!r} is invalid: a seed is listed twice")
    return seeds


def train_pack(runs: Sequence[tuple[Mapping[str, Any], Path, str | None]]) -> list[dict[str, Any] | BaseException]:
    """Train ``(spec, run_dir, wandb_id, wandb_name)`` runs (specs from :func:`identifiable_cl.components.resolve`) as
    one pack, printing each run's table; their results.

    Everything is built and checked to fit one pack before any run directory is written.
    """
    from identifiable_cl.cli.tables import results_table
    from identifiable_cl.components import build
    from identifiable_cl.solvers.packed import check_packable
    from identifiable_cl.training import Trainer, run_packed

    built = [build(config) for config, *_ in runs]
    check_packable(built)
    trainers = []
    for (config, run_dir, wandb_id, wandb_name), components in zip(runs, built):
        trainer = Trainer.from_spec(config, run_dir, progress=False, components=components, wandb_id=wandb_id)
        trainer.wandb_name = wandb_name
        trainers.append(trainer)
        print(f"run directory: {run_dir}")
    print(trainers[0].c.process.describe())
    results = run_packed(trainers)
    for trainer, result in zip(trainers, results):
        print(f"\nseed {trainer.c.config['seed']} ({trainer.run_dir}):")
        print(f"failed: {result}" if isinstance(result, BaseException) else results_table(result))
    return results


def cmd_train_packed(args: argparse.Namespace, overrides: Mapping[str, Any]) -> int:
    """``icl train ... --pack-seeds S``: one run per seed, trained as one pack (``identifiable_cl.solvers.packed``)."""
    if args.resume or args.run_dir:
        raise ValueError("--pack-seeds starts new runs under --out; it takes neither --resume nor --run-dir")
    from identifiable_cl.components import load_config
    from identifiable_cl.rundir import new_run_dirs

    configs = [load_config(args.config, {**overrides, "seed": seed}) for seed in parse_seeds(args.pack_seeds)]
    with new_run_dirs(Path(args.out), configs) as run_dirs:
        results = train_pack([(config, run_dir, None, None) for config, run_dir in zip(configs, run_dirs)])
    return 1 if any(isinstance(r, BaseException) for r in results) else 0


def cmd_train_pack_file(args: argparse.Namespace) -> int:
    """``icl train --pack-file FILE``: the runs FILE lists, trained as one pack.

    FILE is JSON, a list of ``{"args": [...], "wandb_id": ..., "wandb_name": ..., "result": PATH}``: each
    run's ``icl train`` arguments (config, ``--key=value`` overrides, ``--run-dir``), its W&B run id and name,
    and where to write ``{"exit_code": 0 | 1, "error": ...}`` when it ends. The local sweep
    runner writes such files for ``icl sweep run --pack K``.
    """
    import json

    from identifiable_cl.components import load_config
    from identifiable_cl.rundir import write_json

    try:
        entries = json.loads(Path(args.pack_file).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"--pack-file {args.pack_file!r}: cannot be read as JSON ({exc})") from exc
    if not isinstance(entries, list) or not entries or not all(
            isinstance(e, dict) and isinstance(e.get("args"), list) and isinstance(e.get("result"), str) for e in entries):
        raise ValueError(f"--pack-file {args.pack_file!r}: expected a non-empty JSON list of runs "
                         '{"args": [...], "result": PATH, "wandb_id": ..., "wandb_name": ...}')
    runs = []
    for entry in entries:
        options, overrides = arguments.split(entry["args"])
        one = parser().parse_args(options)
        if one.run_dir is None:
            raise ValueError(f"--pack-file {args.pack_file!r}: every run needs --run-dir; got {entry['args']}")
        runs.append((load_config(one.config, parse_overrides(overrides)), Path(one.run_dir), entry.get("wandb_id"),
                     entry.get("wandb_name")))
    results = train_pack(runs)
    for entry, result in zip(entries, results):
        failed = isinstance(result, BaseException)
        write_json(Path(entry["result"]), {"exit_code": 1 if failed else 0, "error": str(result) if failed else None})
    return 1 if any(isinstance(r, BaseException) for r in results) else 0


def _stop(signum: int, frame: Any) -> None:
    """A stop signal while the runs take their steps stops training at the next step boundary, with a checkpoint
    of that step (:data:`identifiable_cl.stops.STOP`); a second one, or one before the steps began (start-up,
    checks, building the process, the identity baseline), at once, keeping what was already written
    (:data:`identifiable_cl.stops.LOOPING`)."""
    from identifiable_cl.stops import LOOPING, STOP

    if STOP.is_set() or not LOOPING.is_set():
        raise KeyboardInterrupt
    STOP.set()


@contextmanager
def stoppable():
    """While training, :data:`identifiable_cl.stops.STOP_SIGNALS` stop the runs (:func:`_stop`), which end
    interrupted (their checkpoint kept, exit 130, resumed by a rerun of their sweep). Installed explicitly because a
    process may start with SIGINT ignored (background jobs of a non-interactive shell do, and their
    children inherit it); the previous handlers come back afterwards. Off the main thread, where
    handlers cannot be set, nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    from identifiable_cl.stops import STOP, STOP_SIGNALS

    STOP.clear()
    previous = {sig: signal.signal(sig, _stop) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        STOP.clear()


def finished(spec: Any) -> bool:
    """Whether ``spec`` resumes a run that has already reached its ``train.steps`` and written its summary, no other
    process writing it (one that does is a ValueError naming its pid, :func:`identifiable_cl.rundir.owned`)."""
    from identifiable_cl import rundir

    if spec.mode != "resume" or spec.state is None or int(spec.state["step"]) < spec["train"]["steps"]:
        return False
    with rundir.owned(spec.run_dir):
        return (spec.run_dir / rundir.SUMMARY).is_file()


def run(args: argparse.Namespace) -> int:
    from identifiable_cl.cli.tables import results_table
    from identifiable_cl.components import resolve
    from identifiable_cl.devices import use_threads
    from identifiable_cl.rundir import new_run_dirs
    from identifiable_cl.training import Interrupted, Trainer

    use_threads()
    with stoppable():
        overrides = parse_overrides(args.overrides)
        if args.pack_file is not None:
            if overrides or args.config or args.pack_seeds or args.resume or args.run_dir:
                raise ValueError("--pack-file lists every run's arguments; give nothing else")
            return cmd_train_pack_file(args)
        if args.pack_seeds is not None:
            return cmd_train_packed(args, overrides)
        progress = False if args.quiet else None
        if args.resume and args.config:
            raise ValueError("--resume takes the config saved in the run directory; do not pass CONFIG too")
        spec = resolve(args.resume or args.config, overrides, "resume" if args.resume else "new")
        if finished(spec):
            steps = spec["train"]["steps"]
            print(f"{args.resume}: finished, at step {steps} of train.steps={steps}; nothing to do, nothing changed "
                  f"(train it further with icl train --resume {args.resume} --train.steps=N, N > {steps}; measure it "
                  f"again with icl evaluate {args.resume})")
            return 0
        if spec.mode == "resume" or args.run_dir:
            trainer = Trainer.from_spec(spec, args.run_dir and Path(args.run_dir), progress)
        else:
            with new_run_dirs(Path(args.out), [spec]) as (run_dir,):
                trainer = Trainer.from_spec(spec, run_dir, progress)
        try:
            if not args.resume:
                print(f"run directory: {trainer.run_dir}")
                print(trainer.c.process.describe())
            summary = trainer.run()
        except KeyboardInterrupt:  # a stop signal before the run loop took over (it reports its own)
            trainer.close(None)
            raise Interrupted(trainer.interrupted_message()) from None
        print(results_table(summary))
        return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", nargs="?", help="YAML config or packaged preset (default: the built-in default experiment)")
    for name, keywords in arguments.TRAIN_OPTIONS.items():
        p.add_argument(name, **keywords)


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``train`` to the ``icl`` subcommands."""
    p = subparsers.add_parser(
        "train",
        help=VERBS["train"],
        description="Train one run. Any config key can be overridden as --dotted.key=value "
        "(e.g. --loss.tau=0.1 --dgp.conditional.kappa=5; key=value, +key=value and ++key=value also work).",
        epilog="config keys (default, allowed values, meaning):\n" + key_listing(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(p)
    p.set_defaults(func=run)
    return p


def parser() -> argparse.ArgumentParser:
    """``icl train``'s own parser (for the runs a pack file lists)."""
    p = argparse.ArgumentParser(prog="icl train")
    add_arguments(p)
    return p


