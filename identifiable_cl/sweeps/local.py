"""Running a sweep on this machine, without a W&B server.

Each run is a subprocess started as a W&B agent starts it: the rendered
command, with ``WANDB_RUN_ID`` and ``WANDB_SWEEP_PARAM_PATH`` (a W&B config
file ``{key: {value: v}}`` that ``wandb.init`` merges over the run's config)
set, ``WANDB_MODE=offline`` (unless W&B is disabled) and ``WANDB_DIR`` pointing
at the run's folder. ``WANDB_SWEEP_ID`` is left unset: no W&B server knows a
sweep made here, and ``wandb sync`` refuses runs that name an unknown sweep
(wandb/wandb#8115); the runs are grouped by the sweep's name instead
(``WANDB_RUN_GROUP``, unless already set), and the sweep's ``project`` and
``entity`` become ``WANDB_PROJECT`` / ``WANDB_ENTITY`` when not set.
``--run-dir <folder>/run`` is appended so ``icl train`` writes its run
directory there. The folder ``OUT/<sweep name>/<run id>/`` holds::

    params.yaml   the run's parameters (W&B's config-file format)
    stdout.log    everything the run printed
    status.json   state (running, finished, failed), exit_code, command, device, times
    run/          the run directory of ``icl train``

A run whose ``status.json`` records exit code 0 is finished and skipped when the
sweep is run again; any other run is started afresh. A failing run is recorded
and the others go on. With ``devices``, worker slot i runs its jobs with
``CUDA_VISIBLE_DEVICES=devices[i % len(devices)]``.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import yaml

from identifiable_cl.rundir import write_json
from identifiable_cl.sweeps.plan import PlannedRun, plan_runs
from identifiable_cl.sweeps.render import describe, render_command
from identifiable_cl.sweeps.spec import SweepSpec

PARAMS, LOG, STATUS, RUN, ARGS_JSON, SWEEP = "params.yaml", "stdout.log", "status.json", "run", "params.json", "sweep.yaml"


@dataclass(frozen=True)
class Outcome:
    """What happened to one planned run: ``finished``, ``failed`` or ``skipped`` (finished before)."""

    run: PlannedRun
    state: str
    exit_code: int
    wall_s: float


def read_status(folder: Path) -> dict[str, Any] | None:
    path = Path(folder) / STATUS
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def is_finished(folder: Path) -> bool:
    status = read_status(folder)
    return status is not None and status.get("exit_code") == 0


def write_params(path: Path, params: Mapping[str, Any]) -> None:
    """The parameters as the config file a W&B agent writes for ``WANDB_SWEEP_PARAM_PATH``."""
    body = yaml.safe_dump({k: {"value": v} for k, v in params.items()}, sort_keys=False, allow_unicode=True)
    path.write_text("wandb_version: 1\n\n" + body)


def read_params(path: Path) -> dict[str, Any]:
    """The ``{key: value}`` pairs of a W&B config file."""
    data = yaml.safe_load(Path(path).read_text()) or {}
    return {k: v["value"] for k, v in data.items() if k != "wandb_version"}


def run_environment(
    spec: SweepSpec, run: PlannedRun, device: str | None, base: Mapping[str, str], workers: int = 1
) -> dict[str, str]:
    """The environment a W&B agent would give this run (without a sweep id), logging offline into its folder.

    With several workers and no ``OMP_NUM_THREADS`` of the user's, each run gets
    ``cores // workers`` threads: parallel runs that each spin up every core's
    worth of threads slow each other down many times over.
    """
    folder = run.folder.resolve()
    env = {k: v for k, v in base.items() if k != "WANDB_SWEEP_ID"}
    env.update(
        WANDB_RUN_ID=run.run_id,
        WANDB_SWEEP_PARAM_PATH=str(folder / PARAMS),
        WANDB_DIR=str(folder),
        WANDB_MODE="disabled" if base.get("WANDB_MODE") == "disabled" else "offline",
    )
    env.setdefault("WANDB_RUN_GROUP", spec.name)
    for key, variable in (("project", "WANDB_PROJECT"), ("entity", "WANDB_ENTITY")):
        if spec.raw.get(key):
            env.setdefault(variable, spec.raw[key])
    if device is not None:
        env["CUDA_VISIBLE_DEVICES"] = device
    if workers > 1:
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // workers)))
    return env


def execute(spec: SweepSpec, run: PlannedRun, device: str | None = None, workers: int = 1) -> Outcome:
    """Start one planned run in a fresh folder, wait for it and record its status."""
    folder = run.folder
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    write_params(folder / PARAMS, run.params)
    env = run_environment(spec, run, device, os.environ, workers)
    json_file = None
    if "${args_json_file}" in [str(c) for c in spec.command]:
        json_file = folder.resolve() / ARGS_JSON
        json_file.write_text(json.dumps(run.params))
    argv = render_command(spec.command, run.params, program=spec.program, args_json_file=json_file and str(json_file), environ=env)
    argv += ["--run-dir", str(folder.resolve() / RUN)]
    status: dict[str, Any] = {
        "run_id": run.run_id,
        "sweep": spec.name,
        "sweep_content_id": spec.content_id,
        "index": run.index,
        "state": "running",
        "exit_code": None,
        "command": argv,
        "device": device,
        "log": LOG,
        "run_dir": RUN,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    write_json(folder / STATUS, status)
    started = time.perf_counter()
    with open(folder / LOG, "w") as log:
        try:
            code = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, env=env, stdin=subprocess.DEVNULL).returncode
        except OSError as exc:
            log.write(f"could not start {argv[0]!r}: {exc}\n")
            code = 127
    wall = time.perf_counter() - started
    state = "finished" if code == 0 else "failed"
    status.update(state=state, exit_code=code, wall_s=round(wall, 3), ended=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    write_json(folder / STATUS, status)
    return Outcome(run, state, code, wall)


def write_sweep_file(spec: SweepSpec, out: Path) -> None:
    folder = Path(out) / spec.name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / SWEEP).write_text(yaml.safe_dump(dict(spec.raw), sort_keys=False, allow_unicode=True))


def run_sweep(
    spec: SweepSpec,
    out: str | Path,
    *,
    workers: int = 1,
    count: int | None = None,
    seed: int = 0,
    devices: Sequence[str] | None = None,
    echo: Callable[[str], None] = print,
) -> list[Outcome]:
    """Run every planned run not finished before, ``workers`` at a time; outcomes in plan order."""
    if workers < 1:
        raise ValueError(f"--workers {workers}: must be >= 1")
    if devices is not None and not devices:
        raise ValueError("--devices: give at least one device, e.g. --devices 0,1")
    runs = plan_runs(spec, out, count=count, seed=seed)
    write_sweep_file(spec, Path(out))
    todo = [r for r in runs if not is_finished(r.folder)]
    outcomes = {r.index: Outcome(r, "skipped", 0, 0.0) for r in runs}
    echo(f"sweep {spec.name}: {len(runs)} runs, {len(runs) - len(todo)} finished before, {len(todo)} to run, {workers} at a time")
    slots: queue.Queue[int] = queue.Queue()
    for slot in range(workers):
        slots.put(slot)
    lock = threading.Lock()
    done = 0

    def work(run: PlannedRun) -> Outcome:
        nonlocal done
        slot = slots.get()
        try:
            device = devices[slot % len(devices)] if devices else None
            outcome = execute(spec, run, device, workers)
        finally:
            slots.put(slot)
        with lock:
            done += 1
            where = f" on device {device}" if device is not None else ""
            echo(
                f"[{done}/{len(todo)}] {run.run_id} {outcome.state} (exit {outcome.exit_code}, "
                f"{outcome.wall_s:.1f} s{where}) {describe(run.params)}"
            )
        return outcome

    with ThreadPoolExecutor(max_workers=workers) as pool:
        for outcome in pool.map(work, todo):
            outcomes[outcome.run.index] = outcome
    ordered = [outcomes[r.index] for r in runs]
    failed = [o for o in ordered if o.state == "failed"]
    echo(
        f"sweep {spec.name}: {sum(o.state == 'finished' for o in ordered)} finished, {len(failed)} failed, "
        f"{sum(o.state == 'skipped' for o in ordered)} skipped (finished before); results in {Path(out) / spec.name}"
    )
    for o in failed:
        echo(f"  failed: {o.run.run_id} exit {o.exit_code}, log {o.run.folder / LOG}")
    return ordered
