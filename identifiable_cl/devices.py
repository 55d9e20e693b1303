"""Where a run computes: its device and how many CPU threads torch uses."""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import Mapping

import torch

from dgp.checks import fail


def resolve_device(name: str) -> torch.device:
    """``auto`` → CUDA when present, else CPU; ``cuda`` without a GPU is an error naming the key."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        fail("device", name, "CUDA is not available on this machine; use auto or cpu")
    return device


CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")
"""The cgroup (v2) CPU quota of this process's group: ``QUOTA PERIOD`` or ``max PERIOD``."""


def available_cpus(environ: Mapping[str, str] | None = None) -> int:
    """The CPUs this process may use: its CPU affinity, capped by the cgroup's CPU quota and by Slurm's
    ``SLURM_CPUS_PER_TASK`` (a cluster that does not pin a job's processes still gives it that many)."""
    environ = os.environ if environ is None else environ
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        quota, period = CGROUP_CPU_MAX.read_text().split()
        if quota != "max":
            n = min(n, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError):
        pass
    slurm = environ.get("SLURM_CPUS_PER_TASK", "")
    return max(1, min(n, int(slurm)) if slurm.isdigit() else n)


def use_threads(threads: int | None = None) -> None:
    """torch's intra-op threads: ``threads`` when given (a run's ``train.threads``), capped at
    :func:`available_cpus` with a line on stderr saying so (more threads than CPUs only slow everyone on the
    machine down), else ``OMP_NUM_THREADS`` when set, else :func:`available_cpus` (torch's own default counts
    every core of the machine, given or not)."""
    if threads is not None:
        cpus = available_cpus()
        if threads > cpus:
            print(f"train.threads={threads} is more than the {cpus} CPU{'s' if cpus > 1 else ''} this process may use "
                  f"(its affinity, cgroup quota, SLURM_CPUS_PER_TASK); using {cpus}", file=sys.stderr)
            threads = cpus
        torch.set_num_threads(threads)
    elif not os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(available_cpus())
