"""Reading files of tensors and plain containers without running code."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import torch


def load_tensors(path: Path) -> Any:
    """A file written with ``torch.save`` of tensors and plain containers, read with
    ``weights_only=True`` so that a crafted file cannot run code. Every failure is a ValueError
    naming the file."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise ValueError(
            f"{path}: refused, it holds objects other than tensors and plain containers, so loading it "
            "could run code; run files written by identifiable-cl never do"
        ) from exc
    except FileNotFoundError as exc:
        raise ValueError(f"{path}: missing") from exc
    except (RuntimeError, EOFError, OSError, ValueError) as exc:
        raise ValueError(f"{path}: truncated or not a torch file ({exc})") from exc
