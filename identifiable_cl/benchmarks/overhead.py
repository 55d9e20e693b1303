"""Where a short run's wall time goes: ``python -m identifiable_cl.benchmarks.overhead RUN_DIR [ICL_TRAIN_ARGS ...]``.

Runs ``icl train --run-dir RUN_DIR --quiet ICL_TRAIN_ARGS`` in this fresh process and prints, as one JSON
object on the last line, the seconds of each part: ``imports`` (the command line's modules, torch included),
``build`` (process, encoder, loss and the optimizer, whose first use imports torch's compiler
package), ``identity`` (the identity baseline g(z)), ``steps`` (the training steps), ``evaluation`` (held-out
evaluations, the final one included), ``figures``, ``wandb`` (W&B's start and finish; 0 when disabled) and
``rest`` (what the run does besides: files, checks, the summary table), with ``total`` the sum, and
``first_step`` (from this process's start to the end of the first training step: what a person waits for before
a run trains). Each part is timed around the one function of :mod:`identifiable_cl.training` that does it. The
interpreter's own start is not included; ``started_at``, the epoch second at which this module began, lets the
process that spawned it add the start (``icl bench --only overhead``).
"""

from __future__ import annotations

import time

STARTED_AT = time.time()
"""When this process reached its first line of Python (the epoch second), for the spawner's start latency."""

import json  # noqa: E402
import sys  # noqa: E402
from collections import defaultdict
from typing import Any, Callable

PARTS = ("imports", "build", "identity", "steps", "evaluation", "figures", "wandb", "rest")


def _timed(parts: dict[str, float], part: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            parts[part] += time.perf_counter() - started

    return timed


def main(argv: list[str]) -> int:
    started = time.perf_counter()
    from identifiable_cl import protocol, training
    from identifiable_cl.cli import main as icl

    parts: dict[str, float] = defaultdict(float)
    parts["imports"] = time.perf_counter() - started
    opened = training.open_tracker

    def open_tracker(*args: Any, **kwargs: Any) -> Any:
        tracker = _timed(parts, "wandb", opened)(*args, **kwargs)
        tracker.finish = _timed(parts, "wandb", tracker.finish)
        return tracker

    timed = {(owner, name): _timed(parts, part, getattr(owner, name)) for owner, name, part in (
        (training, "assemble", "build"), (training, "shared_identity", "identity"), (protocol, "evaluate", "evaluation"),
        (training, "draw_figures_if_possible", "figures"), (training.PackStepper, "step", "steps"))}
    timed[training, "open_tracker"] = open_tracker
    stepped = timed[training.PackStepper, "step"]

    def first_step(*args: Any, **kwargs: Any) -> Any:
        out = stepped(*args, **kwargs)
        parts.setdefault("first_step", time.perf_counter() - started)
        return out

    timed[training.PackStepper, "step"] = first_step
    originals = {(owner, name): getattr(owner, name) for owner, name in timed}
    try:
        for (owner, name), fn in timed.items():
            setattr(owner, name, fn)
        code = icl(["train", "--quiet", "--run-dir", *argv])
    finally:
        for (owner, name), fn in originals.items():
            setattr(owner, name, fn)
    total = time.perf_counter() - started
    parts["rest"] = total - sum(parts[p] for p in PARTS if p != "rest")
    print(json.dumps({**{p: round(parts[p], 4) for p in PARTS}, "total": round(total, 4),
                      "first_step": round(parts.get("first_step", total), 4), "started_at": STARTED_AT,
                      "exit_code": code}))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
