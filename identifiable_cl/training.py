"""The trainer: the one run loop (a run is a pack of one), its cadence of logs, evaluations and checkpoints, its
run folder's writes, exact resume and the stops (divergence, signals).

A run is data flowing one way: spec → process (built once, seeded) → batches → encoder → loss → optimizer (the
step: :mod:`identifiable_cl.solvers`); at evaluation (:mod:`identifiable_cl.protocol`): fresh held-out z →
h = f(g(z)) → metrics. Everything is built and checked before the run directory is created, so invalid input
leaves nothing on disk.

Random streams, all derived from ``config["seed"]`` by name: ``dgp.*`` (the process's parameters), ``model``
(initial weights), ``loss`` (the loss's own random parameters, e.g. AnInfoNCE's initial Λ̂), ``train.batches``
(the training batches) and ``eval.<step>`` (the held-out sample of each evaluation, so evaluation never disturbs
training and a resumed run evaluates exactly as an uninterrupted one).
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
from torch import Tensor

from dgp.process import allocation_failure
from dgp.seeding import stream_seed
from identifiable_cl import __version__, linear, rundir
from identifiable_cl.components import assemble, resolve
from dgp.checks import dotted
from identifiable_cl.evaluation import linear_readout
from identifiable_cl.losses.contract import traits
from identifiable_cl.plots import draw_figures_if_possible
from identifiable_cl.evaluation.catalog import metric_switch
from identifiable_cl.predictions import prediction_for, verdict
from identifiable_cl.progress import Progress
from identifiable_cl.protocol import Measured, check_before_writing, evaluation, reported, shared_identity
from identifiable_cl.solvers import Solver
from identifiable_cl.solvers.packed import PackStepper, check_packable
from identifiable_cl.spec import RunSpec, checked_spec
from identifiable_cl.stops import LOOPING, STOP, Interrupted, NonFiniteLoss, evaluating
from identifiable_cl.tracking import Tracker, open_tracker


class Trainer:
    """One run's directory, evaluations, checkpoints and summary; ``run()`` trains it and returns the summary."""

    def __init__(self, c: Solver, folder: rundir.RunFolder, progress: bool | None = None):
        self.c, self.folder, self.progress = c, folder, progress
        """``folder``: the writer of the run's folder, released by :meth:`close`."""
        self.tracker: Tracker = Tracker()
        self.wandb_id: str | None = (rundir.read_meta(folder.path) or {}).get("wandb_id")
        """The run's W&B run id, chosen when its folder was made (``meta.json``), which every resume continues."""
        self.wandb_name: str | None = None
        """The W&B run name of a packed run (alone, ``WANDB_NAME``, ``wandb.name`` or the folder's name)."""
        self.checkpoint_step: int | None = c.steps_done if (self.run_dir / rundir.CHECKPOINT).exists() else None
        self.measured = Measured()
        """The run's identity baseline and mutual-information truths, shared with its pack (:func:`run_packed`)."""

    @classmethod
    def from_spec(cls, spec: RunSpec, run_dir: Path | None = None, progress: bool | None = None,
                  components: Solver | None = None, wandb_id: str | None = None) -> "Trainer":
        """The run a spec (:func:`identifiable_cl.components.resolve`) describes, assembled (or given, as built from
        it) and checked before its folder changes: a new run writes ``run_dir``; a resumed one goes on from its last
        checkpoint (the metrics after it, the summary and stale temporary files removed, the config rewritten); an
        evaluated one only reads its folder. ``wandb_id``: a new run's W&B run id (a packed sweep run's; else
        ``WANDB_RUN_ID`` or a new one, :func:`identifiable_cl.rundir.wandb_id`), recorded in ``meta.json``."""
        spec = checked_spec(spec, "Trainer.from_spec")
        if spec.mode == "new" and run_dir is None:
            raise ValueError("Trainer.from_spec: a new run needs run_dir, the folder it is written to")
        c = assemble(spec) if components is None else components
        if spec.mode != "evaluate":
            check_before_writing(c)
        if spec.mode == "new":
            meta = rundir.meta(c.device, linear.resolve(c.config["train"]["matmul"]), wandb_id)
            folder = rundir.RunFolder.create(run_dir, c.config, meta, c.process.to_dict())
        elif spec.mode == "resume":
            folder = rundir.RunFolder.reopen(spec.run_dir, c.config, c.steps_done)
        else:
            folder = rundir.RunFolder(spec.run_dir)
        return cls(c, folder, progress=progress)

    @classmethod
    def create(cls, config: Mapping[str, Any], run_dir: Path, progress: bool | None = None,
               components: Solver | None = None) -> "Trainer":
        """A new run in ``run_dir`` from a config or any part of one, read over the defaults (:func:`from_spec`)."""
        return cls.from_spec(resolve(config), run_dir, progress, components)

    @classmethod
    def resume(cls, run_dir: Path, overrides: Mapping[str, Any] | None = None, progress: bool | None = None) -> "Trainer":
        """Continue a saved run exactly where its last checkpoint left it (:func:`from_spec`); only ``train.*``,
        ``eval.*``, ``device`` and ``wandb.*`` may be overridden."""
        return cls.from_spec(resolve(run_dir, overrides or {}, "resume"), progress=progress)

    @property
    def run_dir(self) -> Path:
        return self.folder.path

    def save_checkpoint(self, pending: bool = False) -> None:
        """Checkpoint the step reached; ``pending``: between two log steps, with the loss accumulated since
        the last one (restored by :meth:`begin`, so the resumed run logs what the uninterrupted one would)."""
        if pending:
            self.c.extra["pending"] = {"loss_sum": float(self._running), "count": self._count,
                                       "finite": bool(self._finite)}
        try:
            self.folder.checkpoint(self.c.state_dict())
        finally:
            self.c.extra.pop("pending", None)
        self.checkpoint_step = self.c.steps_done

    def record(self, record: dict[str, Any]) -> None:
        self.folder.append(record)
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
        """Start the tracker (W&B) of this run (``shared``: beside other runs of this process), continuing its own
        W&B run (:attr:`wandb_id`)."""
        self.tracker = open_tracker(self.c.config, self.run_dir, shared, self.wandb_id,
                                    self.wandb_name if shared else None, resumed_at=self.checkpoint_step)

    def close(self, summary: dict[str, Any] | None) -> None:
        """Log the figures of a finished run (``train.figures``) and finish its tracker (``None``: the run failed)."""
        try:
            if summary is not None and self.c.config["train"]["figures"]:
                self.tracker.log_figures(self.c.steps_done, draw_figures_if_possible(self.run_dir))
            self.tracker.finish(summary)
        finally:
            self.folder.release()

    def identity(self) -> dict[str, Any]:
        """The identity baseline g(z) at the final evaluation's sizes (measured once, kept in the checkpoint)."""
        if "identity" not in self.c.extra:
            self.c.extra["identity"] = shared_identity(self.c, self.measured)
        return self.c.extra["identity"]

    @property
    def done(self) -> bool:
        return self.c.steps_done >= self.c.config["train"]["steps"]

    def begin(self) -> None:
        """Before the first step: the initial checkpoint, the progress display (the identity baseline waits for the
        end, :meth:`end`: it draws from its own stream, so when it is measured changes none of its numbers)."""
        c = self.c
        if c.steps_done == 0:
            self.save_checkpoint()
        self._progress = Progress(self.progress, c.config["train"]["steps"], c.steps_done)
        pending = c.extra.pop("pending", {"loss_sum": 0.0, "count": 0, "finite": True})
        self._running = torch.tensor(pending["loss_sum"], device=c.device, dtype=torch.float64)
        self._finite = torch.tensor(pending["finite"], device=c.device)
        self._count = pending["count"]

    def account(self, loss: Tensor) -> None:
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
                self.diverged(c.steps_done - self._count + 1)
            record: dict[str, Any] = {"step": c.steps_done, "loss": self._running.item() / self._count}
            short = c.process.shortfalls()
            if short:  # rows the block samplers drew from their proposal law instead (dgp.blocks); never expected
                record["sampler_shortfalls"] = short
            self._running.zero_()
            self._count = 0
            with evaluating():
                metrics = evaluation(c, c.steps_done == t["steps"], self.measured) if eval_now else None
            if metrics is not None:
                record.update(reported(metrics))
            self.record(record)
            self._progress.show(c.steps_done, record["loss"], metrics, log_now or eval_now)
            if ckpt_now:
                self.save_checkpoint()
        self._progress.bar.update(1)

    def diverged(self, first: int) -> None:
        """The loss diverged between step ``first`` and now: record it in ``stopped.json``, raise NonFiniteLoss."""
        c, limit = self.c, self.c.config["train"]["loss_limit"]
        what = "NaN or inf" if limit is None else f"NaN, inf or larger in magnitude than train.loss_limit={limit:g}"
        reason = f"the loss became {what} between steps {first} and {c.steps_done}"
        self.folder.stopped({
            "reason": reason, "first_step": first, "last_step": c.steps_done, "checkpoint_step": self.checkpoint_step,
        })
        options = ", ".join(f"loss.{k}={v!r}" for k, v in c.config["loss"].items()
                            if isinstance(v, (int, float)) and not isinstance(v, bool))
        raise NonFiniteLoss(
            f"{reason}; stopped. The last good checkpoint (step {self.checkpoint_step}) in {self.run_dir} is kept "
            f"(try a lower optim.lr or optim.grad_clip{f', or other loss options than {options}' if options else ''})."
        )

    def end(self) -> dict[str, Any]:
        """After the last step: the identity baseline, final checkpoint, summary, readout; returns the summary."""
        c, progress = self.c, self._progress
        progress.bar.close()
        wall = time.perf_counter() - progress.started
        with evaluating():
            latest = progress.latest or evaluation(c, True, self.measured)  # a resumed finished run: once more
        c.extra["wall_s"] = c.extra.get("wall_s", 0.0) + wall
        c.extra["steps_timed"] = c.extra.get("steps_timed", 0) + (c.steps_done - progress.start_step)
        with evaluating():
            identity = self.identity()
        self.save_checkpoint()
        summary = self.summarize(latest, identity)
        with evaluating():
            self._readout()
        self.folder.finish(summary)
        return summary

    def summarize(self, metrics: Mapping[str, Any], identity: Mapping[str, Any]) -> dict[str, Any]:
        c, wall = self.c, self.c.extra["wall_s"]
        measured = reported(metrics)
        expected = prediction_for(traits(c.loss).predictions, c.loss, c.process.config)
        switch = None if expected is None else metric_switch(expected.metric)
        return {**measured, **identity, "steps": c.steps_done, "wall_s": wall,
                "steps_per_s": c.extra["steps_timed"] / wall if wall > 0 else math.nan, "seed": c.config["seed"],
                "dgp_fingerprint": c.process.fingerprint(), "version": __version__,
                **verdict(expected, measured, switch, c.config)}

    def _readout(self) -> None:
        """Save true vs linearly read-out test latents (for the recovery scatter plots)."""
        generator = self.c.process.make_generator(stream_seed(self.c.config["seed"], "eval.readout"))
        z, z_hat, per_dim = linear_readout(self.c.encode, self.c.process, generator, n_fit=4096, n_test=2048)
        self.folder.readout(z=z, z_hat=z_hat, r2_per_dim=per_dim)


MEMORY_KEYS = ("train.batch_size", "dgp.dim", "encoder.widths", "dgp.negatives.num", "dgp.negatives.per_anchor",
               "train.loss_memory", "eval.final_n_fit", "eval.final_n_test")
SIZES = "the sizes that drive memory in this run: "
"""How the note that :func:`memory_sizes` adds to an out-of-memory error starts."""


def memory_sizes(config: Mapping[str, Any], runs: int) -> str:
    """A note for an out-of-memory error: the run's values of :data:`MEMORY_KEYS` it sets (and the pack's size)."""
    values = [f"{key}={dotted(config, key)}".replace(" ", "") for key in MEMORY_KEYS if dotted(config, key) is not None]
    return SIZES + ", ".join(values) + (f", {runs} runs in one process (--pack)" if runs > 1 else "")


def run_packed(trainers: Sequence[Trainer], batched: bool | None = None,
               shared: bool = True) -> list[dict[str, Any] | BaseException]:
    """Train ``trainers`` as one pack (``batched`` as in :class:`identifiable_cl.solvers.packed.PackStepper`): the
    one run loop, a single run being a pack of one. Per run its summary, or the error that stopped it (a loss that stops being
    finite ends its run only; the others go on). :data:`STOP` ends every run at the next step boundary with
    a checkpoint of that step, a KeyboardInterrupt at once with its last checkpoint, both as
    :class:`Interrupted`, its message saying what each kept. ``shared``: the runs' W&B runs share this
    process's service."""
    check_packable([t.c for t in trainers])
    measured = Measured()
    for trainer in trainers:
        trainer.measured = measured
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
                    trainers[i].account(loss)
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
        if allocation_failure(exc) is not None:
            exc.add_note(memory_sizes(trainers[0].c.config, len(trainers)))
        raise
    finally:
        stepper.close()
    LOOPING.clear()
    return [results[i] for i in range(len(trainers))]


def evaluate_run(run_dir: Path, overrides: Mapping[str, Any] | None = None, write: bool = True) -> dict[str, Any]:
    """Final-size held-out metrics of a saved run's encoder beside the identity baseline, as ``icl evaluate``
    measures them: written to the run's ``evaluation.json`` (unless ``write`` is false; the run's own files are only
    read) and returned.

    ``overrides`` (``{"eval.final_n_fit": 4096, ...}``) may change the ``eval.*`` keys only: how the
    run is measured, never what was trained.
    """
    run_dir = Path(run_dir)
    with rundir.owned(run_dir):
        trainer = Trainer.from_spec(resolve(run_dir, overrides or {}, "evaluate"), progress=False)
        c = trainer.c
        if overrides:
            c.extra.pop("identity", None)  # the saved baseline was measured with the run's own eval settings
        c.extra.setdefault("wall_s", 0.0)
        c.extra.setdefault("steps_timed", 0)
        summary = trainer.summarize(evaluation(c, True, trainer.measured), trainer.identity())
        if write:
            rundir.write_json(run_dir / rundir.EVALUATION, summary)
    return summary
