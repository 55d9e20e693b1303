"""Running a sweep on this machine, without a W&B server.

Each run is a subprocess started as a W&B agent starts it: the rendered
command, with ``WANDB_RUN_ID`` and ``WANDB_SWEEP_PARAM_PATH`` (a W&B config
file ``{key: {value: v}}`` that ``wandb.init`` merges over the run's config)
set, ``WANDB_MODE=offline`` (unless W&B is disabled) and ``WANDB_DIR`` pointing
at the run's folder. ``WANDB_SWEEP_ID`` is left unset: no W&B server knows a
sweep made here, and ``wandb sync`` refuses runs that name an unknown sweep
(wandb/wandb#8115); the runs are grouped by the sweep's name instead
(``WANDB_RUN_GROUP``, unless already set), each run is named by its swept
parameters and seed (``WANDB_NAME``, unless already set), and the sweep's
``project`` and ``entity`` become ``WANDB_PROJECT`` / ``WANDB_ENTITY`` when not set.
``--run-dir <folder>/run`` is appended so ``icl train`` writes its run
directory there, and a bare ``icl`` runs as ``python -m identifiable_cl.cli`` with this process's
interpreter (:func:`this_interpreter`), so no run depends on its ``PATH``. The folder ``OUT/<sweep name>/<run id>/`` holds::

    params.yaml   the run's parameters (W&B's config-file format)
    stdout.log    everything the run printed
    status.json   state (running, finished, failed), exit_code, command, device, times; while it
                  runs, a heartbeat every 30 s (a run without a recent one was lost, :func:`lost`)
    run/          the run directory of ``icl train``

A run whose ``status.json`` records exit code 0 is finished and skipped when the
sweep is run again. A run that was interrupted (its process gone while ``running``, as when a
machine or session ends, or stopped by Ctrl-C, exit code 130) continues from its last
checkpoint with ``icl train --resume`` when the command runs ``icl train`` and its folder holds
that checkpoint for the same parameters (``status.json`` then has ``resumed_from_step``, and
``resumed_from_steps`` lists every resumption); any other run is started afresh. A failing run is
recorded and the others go on. With ``devices``, worker slot i runs its jobs with
``CUDA_VISIBLE_DEVICES=devices[i % len(devices)]``.

With ``pack`` K > 1, up to K runs whose tensors have the same shapes
(:func:`identifiable_cl.solvers.packed.pack_key`) train in one ``icl train
--pack-file`` process (``pack.json`` in the first run's folder lists them); each
keeps its folder, ``params.yaml``, W&B run id and its own ``status.json`` with
its own exit code, and ``stdout.log`` holds the pack's output. Packing needs the
sweep's command to be ``... icl train ...``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import yaml

from dgp.files import load_tensors
from identifiable_cl.devices import available_cpus
from identifiable_cl.yamlfiles import load_yaml
from identifiable_cl import rundir
from identifiable_cl.rundir import CHECKPOINT, IDENTITY_CACHE, SUMMARY, lock, read_json, read_metrics, write_json
from identifiable_cl.rundir import unlock as release
from identifiable_cl.stops import STOP_SIGNALS, Interrupted
from identifiable_cl.sweeps.plan import PlannedRun
from identifiable_cl.sweeps.render import describe, render_command
from identifiable_cl.sweeps.spec import SweepSpec

PARAMS, LOG, STATUS, RUN, ARGS_JSON, SWEEP = "params.yaml", "stdout.log", "status.json", "run", "params.json", "sweep.yaml"
PACK, PACK_RESULT = "pack.json", "pack_result.json"
AGENT_STRIPS = ("WANDB_SWEEP_ID", "WANDB_SERVICE")
"""Variables a run does not inherit: no sweep id (see above), and no W&B service of the
runner's own process, which a W&B agent also removes before starting a run."""


@dataclass(frozen=True)
class Outcome:
    """What happened to one planned run: ``finished``, ``failed``, ``skipped`` (finished before) or
    ``busy`` (its folder is owned by a live process)."""

    run: PlannedRun
    state: str
    exit_code: int
    wall_s: float

    @property
    def shown(self) -> str:
        """The state as printed: a run :func:`stopped_by_signal` is ``interrupted``, as running the sweep
        again continues it."""
        return "interrupted" if stopped_by_signal(self.state, self.exit_code) else self.state


def read_status(folder: Path) -> dict[str, Any] | None:
    """The run's ``status.json``; None when it is missing or damaged (the run did not end cleanly, so it
    counts as not finished and runs again)."""
    return _record(Path(folder) / STATUS)


def _record(path: Path) -> dict[str, Any] | None:
    """A file the runner itself writes (``status.json``, ``pack_result.json``); missing or damaged is None."""
    try:
        return read_status_file(path) if path.name == STATUS else read_json(path, missing_ok=True)
    except ValueError:
        return None


STATES = ("running", "finished", "failed", "stopped")
"""The states a run's ``status.json`` records."""
STATUS_FIELDS: dict[str, Callable[[Any], bool]] = {
    "state": lambda v: v in STATES,
    "exit_code": lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool)),
    "pid": lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool) and v > 0),
    "run_dir": lambda v: isinstance(v, str) and bool(v),
    **{name: lambda v: isinstance(v, str) and _time(v) is not None for name in ("started", "heartbeat", "ended")},
}
"""What each field of ``status.json`` holds where it is present."""


def _time(text: str) -> datetime | None:
    try:
        return datetime.strptime(text, TIME_FORMAT)
    except ValueError:
        return None


def read_status_file(path: Path) -> dict[str, Any] | None:
    """``status.json`` at ``path`` (None when missing), every field of :data:`STATUS_FIELDS` checked: a field that
    holds something else is a ValueError naming the file, the field and the value."""
    status = read_json(path, missing_ok=True)
    for name, fits in STATUS_FIELDS.items():
        if status is not None and name in status and not fits(status[name]):
            raise ValueError(f"{path}: {name}={status[name]!r} is not what the runner writes there")
    return status


@dataclass(frozen=True)
class RunFolder:
    """A sweep run's folder as the runner, the search, the results and the reports read it: its
    parameters, status and the summary of its run directory. A missing file is None; a damaged one
    (:func:`identifiable_cl.rundir.read_json`'s rule) makes the folder ``damaged``, with the reason,
    and the files after it unread. Read with :meth:`read`."""

    path: Path
    params: dict[str, Any] | None = None
    status: dict[str, Any] | None = None
    summary: dict[str, Any] | None = None
    damaged: str | None = None

    @property
    def run_dir(self) -> Path:
        return self.path / str((self.status or {}).get("run_dir", RUN))

    @classmethod
    def read(cls, folder: Path) -> "RunFolder":
        folder, found = Path(folder), {}
        try:
            found["params"] = read_params(folder / PARAMS) if (folder / PARAMS).exists() else None
            found["status"] = read_status_file(folder / STATUS)
            run_dir = cls(folder, **found).run_dir
            found["summary"] = read_json(run_dir / SUMMARY, missing_ok=True)
        except ValueError as exc:
            return cls(folder, **found, damaged=str(exc))
        return cls(folder, **found)


def is_finished(folder: Path) -> bool:
    """The run ended for good: it finished (exit code 0 and its summary written), or hyperband stopped it."""
    status = read_status(folder)
    return status is not None and status.get("state") in ("finished", "stopped")


def write_params(path: Path, params: Mapping[str, Any]) -> None:
    """The parameters as the config file a W&B agent writes for ``WANDB_SWEEP_PARAM_PATH``."""
    body = yaml.safe_dump({k: {"value": v} for k, v in params.items()}, sort_keys=False, allow_unicode=True)
    rundir.write_text(path, "wandb_version: 1\n\n" + body)


def read_params(path: Path) -> dict[str, Any]:
    """The ``{key: value}`` pairs of a W&B config file; a ValueError naming it when damaged."""
    try:
        data = load_yaml(Path(path).read_text()) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ValueError(f"{path}: cannot be read as YAML ({exc})") from exc
    if not isinstance(data, dict) or any(
        not isinstance(v, dict) or "value" not in v for k, v in data.items() if k != "wandb_version"
    ):
        raise ValueError(f"{path}: not a W&B config file ({{key: {{value: ...}}}} entries)")
    return {k: v["value"] for k, v in data.items() if k != "wandb_version"}


def run_environment(
    spec: SweepSpec, run: PlannedRun, device: str | None, base: Mapping[str, str], workers: int = 1
) -> dict[str, str]:
    """The environment a W&B agent would give this run (without a sweep id), logging offline into its folder.

    With several workers and no ``OMP_NUM_THREADS`` of the user's, each run gets
    ``cpus // workers`` threads (:func:`identifiable_cl.devices.available_cpus`): parallel runs
    that each spin up every core's worth of threads slow each other down many times over.

    The W&B run is named by the parameters that vary across the sweep and the seed,
    e.g. ``WANDB_NAME="loss.tau=0.1 seed=2"`` (its id unchanged), unless ``WANDB_NAME``
    is set already or the run's parameters set ``wandb.name`` (a ``wandb.name`` in the
    run's config wins over ``WANDB_NAME`` in ``icl train`` anyway).
    """

    def shown(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:.4g}"
        if isinstance(value, (list, dict)):
            return json.dumps(value, separators=(",", ":"))
        return str(value)

    swept = [p.name for p in spec.parameters if p.kind != "constant"
             and not (p.kind == "categorical" and len(p.spec.get("values", ())) == 1) and p.name != "seed"]
    name = " ".join(f"{k}={shown(run.params[k])}" for k in [*swept, "seed"] if k in run.params) or run.run_id
    folder = run.folder.resolve()
    env = {k: v for k, v in base.items() if k not in AGENT_STRIPS}
    env.update(
        WANDB_RUN_ID=run.wandb_id,
        WANDB_SWEEP_PARAM_PATH=str(folder / PARAMS),
        WANDB_DIR=str(folder),
        WANDB_MODE="disabled" if base.get("WANDB_MODE") == "disabled" else "offline",
    )
    env.setdefault("WANDB_RUN_GROUP", spec.name)
    env.setdefault(IDENTITY_CACHE, str(folder.parent / ".identity"))  # the sweep's runs share identity baselines
    if not env.get("WANDB_NAME") and "wandb.name" not in run.params:
        env["WANDB_NAME"] = name
    for key, variable in (("project", "WANDB_PROJECT"), ("entity", "WANDB_ENTITY")):
        if spec.raw.get(key):
            env.setdefault(variable, spec.raw[key])
    if device is not None:
        env["CUDA_VISIBLE_DEVICES"] = device
    if workers > 1:
        env.setdefault("OMP_NUM_THREADS", str(max(1, available_cpus(base) // workers)))
    return env


class Busy(Exception):
    """The run's folder belongs to a live process (another runner, or a run whose runner was killed)."""


def claim(run: PlannedRun) -> int:
    """Take the run's lock without waiting (:func:`identifiable_cl.rundir.lock`); returns its file descriptor,
    or raises :class:`Busy`.

    The lock (``flock``) is inherited by the run's process, so it stays held while either the
    runner or the run lives: a second runner on the same sweep and ``--out`` skips the run, and
    a rerun after killing only the runner leaves a still-running orphan alone. The lock file sits
    beside the folder, since the folder itself is replaced when the run restarts.
    """
    run.folder.parent.mkdir(parents=True, exist_ok=True)
    fd = lock(run.folder)
    if fd is None:
        status = read_status(run.folder) or {}
        pids = ", ".join(f"{k} {status[k]}" for k in ("owner_pid", "pid") if status.get(k))
        raise Busy(f"{run.folder} is owned by a live process ({pids or 'pid unknown'}); left alone")
    return fd


INTERRUPTED_EXIT = 130
"""The exit code of an ``icl train`` stopped by Ctrl-C (SIGINT), which keeps its checkpoint."""
STOPPED_EXITS = (INTERRUPTED_EXIT, -signal.SIGINT, -signal.SIGTERM, -signal.SIGUSR2)
"""Exit codes of a run stopped by a signal: :data:`INTERRUPTED_EXIT` once ``icl train`` handles its stop
signals, minus the signal's number when one arrived before (while it started), which leaves the checkpoint of
an earlier attempt as it was."""


def stopped_by_signal(state: str | None, exit_code: int | None) -> bool:
    """A run recorded as failed with one of :data:`STOPPED_EXITS`: stopped by a signal, its checkpoint kept."""
    return state == "failed" and exit_code in STOPPED_EXITS


def resumable_step(spec: SweepSpec, run: PlannedRun) -> int | None:
    """The checkpoint step an interrupted run can continue from (see the module docstring), or None.

    The caller holds the run's lock, so a ``running`` status was left by a process that is gone."""
    from identifiable_cl.arguments import after_train

    status = read_status(run.folder) or {}
    interrupted = status.get("state") == "running" or stopped_by_signal(status.get("state"), status.get("exit_code"))
    checkpoint = run.folder / RUN / CHECKPOINT
    if not interrupted or not checkpoint.is_file() or after_train(status.get("command") or []) is None:
        return None
    try:
        if read_params(run.folder / PARAMS) != dict(run.params):
            return None
        train_position(status["command"])
        return int(load_tensors(checkpoint)["step"])
    except (ValueError, KeyError, TypeError):
        return None  # not a readable icl train checkpoint of these parameters: start afresh


def resume_command(argv: Sequence[str], run_dir: Path) -> list[str]:
    """``argv`` (a rendered ``... icl train ...`` command) turned into ``... icl train --resume run_dir``,
    keeping ``--quiet``; the config file and overrides are dropped: the run saved its config."""
    from identifiable_cl.arguments import split

    at = train_position(argv)
    options, _ = split(argv[at + 1 :])
    return [*argv[: at + 1], "--resume", str(run_dir), *(["--quiet"] if "--quiet" in options else [])]


def _start(spec: SweepSpec, run: PlannedRun, device: str | None, workers: int,
           resumed: int | None = None) -> tuple[list[str], dict[str, str], dict[str, Any]]:
    """The run's folder (fresh, or kept when ``resumed`` gives the checkpoint step of an interrupted
    run, :func:`resumable_step`), its parameters and its ``running`` status; returns (argv, env, status).

    The caller holds the run's lock (:func:`claim`), so whatever the folder holds was left by a
    process that is gone."""
    folder = run.folder
    if resumed is None:
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        write_params(folder / PARAMS, run.params)
    env = run_environment(spec, run, device, os.environ, workers)
    json_file = None
    if "${args_json_file}" in [str(c) for c in spec.command]:
        json_file = folder.resolve() / ARGS_JSON
        rundir.write_text(json_file, json.dumps(run.params))
    argv = render_command(spec.command, run.params, program=spec.program, args_json_file=json_file and str(json_file), environ=env)
    argv = this_interpreter(argv) + ["--run-dir", str(folder.resolve() / RUN)]
    if resumed is not None:
        argv = resume_command(argv, folder.resolve() / RUN)
    earlier = [] if resumed is None else (read_status(folder) or {}).get("resumed_from_steps", [])
    status: dict[str, Any] = {
        "run_id": run.run_id, "wandb_id": run.wandb_id, "owner_pid": os.getpid(), "pid": None, "sweep": spec.name,
        "sweep_content_id": spec.content_id, "index": run.index, "state": "running", "exit_code": None,
        "command": argv, "device": device, "log": LOG, "run_dir": RUN, "started": now(), "heartbeat": now(),
        **({} if resumed is None else {"resumed_from_step": resumed, "resumed_from_steps": [*earlier, resumed]}),
    }
    write_json(folder / STATUS, status)
    return argv, env, status



WATCH_EVERY = 2.0
"""Seconds between two asks of a run's ``watch`` (hyperband) while it runs."""
HEARTBEAT_EVERY = 30.0
"""Seconds between two heartbeats: the runner rewrites a running run's ``status.json`` with the time."""
LOST_AFTER = 3 * HEARTBEAT_EVERY
"""A run still ``running`` whose last heartbeat is older than this lost its runner (:func:`lost`)."""
TIME_FORMAT = "%Y-%m-%dT%H:%M:%S%z"


def now() -> str:
    return time.strftime(TIME_FORMAT)


def lost(status: Mapping[str, Any]) -> bool:
    """A ``running`` status whose runner stopped writing heartbeats (killed, or its job ended by the scheduler
    without a signal it could act on): the run is gone; running the sweep again continues it."""
    beat = status.get("heartbeat")
    if status.get("state") != "running" or not isinstance(beat, str):
        return False
    when = _time(beat)
    return when is not None and time.time() - when.timestamp() > LOST_AFTER


class Children:
    """The runs this process has started and not yet waited for, and whether a stop signal has reached it: the
    pool (:func:`run_groups`) forwards SIGINT, SIGTERM and SIGUSR2 to every live run (each stops with its
    checkpoint, resumable), starts no more runs, and waits for them before it ends as interrupted."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.live: set[subprocess.Popen] = set()
        self.signal: int | None = None

    def add(self, process: subprocess.Popen) -> None:
        with self.lock:
            self.live.add(process)
            if self.signal is not None:  # started as the signal arrived: it stops too
                process.send_signal(self.signal)

    def discard(self, process: subprocess.Popen) -> None:
        with self.lock:
            self.live.discard(process)

    def forward(self, signum: int, frame: Any = None) -> None:
        """The stop signal ``signum`` to every live run; no run starts after it."""
        with self.lock:
            self.signal = signum
            for process in self.live:
                if process.poll() is None:
                    process.send_signal(signum)

    @contextlib.contextmanager
    def forwarding(self) -> Iterator[None]:
        """Within the block, the stop signals reach every live run (:meth:`forward`); off the main thread, where
        handlers cannot be set, nothing changes. The previous handlers come back after it."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        self.signal = None
        previous = {sig: signal.signal(sig, self.forward) for sig in STOP_SIGNALS}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


CHILDREN = Children()
"""This process's live runs (:class:`Children`)."""


class StoppedBySignal(Interrupted):
    """The pool stopped on a signal after its runs stopped: ``icl`` prints the message and exits 130."""


def _launch(argv: list[str], env: Mapping[str, str], log_path: Path, lock: int,
            record: Callable[[int | None], None], watch: Callable[[], bool] | None = None) -> tuple[int, bool]:
    """Run ``argv`` with its output in ``log_path``, passing it the lock; ``record(pid)`` once it runs and
    ``record(None)`` every :data:`HEARTBEAT_EVERY` seconds while it runs.

    While it runs, ``watch()`` is asked every :data:`WATCH_EVERY` seconds; once it answers True the
    run gets SIGINT (``icl train`` then stops at once and keeps its last checkpoint). Returns the
    exit code and whether the run was stopped so.
    """
    with rundir.open_log(log_path) as log:
        try:
            process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, stdin=subprocess.DEVNULL,
                                       pass_fds=(lock,))
        except OSError as exc:
            log.write(f"could not start {argv[0]!r}: {exc}\n")
            return 127, False
        CHILDREN.add(process)
        try:
            return _wait(process, record, watch)
        finally:
            CHILDREN.discard(process)


def _wait(process: subprocess.Popen, record: Callable[[int | None], None],
          watch: Callable[[], bool] | None) -> tuple[int, bool]:
    """:func:`_launch`'s wait for ``process``: its exit code and whether ``watch`` stopped it."""
    record(process.pid)
    stopped, beat = False, time.monotonic()
    while True:
        watching = watch is not None and not stopped
        try:
            return process.wait(timeout=min(WATCH_EVERY, HEARTBEAT_EVERY) if watching else HEARTBEAT_EVERY), stopped
        except subprocess.TimeoutExpired:
            if time.monotonic() - beat >= HEARTBEAT_EVERY:
                record(None)
                beat = time.monotonic()
            if watching and watch():
                stopped = True
                process.send_signal(signal.SIGINT)


def _finish(run: PlannedRun, status: dict[str, Any], code: int, wall: float, stopped: bool = False) -> Outcome:
    """Record how the run ended; one that exits 0 without writing ``run/summary.json`` (a command that never ran
    ``icl train``) failed."""
    summary = (run.folder / RUN / SUMMARY).is_file()
    state = "stopped" if stopped else "finished" if code == 0 and summary else "failed"
    status.update(state=state, exit_code=code, wall_s=round(wall, 3), ended=now())
    if state == "failed" and code == 0:
        status["problem"] = f"exit 0 but no {RUN}/{SUMMARY}: the command did not train a run into --run-dir"
    if stopped:
        status["stopped_by"] = "hyperband"
        status["last_metrics"] = _last_record(run.folder / RUN)
    write_json(run.folder / STATUS, status)
    return Outcome(run, state, code, wall)


def _last_record(run_dir: Path) -> dict[str, Any] | None:
    """The last metrics record of a run (a stopped run's last metrics), or None."""
    try:
        records = read_metrics(run_dir)
    except ValueError:
        return None
    return records[-1] if records else None


def execute(spec: SweepSpec, run: PlannedRun, lock: int, device: str | None = None, workers: int = 1,
            watch: Callable[[], bool] | None = None, resumed: int | None = None) -> Outcome:
    """Start one planned run in a fresh folder (or resume it from step ``resumed``), wait for it and
    record its status (the caller holds its lock)."""
    argv, env, status = _start(spec, run, device, workers, resumed)
    started = time.perf_counter()
    code, stopped = _launch(argv, env, run.folder / LOG, lock, _recorder([(run, status)]), watch)
    return _finish(run, status, code, time.perf_counter() - started, stopped)


def _recorder(items: Sequence[tuple[PlannedRun, dict[str, Any]]]) -> Callable[[int | None], None]:
    """``record(pid)`` for :func:`_launch`: the pid of the process that runs them (None: the same) and a
    heartbeat into each run's status."""

    def record(pid: int | None) -> None:
        for run, status in items:
            status.update(heartbeat=now(), **({} if pid is None else {"pid": pid}))
            write_json(run.folder / STATUS, status)

    return record


def this_interpreter(argv: Sequence[str]) -> list[str]:
    """``argv`` with a bare ``icl`` program run by this process's interpreter (``python -m identifiable_cl.cli``):
    a run, a cluster job's included, uses the identifiable-cl that planned it, whatever its ``PATH`` holds."""
    argv = list(argv)
    if "icl" in argv:
        at = argv.index("icl")
        argv[at : at + 1] = [sys.executable, "-m", "identifiable_cl.cli"]
    return argv


def train_position(argv: Sequence[str]) -> int:
    """Index of ``train`` in a rendered ``... icl train ...`` command; a ValueError otherwise."""
    for i in range(1, len(argv)):
        if argv[i] == "train" and (Path(argv[i - 1]).name == "icl" or argv[i - 1] == "identifiable_cl.cli"):
            return i
    raise ValueError(f"--pack: the sweep's command must run `icl train ...`; it renders as {list(argv)}")


def execute_pack(spec: SweepSpec, runs: Sequence[PlannedRun], device: str | None = None, workers: int = 1,
                 echo: Callable[[str], None] = print, watch: Callable[[PlannedRun], bool] | None = None) -> list[Outcome]:
    """Claim ``runs`` (:func:`claim`), start those claimed as one pack (see the module docstring),
    wait, and record each run's status; a run owned by a live process is left alone, as ``busy``.
    ``watch(run)`` (one run only, see :func:`_launch`) may stop it early."""
    if watch is not None and len(runs) > 1:
        raise ValueError("--pack: early stopping (early_terminate) stops runs one by one; run without --pack")
    locks, claimed, resumed, outcomes = {}, [], {}, []
    for run in runs:
        try:
            locks[run.index] = claim(run)
        except Busy as exc:
            echo(f"{run.run_id}: {exc}")
            outcomes.append(Outcome(run, "busy", 0, 0.0))
            continue
        previous = read_status(run.folder) or {}
        step = resumable_step(spec, run)
        if step is not None:
            resumed[run.index] = step
            echo(f"{run.run_id}: interrupted before (pid {previous.get('pid')}); resumed from its checkpoint at step {step}")
        else:
            claimed.append(run)
            if previous.get("state") == "running":
                echo(f"{run.run_id}: restarted; the process that ran it before (pid {previous.get('pid')}) is gone")
    try:  # a resumed run continues alone, whatever pack it started in
        for run in [r for r in runs if r.index in resumed] + (claimed if len(claimed) == 1 else []):
            watching = None if watch is None else functools.partial(watch, run)
            outcomes.append(execute(spec, run, locks[run.index], device, workers, watching, resumed.get(run.index)))
        if len(claimed) > 1:
            outcomes += _execute_packed(spec, claimed, [locks[r.index] for r in claimed], device, workers)
    finally:
        for fd in locks.values():
            release(fd)
    return outcomes


def _execute_packed(spec: SweepSpec, runs: Sequence[PlannedRun], locks: Sequence[int], device: str | None,
                    workers: int) -> list[Outcome]:
    """Start two or more claimed runs as one ``icl train --pack-file`` process, wait, and record each run's status."""
    starts = [_start(spec, run, device, workers) for run in runs]
    positions = [train_position(argv) for argv, _, _ in starts]
    entries = [
        {"args": argv[i + 1 :], "wandb_id": run.wandb_id, "wandb_name": env.get("WANDB_NAME"),
         "result": str(run.folder.resolve() / PACK_RESULT)}
        for run, (argv, env, _), i in zip(runs, starts, positions)
    ]
    first_argv, first_env, _ = starts[0]
    pack_file = runs[0].folder.resolve() / PACK
    rundir.write_text(pack_file, json.dumps(entries, indent=1))
    argv = [*first_argv[: positions[0]], "train", "--pack-file", str(pack_file)]
    env = {k: v for k, v in first_env.items() if k not in ("WANDB_RUN_ID", "WANDB_SWEEP_PARAM_PATH", "WANDB_NAME")}
    started = time.perf_counter()
    recorder = _recorder([(run, status) for run, (_, _, status) in zip(runs, starts)])
    code, _ = _launch(argv, env, runs[0].folder / LOG, locks[0], recorder)
    wall = time.perf_counter() - started
    outcomes = []
    for run, (_, _, status) in zip(runs, starts):
        if run is not runs[0]:
            shutil.copyfile(runs[0].folder / LOG, run.folder / LOG)
        result = _record(run.folder / PACK_RESULT)
        status.update(packed_with=[r.run_id for r in runs], pack_command=argv)
        outcomes.append(_finish(run, status, result["exit_code"] if result else (code or 1), wall))
    return outcomes


def pack_groups(spec: SweepSpec, runs: Sequence[PlannedRun], size: int) -> list[list[PlannedRun]]:
    """The runs in packs of at most ``size`` whose configs share a pack key, in plan order."""
    from identifiable_cl.solvers.packed import pack_key
    from identifiable_cl.sweeps.plan import run_config

    groups: list[tuple[tuple, list[PlannedRun]]] = []
    for run in runs:
        train_position(render_command(spec.command, run.params, program=spec.program))  # before any folder is made
        key = pack_key(run_config(spec, run.params))
        open_group = next((g for k, g in groups if k == key and len(g) < size), None)
        if open_group is None:
            groups.append((key, [run]))
        else:
            open_group.append(run)
    return [g for _, g in groups]


def write_sweep_file(spec: SweepSpec, out: Path) -> None:
    folder = Path(out) / spec.name
    folder.mkdir(parents=True, exist_ok=True)
    rundir.write_text(folder / SWEEP, yaml.safe_dump(dict(spec.raw), sort_keys=False, allow_unicode=True))


MOST_WORKERS = 256
MOST_PACK = 1024
"""The most processes a runner starts at once, and the most runs one process trains (``--workers``, ``--pack``)."""


def check_count(flag: str, value: int, most: int) -> None:
    """A ValueError naming ``flag`` unless ``value`` is a whole number in [1, most]."""
    if not 1 <= value <= most:
        raise ValueError(f"--{flag} {value}: must be a whole number from 1 to {most:,}")


def check_options(workers: int, pack: int, devices: Sequence[str] | None) -> None:
    """``--workers``, ``--pack`` and ``--devices`` make sense (a ValueError naming the option otherwise)."""
    check_count("workers", workers, MOST_WORKERS)
    check_count("pack", pack, MOST_PACK)
    if devices is not None and not devices:
        raise ValueError("--devices: give at least one device, e.g. --devices 0,1")


Group = tuple[SweepSpec, list[PlannedRun]]
"""Runs of one sweep that train in one process (a pack, or a single run)."""


def outcome_line(outcome: Outcome, spec: SweepSpec, done: int, total: int, where: str) -> str:
    """How the runner reports a run that ended: ``[done/total] run id, state, exit code, wall time, device,
    the values of the parameters the sweep varies`` (the fixed ones are the same on every line)."""
    swept = {key: value for key, value in outcome.run.params.items() if key in spec.swept}
    return (f"[{done}/{total}] {outcome.run.run_id} {outcome.shown} (exit {outcome.exit_code}, {outcome.wall_s:.1f} s"
            f"{where}) {describe(swept)}").rstrip()


HEARTBEAT_S = 60.0
"""Seconds between the runner's lines on the runs still training (:func:`progress_line`)."""


def progress_line(done: int, total: int, running: Sequence[tuple[SweepSpec, PlannedRun]]) -> str:
    """What the runner says while runs train: ``[done/total]`` and each live run (its sweep's name, its id and the
    values its sweep varies) at its last logged step."""
    parts = []
    for spec, run in running:
        try:
            records = read_metrics(RunFolder.read(run.folder).run_dir)
        except ValueError:
            records = []
        swept = describe({key: value for key, value in run.params.items() if key in spec.swept})
        name = f"{spec.name} {run.run_id}" + (f" ({swept})" if swept else "")
        parts.append(f"{name} at step {records[-1]['step']}" if records else f"{name} starting")
    return f"[{done}/{total}] training: " + ", ".join(parts)


def run_groups(
    next_group: Callable[[], Group | None],
    total: int,
    *,
    workers: int,
    devices: Sequence[str] | None,
    echo: Callable[[str], None],
    watch: Callable[[PlannedRun], bool] | None = None,
    done: Callable[[list[Outcome]], None] | None = None,
    line: Callable[[Outcome, SweepSpec, int, int, str], str] = outcome_line,
) -> list[Outcome]:
    """The one worker pool: execute groups of runs (:func:`execute_pack`) on ``workers`` worker slots until
    ``next_group()`` returns None; it and ``done(outcomes)`` are called under one lock, and each ended
    run is reported by ``line``. Slot i runs on ``devices[i % len(devices)]``. Returns the outcomes in
    the order the runs ended. A stop signal reaches every live run and starts no other (:class:`Children`); the
    pool then ends, once they have, with :class:`StoppedBySignal`."""
    lock = threading.Lock()
    outcomes: list[Outcome] = []
    running: dict[int, tuple[SweepSpec, PlannedRun]] = {}
    finished = threading.Event()

    def work(slot: int) -> None:
        device = devices[slot % len(devices)] if devices else None
        where = f" on device {device}" if device is not None else ""
        while True:
            with lock:
                group = None if CHILDREN.signal is not None else next_group()
                running.update({run.index: (group[0], run) for run in group[1]} if group is not None else {})
            if group is None:
                return
            spec, runs = group
            results = execute_pack(spec, runs, device, workers, echo, watch)
            with lock:
                for run in runs:
                    running.pop(run.index, None)
                outcomes.extend(results)
                if done is not None:
                    done(results)
                for outcome in results:
                    echo(line(outcome, spec, len(outcomes), total, where))

    def heartbeat() -> None:  # a line every HEARTBEAT_S on the runs still training
        while not finished.wait(HEARTBEAT_S):
            with lock:
                live, ended = sorted(running.values(), key=lambda pair: pair[1].index), len(outcomes)
            if live:
                echo(progress_line(ended, total, live))

    beating = threading.Thread(target=heartbeat, daemon=True)
    beating.start()
    try:
        with CHILDREN.forwarding(), ThreadPoolExecutor(max_workers=workers) as pool:
            for future in [pool.submit(work, slot) for slot in range(workers)]:
                future.result()
            stopped_by = CHILDREN.signal
    finally:
        finished.set()
        beating.join()
    if stopped_by is not None:
        ended = [o for o in outcomes if o.shown == "interrupted"]
        raise StoppedBySignal(
            f"stopped by {signal.Signals(stopped_by).name}: {len(ended)} running run{'s' if len(ended) != 1 else ''} "
            f"stopped with {'their checkpoints' if len(ended) != 1 else 'its checkpoint'} and no other started; run "
            "it again to continue" + "".join(f"\n  interrupted: {o.run.run_id}, log {o.run.folder / LOG}" for o in ended))
    return outcomes


def report(spec: SweepSpec, out: str | Path, ordered: Sequence[Outcome], echo: Callable[[str], None]) -> None:
    """The sweep's closing lines: how many runs ended how, and where the failed and interrupted ones logged."""
    count = {state: sum(o.shown == state for o in ordered)
             for state in ("finished", "failed", "interrupted", "stopped", "skipped", "busy")}
    echo(
        f"sweep {spec.name}: {count['finished']} finished, {count['failed']} failed"
        + (f", {count['interrupted']} interrupted (run the sweep again to continue them)" if count["interrupted"] else "")
        + (f", {count['stopped']} stopped early (hyperband)" if count["stopped"] else "")
        + f", {count['skipped']} skipped (finished before)"
        + (f", {count['busy']} left to the live processes that own them" if count["busy"] else "")
        + f"; results in {Path(out) / spec.name}"
    )
    for o in (o for o in ordered if o.shown in ("failed", "interrupted")):
        echo(f"  {o.shown}: {o.run.run_id} exit {o.exit_code}, log {o.run.folder / LOG}")
