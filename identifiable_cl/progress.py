"""A run's progress on the terminal: a tqdm bar where the terminal reports a width, else one line per log or
evaluation step (``step 1500/3000  loss 1.2345  r2 0.912  mcc 0.934  41.2 steps/s  eta 36 s``)."""

from __future__ import annotations

import math
import os
import sys
import time
from typing import Any, Mapping

from tqdm import tqdm


def format_seconds(seconds: float) -> str:
    """``36 s``, ``4 min 05 s``, ``2 h 07 min``."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def progress_line(step: int, steps: int, loss: float, metrics: Mapping[str, Any] | None = None,
                  rate: float | None = None) -> str:
    """One line of progress for output that is not a terminal, e.g.
    ``step 1500/3000  loss 1.2345  r2 0.912  mcc 0.934  41.2 steps/s  eta 36 s``.

    ``metrics``: the latest evaluation (its linear R² and Pearson MCC are shown when given);
    ``rate``: steps per second since the start (or resumption), from which the ETA follows.
    """
    width = len(str(steps))
    parts = [f"step {step:>{width}}/{steps}", f"loss {loss:.4f}"]
    if metrics:
        if "r2_linear" in metrics:
            parts.append(f"r2 {metrics['r2_linear']:.3f}")
        if "mcc_pearson" in metrics:
            parts.append(f"mcc {metrics['mcc_pearson']:.3f}")
    if rate is not None and math.isfinite(rate) and rate > 0:
        parts += [f"{rate:.1f} steps/s", f"eta {format_seconds((steps - step) / rate)}"]
    return "  ".join(parts)


def bar_fits(stream: Any) -> bool:
    """Whether ``stream`` is a terminal that reports a width, as a progress bar needs."""
    try:
        return stream.isatty() and os.get_terminal_size(stream.fileno()).columns > 0
    except (AttributeError, OSError, ValueError):
        return False


class Progress:
    """A run's progress since it began or resumed: the step it started from, when, and the latest
    evaluation; and its display. ``mode``: True, a tqdm bar; None, the bar on a terminal that reports a
    width (:func:`bar_fits`), else one :func:`progress_line` on stdout at every log and evaluation step;
    False, neither."""

    def __init__(self, mode: bool | None, steps: int, step: int):
        self.steps, self.start_step, self.started = steps, step, time.perf_counter()
        self.latest: Mapping[str, Any] = {}
        self.lines = mode is None and not bar_fits(sys.stderr)
        self.bar = tqdm(total=steps, initial=step, disable=mode is False or self.lines, dynamic_ncols=True, desc="train")

    def show(self, step: int, loss: float, metrics: Mapping[str, Any] | None, line: bool) -> None:
        """The loss of a logged step and, at an evaluation, its ``metrics`` (a line only when ``line``)."""
        postfix = {"loss": f"{loss:.4f}"}
        if metrics is not None:
            self.latest = metrics
            postfix.update(r2=f"{metrics['r2_linear']:.3f}", mcc=f"{metrics['mcc_pearson']:.3f}")
        self.bar.set_postfix(refresh=False, **postfix)
        if self.lines and line:
            rate = (step - self.start_step) / max(time.perf_counter() - self.started, 1e-9)
            print(progress_line(step, self.steps, loss, self.latest, rate), flush=True)
