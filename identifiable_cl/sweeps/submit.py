"""Submitting a sweep as a job array through submitit (the ``slurm`` extra).

Two ways, one job per run:

- offline: the sweep is expanded here and each array task executes one planned
  run exactly as ``icl sweep run`` does (same folders, status files, resume);
- online (``sweep_id``): each array task runs ``wandb agent --count 1 SWEEP_ID``
  and the W&B server hands it the next run.

``cluster`` is ``slurm``, ``local`` (subprocesses on this machine; submitit's
LocalExecutor starts every job at once and hides all GPUs unless
``gpus_per_node`` is set) or ``debug`` (in this process, one job after the
other, when the results are collected).
"""

from __future__ import annotations

import math
import signal
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from identifiable_cl.sweeps.local import execute_pack, is_finished, stopped_by_signal, write_sweep_file
from identifiable_cl.sweeps.plan import PlannedRun, plan_runs
from identifiable_cl.sweeps.spec import SweepSpec

CLUSTERS = ("slurm", "local", "debug")
REQUEUES = 20
"""How many times a Slurm job warned of its time limit is requeued before it ends unfinished."""
WARN_S = 90
"""How long before its time limit a Slurm job is warned (SIGUSR2), in seconds (submitit's default)."""
EARLY_S, STARTUP_S = 60, 30
"""Slurm may send the warning up to ``EARLY_S`` seconds before it is due (its events are checked periodically);
a job needs about ``STARTUP_S`` seconds to start Python and install the handler that turns the warning into a
checkpoint and a requeue, and a warning before that ends the job unfinished. A Slurm time limit is therefore
at least ``warn_s + EARLY_S + STARTUP_S`` seconds."""


@dataclass(frozen=True)
class OfflineJob:
    """Array task: execute one planned run of ``spec`` (on the devices the cluster gives the job); returns its
    exit code (0 when a live process already owns the run).

    Slurm signals every process of the job: on a cancel (SIGTERM, which submitit's runner ignores) and at the
    warning before a time limit or a preemption (SIGUSR2) the run itself checkpoints the step it reached and
    ends interrupted, which is recorded (a signal that arrives while the run starts ends it before its first
    step, the checkpoint of an earlier attempt kept). After a SIGUSR2 the job is then requeued as submitit requeues a
    checkpointable job (:meth:`checkpoint`), and the requeued job resumes the run from that checkpoint.
    """

    spec: SweepSpec

    def __call__(self, run: PlannedRun) -> int:
        warned = threading.Event()
        requeue = signal.signal(signal.SIGUSR2, lambda *_: warned.set())
        try:
            code = execute_pack(self.spec, [run])[0].exit_code
        finally:
            signal.signal(signal.SIGUSR2, requeue)
        if warned.is_set() and stopped_by_signal("failed", code) and callable(requeue):
            requeue(signal.SIGUSR2, None)  # submitit's handler: checkpoint(), scontrol requeue, exit
        return code

    def checkpoint(self, run: PlannedRun) -> Any:
        """What submitit requeues: this job again for ``run``, which resumes from the run's checkpoint."""
        from submitit.helpers import DelayedSubmission

        return DelayedSubmission(self, run)


@dataclass(frozen=True)
class AgentJob:
    """Array task: one W&B agent that runs a single run of an online sweep; returns its exit code."""

    sweep_id: str
    executable: str = "wandb"

    def command(self) -> list[str]:
        return [self.executable, "agent", "--count", "1", self.sweep_id]

    def __call__(self, task: int) -> int:
        return subprocess.run(self.command(), stdin=subprocess.DEVNULL).returncode


def make_executor(
    folder: Path,
    cluster: str,
    *,
    name: str,
    parallelism: int | None = None,
    gpus_per_node: int | None = None,
    cpus_per_task: int | None = None,
    mem_gb: float | None = None,
    timeout_min: int = 24 * 60,
    partition: str | None = None,
    slurm_options: dict[str, Any] | None = None,
    warn_s: int = WARN_S,
):
    """A submitit executor with the sweep's resources (None leaves a setting at submitit's default); on Slurm a
    job is warned ``warn_s`` seconds before its time limit (see :data:`EARLY_S`)."""
    import submitit

    if cluster not in CLUSTERS:
        raise ValueError(f"--cluster {cluster!r}: allowed: {', '.join(CLUSTERS)}")
    slurm_only = [option for option, value in (("--partition", partition), ("--parallelism", parallelism),
                                               ("the sweep's slurm options", slurm_options)) if value]
    if cluster != "slurm" and slurm_only:
        raise ValueError(f"{', '.join(slurm_only)}: Slurm settings, which --cluster {cluster} would ignore; give them "
                         "with --cluster slurm")
    for option, value, least in (("--parallelism", parallelism, 1), ("--gpus-per-node", gpus_per_node, 0),
                                 ("--cpus-per-task", cpus_per_task, 1), ("--timeout-min", timeout_min, 1)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
            raise ValueError(f"{option} {value!r}: must be a whole number >= {least}")
    if mem_gb is not None and not (isinstance(mem_gb, (int, float)) and math.isfinite(mem_gb) and mem_gb > 0):
        raise ValueError(f"--mem-gb {mem_gb!r}: must be a finite number of GB > 0")
    if cluster == "slurm" and timeout_min * 60 < (least_s := warn_s + EARLY_S + STARTUP_S):
        raise ValueError(f"--timeout-min {timeout_min}: Slurm warns a job {warn_s} s before its limit, possibly up to "
                         f"{EARLY_S} s early, and a job warned while it starts ends unfinished; give at least "
                         f"{math.ceil(least_s / 60)}")
    executor = submitit.AutoExecutor(folder=folder / "%j", cluster=cluster, slurm_max_num_timeout=REQUEUES)
    parameters: dict[str, Any] = {
        "name": name,
        "timeout_min": timeout_min,
        "gpus_per_node": gpus_per_node,
        "cpus_per_task": cpus_per_task,
        "mem_gb": mem_gb,
        "slurm_array_parallelism": parallelism,
        "slurm_partition": partition,
        "slurm_signal_delay_s": warn_s if cluster == "slurm" else None,
    }
    if slurm_options:
        parameters["slurm_additional_parameters"] = dict(slurm_options)
    executor.update_parameters(**{k: v for k, v in parameters.items() if v is not None})
    return executor


def submit_offline(spec: SweepSpec, out: str | Path, executor, *, count: int | None = None, seed: int = 0) -> tuple[list[PlannedRun], list]:
    """One array task per planned run not finished before; returns the runs and their jobs."""
    if spec.method == "bayes" or "early_terminate" in spec.raw:
        raise ValueError(
            f"sweep file {spec.source}: a bayes search or hyperband stopping needs one process that sees every run; "
            "run it with `icl sweep run` (e.g. inside one cluster job), or with a W&B server and --sweep-id"
        )
    runs = [r for r in plan_runs(spec, out, count=count, seed=seed) if not is_finished(r.folder)]
    write_sweep_file(spec, Path(out))
    if not runs:
        return runs, []
    return runs, executor.map_array(OfflineJob(spec), runs)


def submit_online(sweep_id: str, executor, *, count: int, executable: str = "wandb") -> list:
    """``count`` array tasks, each one ``wandb agent --count 1 SWEEP_ID``."""
    if count < 1:
        raise ValueError(f"--count {count}: must be >= 1 (one W&B agent job per run)")
    return executor.map_array(AgentJob(sweep_id, executable), list(range(count)))
