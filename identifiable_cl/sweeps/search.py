"""Running a sweep file on this machine by its method: a plan (grid, random) or W&B's engine (bayes), with
``early_terminate: hyperband``; the runs themselves are executed by :mod:`identifiable_cl.sweeps.local`.

:func:`run_sweep` runs a grid or random sweep's planned runs (packed when asked).

A bayes sweep has no plan: the engine (:mod:`identifiable_cl.sweeps.engine`) proposes each
run from the runs so far, one proposal at a time even with parallel workers, until
``--count`` (or the file's ``run_cap``) runs exist in the sweep folder. The runs so far are
read back from the folder (parameters, state, summary, metrics history), so rerunning the
same command resumes the search: finished, failed and stopped runs count, an interrupted run
is started again with its own parameters, and new proposals follow. Each proposal is checked
in full (:func:`identifiable_cl.sweeps.plan.check_run`) before it starts, and before the
first run 20 random points of the sweep's space are checked, so a space with impossible
corners is rejected up front.

With ``early_terminate: hyperband`` (any method) every running run is shown to the engine
with its metrics so far every few seconds; a run it stops gets SIGINT, keeps its last
checkpoint, and is recorded as ``stopped`` (``status.json``: ``state: stopped``,
``stopped_by: hyperband``, ``last_metrics``: its last metrics record), which counts as done on a rerun.
"""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from identifiable_cl import rundir
from identifiable_cl.sweeps import engine
from identifiable_cl.sweeps.expand import random_points
from identifiable_cl.sweeps.local import (
    PARAMS, WATCH_EVERY, Outcome, RunFolder, check_options, is_finished, pack_groups, report, run_groups,
    write_sweep_file,
)
from identifiable_cl.sweeps.plan import PlannedRun, check_run, plan_runs, run_id
from identifiable_cl.sweeps.spec import SweepSpec

CHECKED_POINTS = 20
"""Random points of a bayes sweep's space checked before its first run."""


def read_runs(sweep_dir: Path) -> list[tuple[int, PlannedRun, engine.SearchRun]]:
    """Every run folder of the sweep, in the order the runs were proposed: ``(index, run, record)``.
    A damaged folder (:class:`identifiable_cl.sweeps.local.RunFolder`) is a failed run; one whose
    parameters cannot be read is left out, since the engine cannot place it."""
    found = []
    for folder in sorted(p.parent for p in Path(sweep_dir).glob(f"*/{PARAMS}")):
        record = RunFolder.read(folder)
        if record.params is None:
            continue
        status = record.status or {}
        state = status.get("state") if status.get("state") in ("finished", "failed", "stopped") else "running"
        if state == "finished" and status.get("exit_code") != 0:
            state = "failed"
        summary, history = record.summary or {}, []
        try:
            if record.damaged:
                raise ValueError(record.damaged)
            history = rundir.read_metrics(record.run_dir)
        except ValueError:
            state, summary = "failed", {}
        index = status.get("index") if isinstance(status.get("index"), int) else len(found)
        planned = PlannedRun(index, folder.name, record.params, folder)
        found.append((index, planned, engine.SearchRun(folder.name, record.params, state, summary, history)))
    return sorted(found, key=lambda item: item[0])


def hyperband_watch(spec: SweepSpec, sweep_dir: Path) -> Callable[[PlannedRun], bool] | None:
    """``watch(run)`` for :func:`identifiable_cl.sweeps.local.execute_pack`: whether hyperband stops
    ``run`` now, judged on every run of the sweep folder as it stands; None without ``early_terminate``."""
    if "early_terminate" not in spec.raw:
        return None
    engine.engine()  # missing engine: say so before any run starts
    lock = threading.Lock()
    latest: dict[str, Any] = {"at": 0.0, "stop": set()}

    def watch(run: PlannedRun) -> bool:
        with lock:
            if time.monotonic() - latest["at"] >= WATCH_EVERY / 2:
                runs = [record for _, _, record in read_runs(sweep_dir)]
                latest.update(at=time.monotonic(), stop=engine.to_stop(spec, runs))
            return run.folder.name in latest["stop"]

    return watch


def check_space(spec: SweepSpec) -> None:
    """Check :data:`CHECKED_POINTS` random points of a bayes sweep's space as planned runs are checked."""
    points = itertools.islice(random_points(spec.parameters, seed=0), CHECKED_POINTS)
    for index, params in enumerate(points):
        check_run(spec, index, params)


def run_sweep(spec: SweepSpec, out: str | Path, *, workers: int = 1, count: int | None = None, seed: int = 0,
              devices: Sequence[str] | None = None, pack: int = 1, echo: Callable[[str], None] = print) -> list[Outcome]:
    """Run every planned run not finished before, ``workers`` processes at a time, each training
    up to ``pack`` compatible runs as one pack; outcomes in plan order. With ``early_terminate``
    in the file, hyperband (:func:`hyperband_watch`) stops runs early."""
    check_options(workers, pack, devices)
    runs = plan_runs(spec, out, count=count, seed=seed)
    watch = hyperband_watch(spec, Path(out) / spec.name)
    if watch is not None and pack > 1:
        raise ValueError("--pack: early stopping (early_terminate) stops runs one by one; run without --pack")
    todo = [r for r in runs if not is_finished(r.folder)]
    groups = iter([(spec, g) for g in (pack_groups(spec, todo, pack) if pack > 1 else [[run] for run in todo])])
    write_sweep_file(spec, Path(out))
    outcomes = {r.index: Outcome(r, "skipped", 0, 0.0) for r in runs}
    packed = " in packs" if pack > 1 else ""
    echo(f"sweep {spec.name}: {len(runs)} runs, {len(runs) - len(todo)} finished before, {len(todo)} to run{packed}, "
         f"{workers} at a time")
    outcomes.update((o.run.index, o) for o in run_groups(lambda: next(groups, None), len(todo), workers=workers,
                                                         devices=devices, echo=echo, watch=watch))
    ordered = [outcomes[r.index] for r in runs]
    report(spec, out, ordered, echo)
    return ordered


def run_search(spec: SweepSpec, out: str | Path, *, workers: int = 1, count: int | None = None, seed: int = 0,
               devices: Sequence[str] | None = None, echo: Callable[[str], None] = print) -> list[Outcome]:
    """Run a bayes sweep until ``count`` (or ``run_cap``) runs exist in its folder (module docstring)."""
    check_options(workers, 1, devices)
    engine.engine()
    total = count if count is not None else spec.run_cap
    if total is None:
        raise ValueError(f"sweep file {spec.source}: --count is required for method bayes when the file has no run_cap")
    check_space(spec)
    sweep_dir = Path(out) / spec.name
    watch = hyperband_watch(spec, sweep_dir)
    write_sweep_file(spec, Path(out))
    previous = read_runs(sweep_dir)
    restart = [run for _, run, record in previous if record.state == "running"]
    inflight: dict[str, engine.SearchRun] = {}
    position = max((index + 1 for index, _, _ in previous), default=0)
    started = len(previous)
    echo(f"sweep {spec.name}: bayes search up to {total} runs, {len(previous)} in its folder "
         f"({len(restart)} to restart), {workers} at a time")

    def next_group() -> tuple[SweepSpec, list[PlannedRun]] | None:
        nonlocal position, started
        if restart:
            run = restart.pop(0)
        elif started >= total:
            return None
        else:
            known = {r.name: r for _, _, r in read_runs(sweep_dir)} | inflight
            params = engine.propose(spec, list(known.values()), seed, position)
            if params is None:
                return None
            rid = run_id(spec, params, sum(r.params == params for r in known.values()))
            run = PlannedRun(position, rid, params, sweep_dir / rid)
            check_run(spec, position, params)
            position += 1
            started += 1
        inflight[run.folder.name] = engine.SearchRun(run.folder.name, run.params, "running")
        return spec, [run]

    def done(outcomes: list[Outcome]) -> None:
        for outcome in outcomes:
            inflight.pop(outcome.run.folder.name, None)

    outcomes = run_groups(next_group, total - len(previous) + len(restart), workers=workers, devices=devices,
                          echo=echo, watch=watch, done=done)
    report(spec, out, outcomes, echo)
    return outcomes

