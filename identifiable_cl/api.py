"""The Python API: everything a notebook needs, importable from the package top level.

::

    import identifiable_cl as icl

    config = icl.load_config("box", {"train.steps": 200})   # checked in full, like `icl train box`
    result = icl.train(config)                              # a run directory of its own
    result.summary["mcc_pearson"], result.run_dir
    run = icl.load_run(result.run_dir)                      # its solver at the last checkpoint
    spec = icl.resolve(result.run_dir, {"train.steps": 400}, "resume")  # every spec's one maker
    icl.evaluate_run(result.run_dir, {"eval.final_n_fit": 4096})  # also written to its evaluation.json
    icl.history(result.run_dir)                              # its metrics.jsonl as records, step by step
    icl.results(["runs/sweeps/z21"], group_by=["loss.tau"])  # `icl results` as records: one per group

    process = icl.build_process({"space": "sphere", "conditional": {"name": "vmf", "kappa": 5.0}})
    batch = process.sample(1024, process.make_generator(0))  # batch.z, batch.x, batch.z_pos, batch.x_pos
    process.save("process.pt"); icl.load_process("process.pt")

Every function checks its input and raises a ``ValueError`` naming the key, value or file.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from dgp import Batch, Process, build_process, check_process, load_process  # noqa: F401  (the API)
from identifiable_cl import API
from identifiable_cl.components import build, check, load_config, load_run, resolve  # noqa: F401
from identifiable_cl.config import SCHEMA  # noqa: F401
from identifiable_cl.solvers import Solver  # noqa: F401
from identifiable_cl.training import Trainer, evaluate_run  # noqa: F401


@dataclass
class TrainedRun:
    """A finished run: its folder, its summary (the printed table's numbers and more) and its solver."""

    run_dir: Path
    summary: dict[str, Any]
    solver: Solver


def train(
    config: Mapping[str, Any] | str | Path | None = None,
    overrides: Mapping[str, Any] | Sequence[str] = (),
    *,
    run_dir: str | Path | None = None,
    progress: bool = False,
) -> TrainedRun:
    """Train one run, as ``icl train`` does, and return it.

    ``config``: None (the default experiment), a YAML file or preset name, or a mapping (a config
    from :func:`load_config`, or any part of one, nested or as dotted keys) read over the defaults;
    ``overrides`` (``{"loss.tau": 0.1}`` or ``["--loss.tau=0.1"]``) come last. Every run writes its
    run directory: ``run_dir``, or a new temporary folder (kept; its path is ``result.run_dir``), and logs to W&B
    as ``icl train`` does (``wandb.mode``, or ``WANDB_MODE``: ``disabled`` turns it off). ``progress``: print
    ``icl train``'s progress lines and table (default: quiet, as a notebook wants).
    """
    spec = resolve(config, overrides)
    folder = Path(run_dir) if run_dir is not None else Path(tempfile.mkdtemp(prefix="icl-run-"))
    trainer = Trainer.from_spec(spec, folder, progress=progress)
    return TrainedRun(folder, trainer.run(), trainer.c)


__all__ = list(API)


def history(run_dir: str | Path) -> list[dict[str, Any]]:
    """A run's ``metrics.jsonl`` as records, step by step (``{"step": 100, "loss": 2.9, ...}``; the periodic
    evaluations' metrics on their own steps); a ValueError naming the folder when no run is there."""
    from identifiable_cl import rundir

    folder = Path(run_dir)
    if not rundir.is_run_dir(folder):
        raise ValueError(f"{str(folder)!r} is not a run directory (no {rundir.CONFIG} in it)")
    return rundir.read_metrics(folder)


def results(paths: str | Path | Sequence[str | Path], *, group_by: Sequence[str] | None = None,
            metrics: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """The table ``icl results PATHS`` prints, as records: per group of runs (by ``group_by``, default the
    parameters that vary), ``group`` (its parameter values), ``metrics`` (per metric: mean, std, n), ``n``,
    ``seeds``, ``failed`` and ``failed_runs``."""
    import json

    from identifiable_cl.aggregate import grouped, refuse_unknown_metrics, table

    paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
    runs, keys, groups = grouped(paths, group_by)
    refuse_unknown_metrics(metrics, runs)
    return json.loads(table(runs, keys, groups, metrics=metrics, fmt="json"))
