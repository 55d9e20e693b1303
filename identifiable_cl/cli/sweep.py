"""``icl sweep run|submit|check|list|copy``: sweep files on this machine, on a cluster, just checked, or the
packaged ones listed and copied.

Wherever a sweep file is expected, the name of a packaged sweep file (``sweeps/NAME.yaml`` of the source
tree, installed with the package) is accepted too when no file of that name exists.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shutil
import sys
from pathlib import Path
from typing import Iterator

import yaml

from identifiable_cl.cli import VERBS
from identifiable_cl.packaged import SWEEPS_DIR
from identifiable_cl.sweeps.spec import load_sweep

DEFAULT_OUT = "runs/sweeps"
SUFFIX = ".yaml"


def sweep_names() -> list[str]:
    """The packaged sweep files, by name (the file name without ``.yaml``)."""
    return sorted(p.stem for p in SWEEPS_DIR.glob(f"*{SUFFIX}"))


def packaged_sweep(name: str, missing: str | None = None) -> Path:
    """The packaged sweep file ``name`` (with or without ``.yaml``); ValueError listing the names if there is none
    (``missing``: what it says first)."""
    stem = name.removesuffix(SUFFIX)
    if stem not in sweep_names():
        raise ValueError(f"{missing or f'no packaged sweep {name!r}'}; packaged sweeps: "
                         f"{', '.join(sweep_names()) or 'none'}")
    return SWEEPS_DIR / f"{stem}{SUFFIX}"


def sweep_file(arg: str) -> Path:
    """The sweep file an argument names: an existing file, else a packaged sweep of that name."""
    path = Path(arg)
    if path.is_file():
        return path
    return packaged_sweep(arg, f"sweep file {arg!r} does not exist and is not a packaged sweep")


def _summary(path: Path) -> str:
    """One line about a sweep file: its method and description (or its first comment line)."""
    from identifiable_cl.yamlfiles import load_yaml

    try:
        raw = load_yaml(path.read_text())
    except yaml.YAMLError:
        return "(not valid YAML)"
    raw = raw if isinstance(raw, dict) else {}
    text = raw.get("description")
    if not isinstance(text, str) or not text.strip():
        comments = [line.lstrip("#").strip() for line in path.read_text().splitlines() if line.startswith("#")]
        text = next((c for c in comments if c), "")
    return f"{raw.get('method', '?')!s:<8} {' '.join(str(text).split())}".rstrip()


def cmd_list(args: argparse.Namespace) -> int:
    names = sweep_names()
    if not names:
        print(f"no sweep files in {SWEEPS_DIR}")
    width = max(map(len, names), default=0)
    for name in names:
        print(f"{name:<{width}}  {_summary(SWEEPS_DIR / f'{name}{SUFFIX}')}")
    return 0


def cmd_copy(args: argparse.Namespace) -> int:
    source = packaged_sweep(args.name)
    dest = Path(args.dest)
    if dest.is_dir() or dest.suffix not in (".yaml", ".yml"):
        dest = dest / source.name
    if dest.exists():
        raise ValueError(f"{dest} already exists; not overwritten (remove it or give another DEST)")
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, dest)
    print(f"copied sweep {source.stem} to {dest}")
    return 0


def _devices(text: str | None) -> list[str] | None:
    if text is None:
        return None
    devices = [d.strip() for d in text.split(",") if d.strip()]
    for device in devices:
        if not re.fullmatch(r"\d+|(GPU|MIG)-[0-9A-Za-z/-]+", device):
            raise ValueError(f"--devices {text!r}: {device!r} is not a GPU; give indices such as 0,1,2 or GPU UUIDs "
                             "(GPU-..., MIG-...), as CUDA_VISIBLE_DEVICES takes them")
    if not devices:
        raise ValueError(f"--devices {text!r}: give a comma-separated list such as 0,1,2")
    return devices


def cmd_run(args: argparse.Namespace) -> int:
    from identifiable_cl.sweeps.plan import plan_runs, rendered_train_arguments
    from identifiable_cl.sweeps.search import CHECKED_POINTS, check_space, run_search, run_sweep

    spec = load_sweep(sweep_file(args.file))
    if spec.method == "bayes":
        if args.pack > 1:
            raise ValueError("--pack: a bayes search proposes its runs one at a time; run it without --pack")
        if args.dry_run:
            check_space(spec)
            print(f"{spec.source}: a bayes search proposes each run from the finished ones, so there is no plan to "
                  f"print; {CHECKED_POINTS} random points of its space were checked")
            return 0
        outcomes = run_search(spec, args.out, workers=args.workers, count=args.count, seed=args.seed,
                              devices=_devices(args.devices))
    elif args.dry_run:
        for run in plan_runs(spec, args.out, count=args.count, seed=args.seed):
            print(f"{run.run_id}  {' '.join(rendered_train_arguments(spec, run.params)[1])}")
        return 0
    else:
        outcomes = run_sweep(spec, args.out, workers=args.workers, count=args.count, seed=args.seed,
                             devices=_devices(args.devices), pack=args.pack)
    return 1 if any(o.state == "failed" for o in outcomes) else 0


@contextlib.contextmanager
def refused_submission(folder: Path, cluster: str) -> Iterator[None]:
    """A cluster that refuses the jobs (``sbatch`` exits with an error: no controller answers, an unknown
    partition ...) ends as one line with its first line of error, and the folders this submission made for
    ``folder`` (the sweep's submitit folder and any parent it created) are removed again."""
    from submitit.core.utils import FailedJobError

    made = [p for p in (folder, *folder.parents) if not p.exists()]
    said = io.StringIO()  # submitit prints a refusing sbatch's error before raising it: it is in the one line
    try:
        with contextlib.redirect_stderr(said):
            yield
        sys.stderr.write(said.getvalue())
    except FailedJobError as exc:
        if made:  # the outermost folder this submission created, with what it holds
            shutil.rmtree(made[-1], ignore_errors=True)
        first = next((line.strip() for line in str(exc).splitlines() if line.strip()), "no detail")
        raise ValueError(f"--cluster {cluster}: the cluster refused the jobs ({first}); nothing was submitted: check "
                         "that it answers (sinfo) and submit again") from None


def cmd_submit(args: argparse.Namespace) -> int:
    from identifiable_cl.sweeps.submit import make_executor, submit_offline, submit_online

    spec = load_sweep(sweep_file(args.file), local=args.sweep_id is None)
    if args.sweep_id is not None and args.count is None:
        raise ValueError("--count: required with --sweep-id (the number of agent jobs, one run each)")
    folder = Path(args.out) / spec.name / "submitit"
    executor = make_executor(folder, args.cluster, name=f"icl-{spec.name}", parallelism=args.parallelism,
                             gpus_per_node=args.gpus_per_node, cpus_per_task=args.cpus_per_task, mem_gb=args.mem_gb,
                             timeout_min=args.timeout_min, partition=args.partition)
    with refused_submission(folder, args.cluster):
        if args.sweep_id is not None:
            jobs = submit_online(args.sweep_id, executor, count=args.count)
        else:
            _, jobs = submit_offline(spec, args.out, executor, count=args.count, seed=args.seed)
    if args.sweep_id is not None:
        print(f"submitted {len(jobs)} W&B agent jobs for sweep {args.sweep_id} ({args.cluster}); logs in {folder}")
    else:
        print(f"submitted {len(jobs)} runs of sweep {spec.name} ({args.cluster}); results in {Path(args.out) / spec.name}")
    if args.cluster == "debug" or args.wait:
        codes = [job.result() for job in jobs]
        failed = [c for c in codes if c != 0]
        print(f"{len(codes) - len(failed)} finished, {len(failed)} failed")
        return 1 if failed else 0
    for job in jobs:
        print(job.job_id)
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from identifiable_cl.sweeps.plan import plan_runs
    from identifiable_cl.sweeps.spec import local_problems

    bad = 0
    for file in args.files:
        try:
            spec = load_sweep(sweep_file(file), local=False)
            if local_problems(spec):
                print(f"{file}: ok for a W&B server (method {spec.method}); `icl sweep run` cannot run it")
                continue
            if spec.method == "bayes" or "early_terminate" in spec.raw:
                from identifiable_cl.sweeps.engine import engine

                try:
                    engine()  # icl sweep run would ask for it
                except ValueError as exc:
                    raise ValueError(f"{file}: {exc}") from None
            if spec.method == "bayes":
                from identifiable_cl.sweeps.search import CHECKED_POINTS, check_space

                check_space(spec)
                print(f"{file}: ok, method bayes, {CHECKED_POINTS} random points of its space checked")
                continue
            runs = plan_runs(spec, args.out, count=args.count, seed=args.seed)
        except ValueError as exc:
            print(exc, file=sys.stderr)
            bad += 1
            continue
        print(f"{file}: ok, method {spec.method}, {len(runs)} runs")
    return 1 if bad else 0


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``sweep`` with ``run``, ``submit``, ``check``, ``list`` and ``copy`` to the ``icl`` subcommands."""
    parser = subparsers.add_parser(
        "sweep",
        help=VERBS["sweep"],
        description="Sweep files are plain W&B sweep YAML (sweeps/*.yaml). Online: `wandb sweep FILE` then "
        "`wandb agent SWEEP_ID`. Offline, without a W&B server: `icl sweep run FILE`. FILE may also be the name "
        "of a packaged sweep file (`icl sweep list`); `icl sweep copy NAME` copies one to edit.",
    )
    sub = parser.add_subparsers(dest="sweep_command", metavar="SUBCOMMAND", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--out", default=DEFAULT_OUT, help=f"parent folder of the sweep's folder (default: {DEFAULT_OUT})")
        p.add_argument("--count", type=int, help="run at most N runs (needed for random sweeps without run_cap)")
        p.add_argument("--seed", type=int, default=0, help="seed of a random sweep's draws (default: 0)")

    p = sub.add_parser(
        "run",
        help="run a grid or random sweep here, logged offline; rerunning skips finished runs",
        description="Expand a grid/random sweep with W&B's semantics and run each `icl train` in a subprocess "
        "with the environment a W&B agent gives it, logging offline. Each run gets OUT/<sweep>/<run id>/.",
    )
    p.add_argument("file", help="sweep YAML file, or the name of a packaged sweep file")
    common(p)
    p.add_argument("--workers", type=int, default=1, help="runs in parallel (default: 1)")
    p.add_argument("--devices", help="comma-separated GPU ids, assigned round-robin to the workers (CUDA_VISIBLE_DEVICES)")
    p.add_argument("--pack", type=int, default=1, metavar="K",
                   help="train up to K runs of the same tensor shapes in one process (default 1: on a CPU a pack steps "
                        "its runs in turn and shares only start-up; on a GPU "
                        "it batches them into one computation that fills the device)")
    p.add_argument("--dry-run", action="store_true", help="print the planned runs and their arguments; run nothing")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser(
        "submit",
        help="submit one job per run through submitit (slurm extra)",
        description="Offline: one array task per expanded run. Online (--sweep-id): --count tasks, each running "
        "`wandb agent --count 1 SWEEP_ID`.",
    )
    p.add_argument("file", help="sweep YAML file, or the name of a packaged sweep file")
    p.add_argument("--cluster", required=True, choices=["slurm", "local", "debug"])
    common(p)
    p.add_argument("--sweep-id", help="an online W&B sweep (entity/project/id): run W&B agents instead")
    p.add_argument("--parallelism", type=int, help="at most N array tasks at once (slurm)")
    p.add_argument("--gpus-per-node", type=int, help="GPUs per job")
    p.add_argument("--cpus-per-task", type=int, help="CPUs per job")
    p.add_argument("--mem-gb", type=float, help="memory per job in GB")
    p.add_argument("--timeout-min", type=int, default=24 * 60, help="time limit per job in minutes (default: 1440)")
    p.add_argument("--partition", help="slurm partition")
    p.add_argument("--wait", action="store_true", help="wait for every job and report (always for --cluster debug)")
    p.set_defaults(func=cmd_submit)

    p = sub.add_parser(
        "check",
        help="check sweep files without running them: W&B's schema, config keys, and every planned run's config",
    )
    p.add_argument("files", nargs="+", help="sweep YAML files, or names of packaged sweep files")
    common(p)
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("list", help="list the packaged sweep files: name, method and description")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser(
        "copy",
        help="copy a packaged sweep file to edit it",
        description="Copy the packaged sweep file NAME.yaml to DEST: a folder (default: the current one) or a "
        ".yaml file path. An existing file is never overwritten.",
    )
    p.add_argument("name", help="a packaged sweep file (see `icl sweep list`)")
    p.add_argument("dest", nargs="?", default=".", help="target folder or .yaml file (default: the current folder)")
    p.set_defaults(func=cmd_copy)
    return parser
