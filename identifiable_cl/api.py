"""The Python API: everything a notebook needs, importable from the package top level.

::

    import identifiable_cl as icl

    config = icl.load_config("box", {"train.steps": 200})   # checked in full, like `icl train box`
    result = icl.train(config)                              # a run directory of its own, under runs/
    result.summary["mcc_pearson"], result.run_dir
    run = icl.load_run(result.run_dir)                      # its solver at the last checkpoint
    spec = icl.resolve(result.run_dir, {"train.steps": 400}, "resume")  # every spec's one maker
    icl.evaluate_run(result.run_dir, {"eval.final_n_fit": 4096})  # also written to its evaluation.json
    icl.history(result.run_dir)                              # its metrics.jsonl as records, step by step
    icl.results(["runs/sweeps/z21"], group_by=["loss.tau"])  # `icl results` as records: one per group
    icl.results(["runs/sweeps/z21"], as_frame=True)          # ... as a pandas DataFrame (history too)

    process = icl.build_process({"space": "sphere", "conditional": {"name": "vmf", "kappa": 5.0}})
    batch = process.sample(1024, process.make_generator(0))  # batch.z, batch.x, batch.z_pos, batch.x_pos
    process.save("process.pt"); icl.load_process("process.pt")

Every function checks its input and raises a ``ValueError`` naming the key, value or file.
"""

from __future__ import annotations

import sys
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
    out: str | Path = "runs",
    progress: bool | None = None,
) -> TrainedRun:
    """Train one run, as ``icl train`` does, and return it.

    ``config``: None (the default experiment), a YAML file or preset name, or a mapping (a config
    from :func:`load_config`, or any part of one, nested or as dotted keys) read over the defaults;
    ``overrides`` (``{"loss.tau": 0.1}`` or ``["--loss.tau=0.1"]``) come last. The run writes its run directory,
    ``run_dir``, or a new folder under ``out`` named as ``icl train --out`` names it (its path is
    ``result.run_dir``), and logs to W&B as ``icl train`` does (``wandb.mode``, or ``WANDB_MODE``: ``disabled``
    turns it off). ``progress``: True, a progress bar; False, quiet; None (the default), what ``icl train``
    shows where a person watches (a terminal or a notebook: :func:`watched`), else quiet.
    """
    spec = resolve(config, overrides)
    shown = progress if progress is not None else (None if watched() else False)
    if run_dir is not None:
        trainer = Trainer.from_spec(spec, Path(run_dir), progress=shown)
    else:
        from identifiable_cl.rundir import new_run_dirs

        if not isinstance(out, (str, Path)) or Path(out).exists() and not Path(out).is_dir():
            raise ValueError(f"out={str(out)!r} is invalid: give the folder new runs are made in (a new or existing "
                             "folder)")
        with new_run_dirs(Path(out).absolute(), [spec]) as (folder,):
            trainer = Trainer.from_spec(spec, folder, progress=shown)
    return TrainedRun(trainer.run_dir, trainer.run(), trainer.c)


def watched() -> bool:
    """Whether a person watches this process's output: standard output is a terminal, or an IPython kernel
    (a Jupyter notebook) runs it."""
    return sys.stdout.isatty() or "ipykernel" in sys.modules


__all__ = list(API)


def history(run_dir: str | Path, *, as_frame: bool = False) -> Any:
    """A run's ``metrics.jsonl`` as records, step by step (``{"step": 100, "loss": 2.9, ...}``; the periodic
    evaluations' metrics on their own steps), or with ``as_frame`` a pandas DataFrame of them (one row per
    record); a ValueError naming the folder when no run is there."""
    from identifiable_cl import rundir

    folder = Path(run_dir)
    if not rundir.is_run_dir(folder):
        raise ValueError(f"{str(folder)!r} is not a run directory (no {rundir.CONFIG} in it)")
    records = rundir.read_metrics(folder)
    return _frame(records) if as_frame else records


def results(paths: str | Path | Sequence[str | Path], *, group_by: Sequence[str] | None = None,
            metrics: Sequence[str] | None = None, as_frame: bool = False) -> Any:
    """The table ``icl results PATHS`` prints, as records: per group of runs (by ``group_by``, default the
    parameters that vary), ``group`` (its parameter values), ``metrics`` (per metric: mean, std, n), ``n``,
    ``seeds``, ``failed`` and ``failed_runs``. With ``as_frame``, a pandas DataFrame with one row per group: a
    column per grouping parameter, per metric ``<metric>`` (the mean), ``<metric>_std`` and ``<metric>_n``, then
    ``n`` and ``failed``."""
    import json

    from identifiable_cl.aggregate import grouped, refuse_unknown_metrics, table

    paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
    runs, keys, groups = grouped(paths, group_by)
    refuse_unknown_metrics(metrics, runs)
    records = json.loads(table(runs, keys, groups, metrics=metrics, fmt="json"))
    if not as_frame:
        return records
    return _frame([{**row["group"], **{f"{name}{suffix}": held[field] for name, held in row["metrics"].items()
                                       for suffix, field in (("", "mean"), ("_std", "std"), ("_n", "n"))},
                    "n": row["n"], "failed": row["failed"]} for row in records])


def _frame(records: list[dict[str, Any]]) -> Any:
    """``records`` as a pandas DataFrame; a ValueError saying how to install pandas where it is missing."""
    try:
        import pandas
    except ImportError:
        raise ValueError("as_frame=True needs pandas, which is not installed: pip install 'identifiable-cl[frames]' "
                         "(or pandas), or leave as_frame out for the records") from None
    return pandas.DataFrame.from_records(records)
