"""How a run stops: a diverged loss (:class:`NonFiniteLoss`), and a stop signal (:data:`STOP_SIGNALS`), which
ends the run at the next step boundary with a checkpoint of that step (:data:`STOP`) or, outside the steps and
during an evaluation, at once with its last checkpoint (:data:`LOOPING`); both signal stops end as
:class:`Interrupted`. A run folder's first files are written with the signals held (:func:`signals_held`)."""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator


class NonFiniteLoss(RuntimeError):
    """The loss became NaN or inf, or exceeded ``train.loss_limit``; the last good checkpoint is kept."""


class Interrupted(Exception):
    """Ctrl-C (or SIGINT) during a run: its message says what was kept and how to continue."""


STOP = threading.Event()
"""Set to stop training at the next step boundary: every run of the pack then checkpoints the step it
has reached and ends as :class:`Interrupted` (``icl train`` sets it on SIGINT, SIGTERM and SIGUSR2, the
signals of Ctrl-C, a scheduler's cancel and its time-limit or preemption warning)."""
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR2)
"""Signals that end ``icl train`` as interrupted: Ctrl-C, a sweep runner's early stop (SIGINT), the
SIGTERM a scheduler sends when it cancels or preempts a job, and the SIGUSR2 submitit asks Slurm to
send before a job's time limit."""
LOOPING = threading.Event()
"""Set while the run loop takes its steps: a stop signal then waits for the next step boundary (:data:`STOP`);
before it (start-up, checks, building the process, the identity baseline) and during an evaluation
(:func:`evaluating`), which may take minutes, a stop signal ends the run at once, its last checkpoint kept."""


@contextlib.contextmanager
def evaluating() -> Iterator[None]:
    """Within the block (an evaluation) a stop signal ends the run at once rather than at the next step boundary."""
    looping = LOOPING.is_set()
    LOOPING.clear()
    try:
        yield
    finally:
        if looping:
            LOOPING.set()


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Within the block :data:`STOP_SIGNALS` wait (they arrive as the block ends), so that a run folder's files
    are written together or not at all."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


@contextlib.contextmanager
def stop_signals_interrupt() -> Iterator[None]:
    """Within the block SIGTERM and SIGUSR2 interrupt as Ctrl-C does (KeyboardInterrupt), so that what the block
    started is undone on the way out: a child of ``subprocess.run`` killed and waited for, a temporary folder
    removed (``icl bench``, whose measurements keep nothing worth a checkpoint). The previous handlers come back
    after it; off the main thread, where handlers cannot be set, nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGUSR2)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
