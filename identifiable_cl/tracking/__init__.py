"""Where a run reports besides its own files.

The run directory is the source of truth (``metrics.jsonl``, ``summary.json``);
a :class:`Tracker` mirrors the same records elsewhere, e.g. to Weights & Biases.
The trainer calls, in order: ``log`` for each metrics record, ``log_figures``
after figures are drawn, ``finish`` with the summary (or with ``None`` when
the run failed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping


class Tracker:
    """A tracker that records nothing (the base of all trackers)."""

    def log(self, step: int, record: Mapping[str, Any]) -> None:
        """One record of ``metrics.jsonl`` at training step ``step``."""

    def log_figures(self, step: int, figures: Mapping[str, Path]) -> None:
        """PNG files written into the run directory, by name."""

    def finish(self, summary: Mapping[str, Any] | None) -> None:
        """The final summary, or None when the run stopped with an error."""


def check_tracking(config: Mapping[str, Any]) -> None:
    """A ValueError for tracking settings that would fail once the run has started (an unknown W&B mode in
    ``wandb.mode`` or ``WANDB_MODE``), checked before a run writes anything."""
    from identifiable_cl.tracking.wandb import resolve_mode

    resolve_mode((config.get("wandb") or {}).get("mode"))


def open_tracker(config: Mapping[str, Any], run_dir: Path, shared: bool = False, run_id: str | None = None,
                 name: str | None = None, resumed_at: int | None = None) -> Tracker:
    """The W&B tracker when the ``wandb`` extra is installed and not disabled, else a silent one.

    ``shared``: one of several runs trained side by side in this process (packed runs), named ``name`` when
    given; ``run_id``: the run's W&B run id, continued from step ``resumed_at`` (None: a new run).
    """
    from identifiable_cl.tracking.wandb import open_wandb

    return open_wandb(config, run_dir, shared, run_id, name, resumed_at) or Tracker()
