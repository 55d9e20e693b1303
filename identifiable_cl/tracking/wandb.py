"""Weights & Biases tracking (filled in by the tracking work)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping


def open_wandb(config: Mapping[str, Any], run_dir: Path):
    return None
