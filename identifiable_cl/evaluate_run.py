"""Re-evaluating a saved run from its own files: the saved process (never re-drawn) and checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dgp
from identifiable_cl import rundir
from identifiable_cl.training import Components, Trainer, build, evaluation, restore


def load_run(run_dir: Path) -> Components:
    """The run's components at its last checkpoint, with the process loaded from ``dgp.pt``."""
    run_dir = Path(run_dir)
    if not rundir.is_run_dir(run_dir) or not (run_dir / rundir.CHECKPOINT).exists():
        raise ValueError(f"{str(run_dir)!r} is not a run directory with a checkpoint")
    config = rundir.read_config(run_dir)
    process = dgp.load_process(rundir.load_torch(run_dir / rundir.DGP))
    c = build(config, process=process)
    restore(c, rundir.load_torch(run_dir / rundir.CHECKPOINT))
    return c


def evaluate_run(run_dir: Path) -> dict[str, Any]:
    """Final-size held-out metrics of the saved encoder, beside the identity baseline; written to ``evaluation.json``."""
    c = load_run(run_dir)
    trainer = Trainer(c, Path(run_dir), progress=False)
    c.extra.setdefault("wall_s", 0.0)
    c.extra.setdefault("steps_timed", 0)
    result = trainer.summarize(evaluation(c, final=True), trainer.identity())
    rundir.write_json(Path(run_dir) / "evaluation.json", result)
    return result
