"""The trainer: fresh batches from the DGP, encoder, loss, Adam; periodic held-out evaluation.

A run is data flowing one way: config → process (built once, seeded) → batches
→ encoder → loss → optimizer; at evaluation: fresh held-out z → h = f(g(z)) →
metrics. Everything is built and checked before the run directory is created,
so invalid input leaves nothing on disk.

Random streams, all derived from ``config["seed"]`` by name: ``dgp.*`` (the
process's parameters), ``model`` (initial weights), ``loss`` (the loss's own
random parameters, e.g. AnInfoNCE's initial Λ̂), ``train.batches`` (the
training batches) and ``eval.<step>`` (the held-out sample of each evaluation,
so evaluation never disturbs training and a resumed run evaluates exactly as an
uninterrupted one).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import math
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch
from torch import Tensor, nn
from tqdm import tqdm

from dgp.seeding import stream_seed
from identifiable_cl import __version__, linear, rundir
from identifiable_cl.components import build, load_run
from identifiable_cl.evaluation import evaluate, identity_baseline, lambda_recovery, linear_readout
from identifiable_cl.evaluation.information import truth as information_truth
from identifiable_cl.evaluation.views import evaluate_views
from identifiable_cl.solvers import Solver
from identifiable_cl.solvers.packed import PackStepper, check_packable
from identifiable_cl.tracking import Tracker, check_tracking, open_tracker


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
before it (start-up, checks, building the process, the identity baseline) a stop signal ends the run at once."""


def eval_arguments(e: Mapping[str, Any], final: bool) -> dict[str, Any]:
    """The sample sizes and options of an evaluation from the config's ``eval`` section (the final
    evaluation and the identity baseline use the ``final_*`` sizes; ``enabled``: every boolean ``eval.*`` key,
    which switch metrics of the catalog on)."""
    prefix = "final_" if final else ""
    return {
        "n_fit": e[prefix + "n_fit"], "n_test": e[prefix + "n_test"], "n_centres": e[prefix + "n_centres"],
        "nonlinear": e["nonlinear"], "in_sample": e["in_sample"],
        "enabled": {f"eval.{k}": v for k, v in e.items() if isinstance(v, bool)},
    }


MATCHING = "mcc_matching"
"""The MCC's matching of latents to dimensions: used for Λ recovery, not reported."""


def reported(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """The metrics as logged and summarised: without the MCC matchings (:data:`MATCHING`)."""
    return {k: v for k, v in metrics.items() if not k.endswith(MATCHING)}


def evaluation(c: Solver, final: bool) -> dict[str, Any]:
    """Held-out metrics at the current step (the final evaluation uses the larger sample sizes)."""
    generator = c.process.make_generator(stream_seed(c.config["seed"], f"eval.{c.steps_done}"))
    if c.process.view_count > 1:
        encoders = [lambda x, v=v: c.encode(x, v) for v in range(c.process.view_count)]
        metrics = evaluate_views(encoders, c.process, generator, control=final,
                                 **eval_arguments(c.config["eval"], final), rotation_reference=final)
    else:
        metrics = evaluate(c.encode, c.process, generator, **eval_arguments(c.config["eval"], final),
                           rotation_reference=final)
    if final:
        metrics.update(in_sample_metrics(c.encode, c, f"eval.{c.steps_done}.in_sample"))
    metrics.update(loss_metrics(c, metrics))
    if c.config["eval"]["mi"]:
        metrics.update(information_metrics(c))
    return metrics


_TRUTHS: dict[tuple[str, int, int], dict[str, Any]] = {}


def information_metrics(c: Solver) -> dict[str, Any]:
    """The mutual-information keys (:mod:`identifiable_cl.evaluation.information`) of a run whose loss bounds
    I(z; z+) (``mi_bound``, with negatives from the batch, drawn from p(z) or queued): the encoder's bound
    log K - L on a held-out batch of the training size, and the process's own keys at that K, measured once
    per process, K and seed (they do not depend on the encoder). With MoCo's queue the queued keys are those of
    fresh held-out pairs under the current momentum encoder, a full queue's worth: every candidate is scored
    by the same critic, as the bound requires (:meth:`identifiable_cl.solvers.Solver.mi_negatives`)."""
    mi_bound = getattr(c.loss, "mi_bound", None)
    if mi_bound is None or c.process.view_count > 1:
        return {}  # with views the loss pairs observations of different mixings: no bound on I(z; z+) is read
    generator = c.process.make_generator(stream_seed(c.config["seed"], f"eval.{c.steps_done}.mi"))
    batch = c.process.sample(c.config["train"]["batch_size"], generator)
    if batch.z_neg is not None and not c.process.negatives.from_marginal():
        return {}  # the bound needs negatives drawn from p(z)
    with torch.no_grad():
        h, h_pos, h_neg = c.encodings(batch)
        h_neg = c.mi_negatives(h_neg, generator)
        value = float(c.loss(h, h_pos, h_neg))
    bound = mi_bound(value, batch.z.shape[0], None if h_neg is None else h_neg.shape[-2])
    if bound is None:
        return {}
    k, encoder_bound = bound
    key = (c.process.fingerprint(), k, c.config["seed"])
    if key not in _TRUTHS:
        _TRUTHS[key] = information_truth(c.process, k, c.process.make_generator(stream_seed(c.config["seed"], "eval.mi")))
    return {**_TRUTHS[key], "mi_infonce_bound": encoder_bound}


def in_sample_metrics(encode: Callable[[Tensor], Tensor], c: Solver, stream: str) -> dict[str, float]:
    """The scalar linear metrics (R², MCCs, block R²) fitted and scored on the same ``eval.in_sample_n``
    fresh samples of the random stream ``stream``, as the reference codes log them; keys get the suffix
    ``_in_sample``. None of them when ``eval.in_sample_n`` is null."""
    n = c.config["eval"]["in_sample_n"]
    if n is None:
        return {}
    generator = c.process.make_generator(stream_seed(c.config["seed"], stream))
    scored = evaluate(encode, c.process, generator, n_fit=n, n_test=2, nonlinear=False, in_sample=True,
                      rotation_reference=False)
    return {f"{k}_in_sample": v for k, v in scored.items() if isinstance(v, float)}


def loss_metrics(c: Solver, metrics: Mapping[str, Any]) -> dict[str, Any]:
    """The loss's own logs (τ, Λ̂ ...) and, when the loss learns a Λ̂ (its ``lambda_hat`` log) and the
    process has a true Λ, both as ``lambda_learned`` / ``lambda_true`` and Λ recovery against the truth."""
    out: dict[str, Any] = dict(c.loss.logs()) if hasattr(c.loss, "logs") else {}
    learned, truth = out.get("lambda_hat"), c.process.lambda_true
    if learned is not None:
        out["lambda_learned"] = learned
    if truth is not None:
        out["lambda_true"] = truth.cpu().tolist()
        if learned is not None and MATCHING in metrics and len(learned) == len(out["lambda_true"]):
            rec = lambda_recovery(learned, truth.cpu(), metrics[MATCHING])
            out.update({f"lambda_{k}": v for k, v in rec.items()})
    return out


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


def draw_figures_if_possible(run_dir: Path) -> dict[str, Path]:
    """The run's figures as PNG files, or none when matplotlib (the ``plots`` extra) is missing."""
    from identifiable_cl.plots import draw_figures

    try:
        return draw_figures(run_dir)
    except ModuleNotFoundError:
        return {}


_IDENTITIES: dict[str, dict[str, Any]] = {}


def identity_key(c: Solver) -> str:
    """A hash of what the identity baseline depends on: the process, the root seed (its random stream), the
    final evaluation's settings, the device type and the version."""
    e = c.config["eval"]
    what = {"process": c.process.fingerprint(), "seed": c.config["seed"], "eval": eval_arguments(e, final=True),
            "in_sample_n": e["in_sample_n"], "device": c.device.type, "version": __version__}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:32]


def measure_identity(c: Solver) -> dict[str, Any]:
    """The metrics of the identity encoder h = g(z) (the observations themselves) at the final evaluation's
    sizes, and its in-sample scores as ``identity_*_in_sample``; with views, each view's observations."""
    generator = c.process.make_generator(stream_seed(c.config["seed"], "eval.identity"))
    arguments = {**eval_arguments(c.config["eval"], final=True), "rotation_reference": False}
    if c.process.view_count > 1:  # every view's observations, scored as the encoders' (evaluate_views)
        views = evaluate_views([lambda x: x] * c.process.view_count, c.process, generator, **arguments)
        base = {f"identity_{k}": v for k, v in views.items()}
    else:
        base = identity_baseline(c.process, generator, **arguments)
    scored = in_sample_metrics(lambda x: x, c, "eval.identity.in_sample")
    base.update({f"identity_{k}": v for k, v in scored.items()})
    return reported(base)


def identity_cache() -> Path | None:
    """The folder :data:`identifiable_cl.rundir.IDENTITY_CACHE` names, or None; one that names something other
    than a folder is an error naming it (checked before a run writes anything)."""
    folder = os.environ.get(rundir.IDENTITY_CACHE)
    if folder and Path(folder).exists() and not Path(folder).is_dir():
        raise ValueError(f"{rundir.IDENTITY_CACHE}={folder!r} is not a folder: name a folder where runs share their "
                         "identity baselines, or unset it")
    return Path(folder) if folder else None


def check_before_writing(c: Solver) -> None:
    """What can fail before training and is checked before a run's folder changes: its tracking and the
    identity baselines' cache."""
    check_tracking(c.config)
    identity_cache()


def shared_identity(c: Solver) -> dict[str, Any]:
    """:func:`measure_identity`, measured once per :func:`identity_key` in this process and, with
    :data:`identifiable_cl.rundir.IDENTITY_CACHE` set, once for every run that shares that folder (a damaged
    file is measured again)."""
    key = identity_key(c)
    if key not in _IDENTITIES:
        folder = identity_cache()
        path = folder / f"identity-{key}.json" if folder else None
        try:
            found = rundir.read_json(path, missing_ok=True) if path else None
        except (ValueError, OSError):
            found = None
        if found is None:
            found = measure_identity(c)
            if path is not None:
                try:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    rundir.write_json(path, found)
                except OSError:
                    pass  # a cache that cannot be written is not shared; the run has its baseline
        _IDENTITIES[key] = found
    return copy.deepcopy(_IDENTITIES[key])


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


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Within the block :data:`STOP_SIGNALS` wait (they arrive as the block ends), so that a run folder's files
    are written together or not at all."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def _owned_after(run_dir: Path, write: Callable[[], None]) -> int:
    """Take the run directory's lock (:func:`identifiable_cl.rundir.own`), then ``write()`` its files; the lock,
    released again when the writing fails."""
    lock = rundir.own(run_dir)
    try:
        with signals_held():
            write()
    except BaseException:
        rundir.unlock(lock)
        raise
    return lock


class Trainer:
    """One run's directory, evaluations, checkpoints and summary; ``run()`` trains it and returns the summary."""

    def __init__(self, c: Solver, run_dir: Path, progress: bool | None = None, lock: int | None = None):
        self.c, self.run_dir, self.progress, self.lock = c, Path(run_dir), progress, lock
        """``lock``: this process's hold on the run directory (:func:`identifiable_cl.rundir.own`), released by
        :meth:`close`."""
        self.tracker: Tracker = Tracker()
        self.wandb_id: str | None = None
        """The W&B run id of a packed run (alone, ``WANDB_RUN_ID`` or W&B chooses)."""
        self.wandb_name: str | None = None
        """The W&B run name of a packed run (alone, ``WANDB_NAME``, ``wandb.name`` or the folder's name)."""
        self.checkpoint_step: int | None = c.steps_done if (self.run_dir / rundir.CHECKPOINT).exists() else None

    @classmethod
    def create(cls, config: Mapping[str, Any], run_dir: Path, progress: bool | None = None,
               components: Solver | None = None) -> "Trainer":
        """A new run: everything is built first (or given, as built from ``config``), then the directory is written."""
        c = build(config) if components is None else components
        check_before_writing(c)
        run_dir = Path(run_dir)
        if run_dir.exists() and any(run_dir.iterdir()):
            raise ValueError(f"run directory {str(run_dir)!r} exists and is not empty; use --resume to continue it")
        run_dir.mkdir(parents=True, exist_ok=True)

        def write() -> None:
            rundir.write_config(run_dir, c.config)
            rundir.write_json(run_dir / rundir.META, rundir.meta(c.device, linear.resolve(c.config["train"]["matmul"])))
            rundir.save_torch(run_dir / rundir.DGP, c.process.to_dict())

        return cls(c, run_dir, progress=progress, lock=_owned_after(run_dir, write))

    @classmethod
    def resume(cls, run_dir: Path, overrides: Mapping[str, Any] | None = None, progress: bool | None = None) -> "Trainer":
        """Continue a saved run exactly where its last checkpoint left it.

        Only ``train.*``, ``eval.*``, ``device`` and ``wandb.*`` may be overridden. Everything is
        loaded and checked (:func:`identifiable_cl.components.load_run`) before the run
        directory changes: then the metrics after the checkpoint, the summary and stale
        temporary files are removed and the config is rewritten.
        """
        run_dir = Path(run_dir)
        c = load_run(run_dir, overrides, need_checkpoint=False)
        check_before_writing(c)

        def write() -> None:
            rundir.remove_stale_temporaries(run_dir)
            rundir.truncate_metrics(run_dir, c.steps_done)
            rundir.write_config(run_dir, c.config)
            for name in (rundir.SUMMARY, rundir.STOPPED):
                (run_dir / name).unlink(missing_ok=True)

        return cls(c, run_dir, progress=progress, lock=_owned_after(run_dir, write))

    def save_checkpoint(self, pending: bool = False) -> None:
        """Checkpoint the step reached; ``pending``: between two log steps, with the loss accumulated since
        the last one (restored by :meth:`begin`, so the resumed run logs what the uninterrupted one would)."""
        if pending:
            self.c.extra["pending"] = {"loss_sum": float(self._running), "count": self._count,
                                       "finite": bool(self._finite)}
        try:
            rundir.save_torch(self.run_dir / rundir.CHECKPOINT, self.c.state_dict())
        finally:
            self.c.extra.pop("pending", None)
        self.checkpoint_step = self.c.steps_done

    def record(self, record: dict[str, Any]) -> None:
        rundir.append_metrics(self.run_dir, [record])
        self.tracker.log(record["step"], record)

    def run(self) -> dict[str, Any]:
        """Train to ``train.steps`` (a pack of one, :func:`run_packed`); the summary, or the error that stopped it."""
        result = run_packed([self], shared=False)[0]
        if isinstance(result, BaseException):
            raise result
        return result

    def interrupted_message(self) -> str:
        """What an interruption kept, and the command that continues the run."""
        return f"interrupted at step {self.c.steps_done} of {self.c.config['train']['steps']}; {self.kept()}"

    def kept(self) -> str:
        """What a run that stops now keeps, and the command that continues it."""
        kept = (f"the checkpoint of step {self.checkpoint_step} is kept" if self.checkpoint_step is not None
                else "no checkpoint was written yet")
        return f"{kept} in {self.run_dir}; continue with: icl train --resume {self.run_dir}"

    def open(self, shared: bool = False) -> None:
        """Start the tracker (W&B) of this run (``shared``: beside other runs of this process)."""
        self.tracker = open_tracker(self.c.config, self.run_dir, shared, self.wandb_id if shared else None,
                                    self.wandb_name if shared else None)

    def close(self, summary: dict[str, Any] | None) -> None:
        """Log the figures of a finished run (``train.figures``) and finish its tracker (``None``: the run failed)."""
        try:
            if summary is not None and self.c.config["train"]["figures"]:
                self.tracker.log_figures(self.c.steps_done, draw_figures_if_possible(self.run_dir))
            self.tracker.finish(summary)
        finally:
            if self.lock is not None:
                rundir.unlock(self.lock)
                self.lock = None

    def identity(self) -> dict[str, Any]:
        """The identity baseline g(z) at the final evaluation's sizes (measured once, kept in the checkpoint)."""
        if "identity" not in self.c.extra:
            self.c.extra["identity"] = shared_identity(self.c)
        return self.c.extra["identity"]

    @property
    def done(self) -> bool:
        return self.c.steps_done >= self.c.config["train"]["steps"]

    def begin(self) -> None:
        """Before the first step: the identity baseline, the initial checkpoint, the progress display."""
        c = self.c
        self._identity = self.identity()
        if c.steps_done == 0:
            self.save_checkpoint()
        self._progress = Progress(self.progress, c.config["train"]["steps"], c.steps_done)
        pending = c.extra.pop("pending", {"loss_sum": 0.0, "count": 0, "finite": True})
        self._running = torch.tensor(pending["loss_sum"], device=c.device, dtype=torch.float64)
        self._finite = torch.tensor(pending["finite"], device=c.device)
        self._count = pending["count"]

    def after_step(self, loss: Tensor) -> None:
        """Account for one step's loss: log, evaluate and checkpoint at their cadence."""
        c, t = self.c, self.c.config["train"]
        self._running += loss
        limit = t["loss_limit"]
        self._finite &= torch.isfinite(loss) if limit is None else loss.abs() <= limit  # NaN fails both
        self._count += 1
        log_now = c.steps_done % t["log_every"] == 0
        eval_now = c.steps_done % t["eval_every"] == 0 or c.steps_done == t["steps"]
        ckpt_now = c.steps_done % t["checkpoint_every"] == 0 or c.steps_done == t["steps"]
        if log_now or eval_now or ckpt_now:
            if not bool(self._finite):
                self._progress.bar.close()
                self.stop(c.steps_done - self._count + 1)
            record: dict[str, Any] = {"step": c.steps_done, "loss": self._running.item() / self._count}
            short = c.process.shortfalls()
            if short:  # rows the block samplers drew from their proposal law instead (dgp.blocks); never expected
                record["sampler_shortfalls"] = short
            self._running.zero_()
            self._count = 0
            metrics = evaluation(c, final=c.steps_done == t["steps"]) if eval_now else None
            if metrics is not None:
                record.update(reported(metrics))
            self.record(record)
            self._progress.show(c.steps_done, record["loss"], metrics, log_now or eval_now)
            if ckpt_now:
                self.save_checkpoint()
        self._progress.bar.update(1)

    def stop(self, first: int) -> None:
        """The loss diverged between step ``first`` and now: record it in ``stopped.json``, raise NonFiniteLoss."""
        c, limit = self.c, self.c.config["train"]["loss_limit"]
        what = "NaN or inf" if limit is None else f"NaN, inf or larger in magnitude than train.loss_limit={limit:g}"
        reason = f"the loss became {what} between steps {first} and {c.steps_done}"
        rundir.write_json(self.run_dir / rundir.STOPPED, {
            "reason": reason, "first_step": first, "last_step": c.steps_done, "checkpoint_step": self.checkpoint_step,
        })
        raise NonFiniteLoss(
            f"{reason}; stopped. The last good checkpoint (step {self.checkpoint_step}) in {self.run_dir} is kept "
            "(try a lower optim.lr or optim.grad_clip)."
        )

    def end(self) -> dict[str, Any]:
        """After the last step: final checkpoint, summary, readout; returns the summary."""
        c, progress = self.c, self._progress
        progress.bar.close()
        wall = time.perf_counter() - progress.started
        latest = progress.latest or evaluation(c, final=True)  # a resumed finished run is evaluated once more
        c.extra["wall_s"] = c.extra.get("wall_s", 0.0) + wall
        c.extra["steps_timed"] = c.extra.get("steps_timed", 0) + (c.steps_done - progress.start_step)
        self.save_checkpoint()
        summary = self.summarize(latest, self._identity)
        self._readout()
        rundir.write_json(self.run_dir / rundir.SUMMARY, summary)
        return summary

    def summarize(self, metrics: Mapping[str, Any], identity: Mapping[str, Any]) -> dict[str, Any]:
        c, wall = self.c, self.c.extra["wall_s"]
        return {**reported(metrics), **identity, "steps": c.steps_done, "wall_s": wall,
                "steps_per_s": c.extra["steps_timed"] / wall if wall > 0 else math.nan, "seed": c.config["seed"],
                "dgp_fingerprint": c.process.fingerprint(), "version": __version__}

    def _readout(self) -> None:
        """Save true vs linearly read-out test latents (for the recovery scatter plots)."""
        generator = self.c.process.make_generator(stream_seed(self.c.config["seed"], "eval.readout"))
        z, z_hat, per_dim = linear_readout(self.c.encode, self.c.process, generator, n_fit=4096, n_test=2048)
        rundir.save_npz(self.run_dir / rundir.READOUT, z=z, z_hat=z_hat, r2_per_dim=per_dim)


def run_packed(trainers: Sequence[Trainer], batched: bool | None = None,
               shared: bool = True) -> list[dict[str, Any] | BaseException]:
    """Train ``trainers`` as one pack (``batched`` as in :class:`identifiable_cl.solvers.packed.PackStepper`): the
    one run loop, a single run being a pack of one. Per run its summary, or the error that stopped it (a loss that stops being
    finite ends its run only; the others go on). :data:`STOP` ends every run at the next step boundary with
    a checkpoint of that step, a KeyboardInterrupt at once with its last checkpoint, both as
    :class:`Interrupted`, its message saying what each kept. ``shared``: the runs' W&B runs share this
    process's service."""
    check_packable([t.c for t in trainers])
    results: dict[int, dict[str, Any] | BaseException] = {}
    active = list(range(len(trainers)))
    stepper = PackStepper(batched)
    try:
        for i in active:
            trainers[i].open(shared=shared)
            trainers[i].begin()
        LOOPING.set()
        while active:
            if STOP.is_set():
                for i in active:
                    trainers[i].save_checkpoint(pending=True)
                raise KeyboardInterrupt
            running = [i for i in active if not trainers[i].done]
            losses = stepper.step([trainers[i].c for i in running]) if running else []
            for i, loss in zip(running, losses):
                try:
                    trainers[i].after_step(loss)
                except NonFiniteLoss as exc:
                    trainers[i].close(None)
                    results[i] = exc
            for i in [i for i in active if i not in results and trainers[i].done]:
                summary = trainers[i].end()
                trainers[i].close(summary)
                results[i] = summary
            active = [i for i in active if i not in results]
    except BaseException as exc:
        LOOPING.clear()
        stopped = [i for i in active if i not in results]
        for i in stopped:
            trainers[i].close(None)
        if isinstance(exc, KeyboardInterrupt):
            raise Interrupted("; ".join(trainers[i].interrupted_message() for i in stopped)) from None
        if stopped:
            exc.add_note("; ".join(trainers[i].kept() for i in stopped))  # what each run keeps, for one-line errors
        raise
    finally:
        stepper.close()
    LOOPING.clear()
    return [results[i] for i in range(len(trainers))]


def evaluate_run(run_dir: Path, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Final-size held-out metrics of a saved run's encoder beside the identity baseline (nothing is written).

    ``overrides`` (``{"eval.final_n_fit": 4096, ...}``) may change the ``eval.*`` keys only: how the
    run is measured, never what was trained.
    """
    c = load_run(run_dir, overrides, mode="evaluate")
    if overrides:
        c.extra.pop("identity", None)  # the saved baseline was measured with the run's own eval settings
    trainer = Trainer(c, Path(run_dir), progress=False)
    c.extra.setdefault("wall_s", 0.0)
    c.extra.setdefault("steps_timed", 0)
    return trainer.summarize(evaluation(c, final=True), trainer.identity())
