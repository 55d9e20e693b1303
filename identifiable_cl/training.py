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

import math
import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping

import torch
from torch import Tensor, nn
from tqdm import tqdm

from dgp.seeding import stream_seed
from identifiable_cl import __version__, linear, rundir
from identifiable_cl.components import Components, build, checkpoint_state, load_run, observations, split_encodings
from identifiable_cl.evaluation import evaluate, identity_baseline, lambda_recovery, linear_readout
from identifiable_cl.tracking import Tracker, open_tracker


class NonFiniteLoss(RuntimeError):
    """The loss became NaN or inf, or exceeded ``train.loss_limit``; the last good checkpoint is kept."""


class Interrupted(Exception):
    """Ctrl-C (or SIGINT) during a run: its message says what was kept and how to continue."""


def train_step(c: Components) -> Tensor:
    """One step on a fresh batch; returns the loss as a device tensor (no host synchronisation).

    With ``train.precision: bf16`` the encoder's forward pass runs under bfloat16 autocast
    and its outputs are cast back to float32 for the loss.
    """
    batch = c.process.sample(c.config["train"]["batch_size"], c.batches)
    with precision(c):
        h_all = c.encoder(observations(batch, c.process.dim))
    loss = c.loss(*split_encodings(h_all.to(c.process.dtype), batch))
    c.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    clip_and_step(c)
    return loss.detach()


def precision(c: Components) -> torch.autocast:
    """bfloat16 autocast for the encoder's forward pass under ``train.precision: bf16``, else a no-op."""
    return torch.autocast(c.device.type, dtype=torch.bfloat16, enabled=c.config["train"]["precision"] == "bf16")


def clip_and_step(c: Components) -> None:
    """Clip the gradient norm to ``optim.grad_clip`` (when set) and take the optimizer step."""
    clip = c.config["optim"]["grad_clip"]
    if clip is not None:
        nn.utils.clip_grad_norm_([p for g in c.optimizer.param_groups for p in g["params"]], clip)
    c.optimizer.step()


def encode_fn(encoder: nn.Module) -> Callable[[Tensor], Tensor]:
    def encode(x: Tensor) -> Tensor:
        was_training = encoder.training
        encoder.eval()
        with torch.no_grad():
            h = encoder(x)
        encoder.train(was_training)
        return h

    return encode


def evaluation(c: Components, final: bool) -> dict[str, Any]:
    """Held-out metrics at the current step (the final evaluation uses the larger sample sizes)."""
    e = c.config["eval"]
    generator = c.process.make_generator(stream_seed(c.config["seed"], f"eval.{c.step}"))
    metrics = evaluate(
        encode_fn(c.encoder),
        c.process,
        generator,
        n_fit=e["final_n_fit"] if final else e["n_fit"],
        n_test=e["final_n_test"] if final else e["n_test"],
        n_centres=e["final_n_centres"] if final else e["n_centres"],
        nonlinear=e["nonlinear"],
        in_sample=e["in_sample"],
        rotation_reference=final,
    )
    if final and e["in_sample_n"] is not None:
        generator = c.process.make_generator(stream_seed(c.config["seed"], f"eval.{c.step}.in_sample"))
        metrics.update(in_sample_metrics(encode_fn(c.encoder), c.process, generator, e["in_sample_n"]))
    metrics.update(loss_metrics(c, metrics))
    return metrics


def in_sample_metrics(encode: Callable[[Tensor], Tensor], process: Any, generator: torch.Generator,
                      n: int) -> dict[str, float]:
    """The scalar linear metrics (R², MCCs, block R²) fitted and scored on the same ``n`` fresh samples,
    as the reference codes log them; keys get the suffix ``_in_sample``."""
    scored = evaluate(encode, process, generator, n_fit=n, n_test=2, nonlinear=False, in_sample=True,
                      rotation_reference=False)
    return {f"{k}_in_sample": v for k, v in scored.items() if isinstance(v, float)}


def loss_metrics(c: Components, metrics: Mapping[str, Any]) -> dict[str, Any]:
    """The loss's own parameters (τ, Λ̂ ...) and, when both exist, Λ recovery against the truth."""
    out: dict[str, Any] = dict(c.loss.logs()) if hasattr(c.loss, "logs") else {}
    learned = getattr(c.loss, "lambda_hat", None)
    truth = c.process.lambda_true
    if learned is not None:
        out["lambda_learned"] = learned.detach().cpu().tolist()
    if truth is not None:
        out["lambda_true"] = truth.cpu().tolist()
    if learned is not None and truth is not None and "mcc_matching" in metrics and len(out["lambda_learned"]) == len(out["lambda_true"]):
        rec = lambda_recovery(learned.detach().cpu(), truth.cpu(), metrics["mcc_matching"])
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


class Trainer:
    """Runs one training job into a run directory. ``run()`` returns the summary dict."""

    def __init__(self, c: Components, run_dir: Path, progress: bool | None = None):
        self.c = c
        self.run_dir = Path(run_dir)
        self.progress = progress
        self.tracker: Tracker = Tracker()
        self.wandb_id: str | None = None
        self.wandb_name: str | None = None
        """The W&B run name of a packed run (alone, ``WANDB_NAME``, ``wandb.name`` or the folder's name)."""
        """The W&B run id of a packed run (alone, ``WANDB_RUN_ID`` or W&B chooses)."""
        self.checkpoint_step: int | None = c.step if (self.run_dir / rundir.CHECKPOINT).exists() else None

    @classmethod
    def create(cls, config: Mapping[str, Any], run_dir: Path, progress: bool | None = None,
               components: Components | None = None) -> "Trainer":
        """A new run: everything is built first (or given, as built from ``config``), then the directory is written."""
        c = build(config) if components is None else components
        run_dir = Path(run_dir)
        if run_dir.exists() and any(run_dir.iterdir()):
            raise ValueError(f"run directory {str(run_dir)!r} exists and is not empty; use --resume to continue it")
        run_dir.mkdir(parents=True, exist_ok=True)
        rundir.write_config(run_dir, c.config)
        rundir.write_json(run_dir / rundir.META, rundir.meta(c.device, linear.resolve(c.config["train"]["matmul"])))
        rundir.save_torch(run_dir / rundir.DGP, c.process.to_dict())
        return cls(c, run_dir, progress=progress)

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
        rundir.remove_stale_temporaries(run_dir)
        rundir.truncate_metrics(run_dir, c.step)
        rundir.write_config(run_dir, c.config)
        for name in (rundir.SUMMARY, rundir.STOPPED):
            (run_dir / name).unlink(missing_ok=True)
        return cls(c, run_dir, progress=progress)

    def save_checkpoint(self) -> None:
        rundir.save_torch(self.run_dir / rundir.CHECKPOINT, checkpoint_state(self.c))
        self.checkpoint_step = self.c.step

    def record(self, record: dict[str, Any]) -> None:
        rundir.append_metrics(self.run_dir, [record])
        self.tracker.log(record["step"], record)

    def run(self) -> dict[str, Any]:
        self.open()
        try:
            self.begin()
            while not self.done:
                self.after_step(train_step(self.c))
            summary = self.end()
        except KeyboardInterrupt:
            self.close(None)
            raise Interrupted(self.interrupted_message()) from None
        except BaseException:
            self.close(None)
            raise
        self.close(summary)
        return summary

    def interrupted_message(self) -> str:
        """What an interruption kept, and the command that continues the run."""
        kept = (f"the checkpoint of step {self.checkpoint_step} is kept" if self.checkpoint_step is not None
                else "no checkpoint was written yet")
        return (f"interrupted at step {self.c.step} of {self.c.config['train']['steps']}; {kept} in {self.run_dir}; "
                f"continue with: icl train --resume {self.run_dir}")

    def open(self, shared: bool = False) -> None:
        """Start the tracker (W&B) of this run (``shared``: beside other runs of this process)."""
        self.tracker = open_tracker(self.c.config, self.run_dir, shared, self.wandb_id if shared else None,
                                    self.wandb_name if shared else None)

    def close(self, summary: dict[str, Any] | None) -> None:
        """Log the figures of a finished run and finish its tracker (``None``: the run failed)."""
        if summary is not None:
            self.tracker.log_figures(self.c.step, draw_figures_if_possible(self.run_dir))
        self.tracker.finish(summary)

    def identity(self) -> dict[str, Any]:
        if "identity" not in self.c.extra:
            e = self.c.config["eval"]
            generator = self.c.process.make_generator(stream_seed(self.c.config["seed"], "eval.identity"))
            base = identity_baseline(
                self.c.process, generator, n_fit=e["final_n_fit"], n_test=e["final_n_test"],
                n_centres=e["final_n_centres"], nonlinear=e["nonlinear"], in_sample=e["in_sample"], rotation_reference=False,
            )
            if e["in_sample_n"] is not None:
                generator = self.c.process.make_generator(stream_seed(self.c.config["seed"], "eval.identity.in_sample"))
                scored = in_sample_metrics(lambda x: x, self.c.process, generator, e["in_sample_n"])
                base.update({f"identity_{k}": v for k, v in scored.items()})
            self.c.extra["identity"] = {k: v for k, v in base.items() if not k.startswith("identity_mcc_matching")}
        return self.c.extra["identity"]

    @property
    def done(self) -> bool:
        return self.c.step >= self.c.config["train"]["steps"]

    def begin(self) -> None:
        """Before the first step: the identity baseline, the initial checkpoint, the progress display.

        ``progress``: True, the tqdm bar; None, the bar on a terminal, else one
        :func:`progress_line` on stdout at every log and evaluation step; False, neither.
        """
        c, t = self.c, self.c.config["train"]
        self._identity = self.identity()
        if c.step == 0:
            self.save_checkpoint()
        self._lines = self.progress is None and not getattr(sys.stderr, "isatty", lambda: False)()
        self._bar = tqdm(total=t["steps"], initial=c.step, disable=self.progress is False or self._lines,
                         dynamic_ncols=True, desc="train")
        self._running = torch.zeros((), device=c.device, dtype=torch.float64)
        self._finite = torch.ones((), device=c.device, dtype=torch.bool)
        self._count, self._latest, self._started, self._start_step = 0, {}, time.perf_counter(), c.step

    def after_step(self, loss: Tensor) -> None:
        """Account for one step's loss: log, evaluate and checkpoint at their cadence."""
        c, t = self.c, self.c.config["train"]
        c.step += 1
        self._running += loss
        limit = t["loss_limit"]
        self._finite &= torch.isfinite(loss) if limit is None else loss.abs() <= limit  # NaN fails both
        self._count += 1
        log_now = c.step % t["log_every"] == 0
        eval_now = c.step % t["eval_every"] == 0 or c.step == t["steps"]
        ckpt_now = c.step % t["checkpoint_every"] == 0 or c.step == t["steps"]
        if log_now or eval_now or ckpt_now:
            if not bool(self._finite):
                self._bar.close()
                self.stop(c.step - self._count + 1)
            record: dict[str, Any] = {"step": c.step, "loss": self._running.item() / self._count}
            self._running.zero_()
            self._count = 0
            if eval_now:
                metrics = evaluation(c, final=c.step == t["steps"])
                self._latest = metrics
                record.update({k: v for k, v in metrics.items() if k != "mcc_matching"})
                self._bar.set_postfix(
                    loss=f"{record['loss']:.4f}", r2=f"{metrics['r2_linear']:.3f}", mcc=f"{metrics['mcc_pearson']:.3f}",
                    refresh=False,
                )
            else:
                self._bar.set_postfix(loss=f"{record['loss']:.4f}", refresh=False)
            self.record(record)
            if self._lines and (log_now or eval_now):
                rate = (c.step - self._start_step) / max(time.perf_counter() - self._started, 1e-9)
                print(progress_line(c.step, t["steps"], record["loss"], self._latest, rate), flush=True)
            if ckpt_now:
                self.save_checkpoint()
        self._bar.update(1)

    def stop(self, first: int) -> None:
        """The loss diverged between step ``first`` and now: record it in ``stopped.json``, raise NonFiniteLoss."""
        c, limit = self.c, self.c.config["train"]["loss_limit"]
        what = "NaN or inf" if limit is None else f"NaN, inf or larger in magnitude than train.loss_limit={limit:g}"
        reason = f"the loss became {what} between steps {first} and {c.step}"
        rundir.write_json(self.run_dir / rundir.STOPPED, {
            "reason": reason, "first_step": first, "last_step": c.step, "checkpoint_step": self.checkpoint_step,
        })
        raise NonFiniteLoss(
            f"{reason}; stopped. The last good checkpoint (step {self.checkpoint_step}) in {self.run_dir} is kept "
            "(try a lower optim.lr or optim.grad_clip)."
        )

    def end(self) -> dict[str, Any]:
        """After the last step: final checkpoint, summary, readout; returns the summary."""
        c = self.c
        self._bar.close()
        wall = time.perf_counter() - self._started
        latest = self._latest or evaluation(c, final=True)  # a resumed finished run is evaluated once more
        c.extra["wall_s"] = c.extra.get("wall_s", 0.0) + wall
        c.extra["steps_timed"] = c.extra.get("steps_timed", 0) + (c.step - self._start_step)
        self.save_checkpoint()
        summary = self.summarize(latest, self._identity)
        self._readout()
        rundir.write_json(self.run_dir / rundir.SUMMARY, summary)
        return summary

    def summarize(self, metrics: Mapping[str, Any], identity: Mapping[str, Any]) -> dict[str, Any]:
        c = self.c
        summary = {k: v for k, v in metrics.items() if k != "mcc_matching"}
        summary.update(identity)
        wall = c.extra["wall_s"]
        summary.update(
            steps=c.step,
            wall_s=wall,
            steps_per_s=c.extra["steps_timed"] / wall if wall > 0 else math.nan,
            seed=c.config["seed"],
            dgp_fingerprint=c.process.fingerprint(),
            version=__version__,
        )
        return summary

    def _readout(self) -> None:
        """Save true vs linearly read-out test latents (for the recovery scatter plots)."""
        generator = self.c.process.make_generator(stream_seed(self.c.config["seed"], "eval.readout"))
        z, z_hat, per_dim = linear_readout(encode_fn(self.c.encoder), self.c.process, generator, n_fit=4096, n_test=2048)
        rundir.save_npz(self.run_dir / rundir.READOUT, z=z, z_hat=z_hat, r2_per_dim=per_dim)


def evaluate_run(run_dir: Path, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Final-size held-out metrics of a saved run's encoder beside the identity baseline (nothing is written).

    ``overrides`` (``{"eval.final_n_fit": 4096, ...}``) may change the ``eval.*`` keys only: how the
    run is measured, never what was trained.
    """
    others = [key for key in overrides or {} if key != "eval" and not key.startswith("eval.")]
    if others:
        raise ValueError(
            f"{', '.join(f'{k}={overrides[k]!r}' for k in others)}: only eval.* keys can be overridden when "
            "evaluating a run (e.g. --eval.final_n_fit=4096); the rest of its config is the one it was trained with"
        )
    c = load_run(run_dir, overrides)
    if overrides:
        c.extra.pop("identity", None)  # the saved baseline was measured with the run's own eval settings
    trainer = Trainer(c, Path(run_dir), progress=False)
    c.extra.setdefault("wall_s", 0.0)
    c.extra.setdefault("steps_timed", 0)
    return trainer.summarize(evaluation(c, final=True), trainer.identity())
