"""The trainer: fresh batches from the DGP, encoder, loss, Adam; periodic held-out evaluation.

A run is data flowing one way: config → process (built once, seeded) → batches
→ encoder → loss → optimizer; at evaluation: fresh held-out z → h = f(g(z)) →
metrics. Everything is built and checked before the run directory is created,
so invalid input leaves nothing on disk.

Random streams, all derived from ``config["seed"]`` by name: ``dgp.*`` (the
process's parameters), ``model`` (initial weights), ``train.batches`` (the
training batches) and ``eval.<step>`` (the held-out sample of each evaluation,
so evaluation never disturbs training and a resumed run evaluates exactly as an
uninterrupted one).
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import torch
from torch import Tensor, nn
from tqdm import tqdm

import dgp
from dgp.checks import fail
from dgp.seeding import stream_seed
from identifiable_cl import __version__, rundir
from identifiable_cl.components import build_encoder, build_loss
from identifiable_cl.evaluation import evaluate, identity_baseline, lambda_recovery, linear_readout
from identifiable_cl.tracking import Tracker, open_tracker


class NonFiniteLoss(RuntimeError):
    """The loss became NaN or inf; the last good checkpoint is kept."""


def resolve_device(name: str) -> torch.device:
    """``auto`` → CUDA when present, else CPU; ``cuda`` without a GPU is an error naming the key."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        fail("device", name, "CUDA is not available on this machine; use auto or cpu")
    return device


@dataclass
class Components:
    """Everything a run trains with, built from a validated config."""

    config: dict[str, Any]
    device: torch.device
    process: dgp.Process
    encoder: nn.Module
    loss: nn.Module
    optimizer: torch.optim.Optimizer
    batches: torch.Generator
    step: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def build(config: Mapping[str, Any], process: dgp.Process | None = None) -> Components:
    """Build process, encoder, loss and optimizer; check that they fit together."""
    config = copy.deepcopy(dict(config))
    device = resolve_device(config["device"])
    seed = config["seed"]
    if process is None:
        process = dgp.build_process(config["dgp"], seed=seed)
    process = process.to(device)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(stream_seed(seed, "model"))
        encoder = build_encoder(config["encoder"], process.dim, process.dim)
        loss = build_loss(config["loss"], encoder.output_dim)
    encoder = encoder.to(device=device, dtype=process.dtype)
    loss = loss.to(device=device, dtype=process.dtype)
    if getattr(loss, "needs_unit_norm", False) and not getattr(encoder, "unit_norm", False):
        fail(
            "encoder.normalize",
            config["encoder"].get("normalize"),
            f"loss {config['loss']['name']!r} with cosine similarity needs unit-norm outputs: use 'sphere'",
        )
    uses_negatives = getattr(loss, "requires_negatives", False)
    if not uses_negatives and config["dgp"]["negatives"]["name"] != "none":
        fail(
            "dgp.negatives.name",
            config["dgp"]["negatives"]["name"],
            f"loss {config['loss']['name']!r} does not use the DGP's separate negatives (set its "
            f"negatives option to 'independent', or dgp.negatives.name to 'none')",
        )
    if uses_negatives and config["dgp"]["negatives"]["name"] == "none":
        fail(
            "dgp.negatives.name",
            "none",
            f"loss {config['loss']['name']!r} uses the DGP's separate negatives: set dgp.negatives.name "
            f"to one of {', '.join(n for n in dgp.NEGATIVES.names() if n != 'none')}",
        )
    groups = [{"params": list(encoder.parameters()), "lr": config["optim"]["lr"], "name": "encoder"}]
    for i, group in enumerate(loss.param_groups() if hasattr(loss, "param_groups") else [{"params": list(loss.parameters())}]):
        if group["params"]:
            groups.append({"params": group["params"], "lr": group.get("lr") or config["optim"]["loss_lr"], "name": f"loss{i}"})
    optimizer = torch.optim.Adam(groups, weight_decay=config["optim"]["weight_decay"])
    batches = process.make_generator(stream_seed(seed, "train.batches"))
    return Components(config, device, process, encoder, loss, optimizer, batches)


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


def observations(batch: dgp.Batch, dim: int) -> Tensor:
    """The rows x (B, D), x+ (B, D) and the negatives' x (B·K or M, D) stacked for one encoder pass."""
    parts = [batch.x, batch.x_pos] + ([batch.x_neg.reshape(-1, dim)] if batch.x_neg is not None else [])
    return torch.cat(parts)


def split_encodings(h_all: Tensor, batch: dgp.Batch) -> tuple[Tensor, Tensor, Tensor | None]:
    """(h, h_pos, h_neg) back from the encodings of :func:`observations`' rows; h_neg in x_neg's shape."""
    size = batch.x.shape[0]
    h_neg = h_all[2 * size :].reshape(*batch.x_neg.shape[:-1], -1) if batch.x_neg is not None else None
    return h_all[:size], h_all[size : 2 * size], h_neg


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
        nonlinear=e["nonlinear"],
        in_sample=e["in_sample"],
    )
    metrics.update(loss_metrics(c, metrics))
    return metrics


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


def checkpoint_state(c: Components) -> dict[str, Any]:
    state = {
        "step": c.step,
        "encoder": c.encoder.state_dict(),
        "loss": c.loss.state_dict(),
        "optimizer": c.optimizer.state_dict(),
        "rng": {"batches": c.batches.get_state(), "torch": torch.get_rng_state()},
        "extra": c.extra,
    }
    if torch.cuda.is_available():
        state["rng"]["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore(c: Components, state: Mapping[str, Any]) -> None:
    c.step = int(state["step"])
    c.encoder.load_state_dict(state["encoder"])
    c.loss.load_state_dict(state["loss"])
    c.optimizer.load_state_dict(state["optimizer"])
    c.batches.set_state(state["rng"]["batches"])
    torch.set_rng_state(state["rng"]["torch"])
    if "cuda" in state["rng"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["rng"]["cuda"])
    c.extra = dict(state.get("extra", {}))


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
        """The W&B run id of a packed run (alone, ``WANDB_RUN_ID`` or W&B chooses)."""

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
        rundir.write_json(run_dir / rundir.META, rundir.meta(c.device))
        rundir.save_torch(run_dir / rundir.DGP, c.process.to_file())
        return cls(c, run_dir, progress=progress)

    @classmethod
    def resume(cls, run_dir: Path, overrides: Mapping[str, Any] | None = None, progress: bool | None = None) -> "Trainer":
        """Continue a saved run exactly where its last checkpoint left it.

        Only ``train.*``, ``eval.*``, ``device`` and ``wandb.*`` may be overridden.
        """
        from identifiable_cl.config import merge_layer, validate

        run_dir = Path(run_dir)
        if not rundir.is_run_dir(run_dir):
            raise ValueError(f"--resume {str(run_dir)!r}: not a run directory (no {rundir.CONFIG} and {rundir.DGP})")
        config = rundir.read_config(run_dir)
        for key in overrides or {}:
            if key.split(".")[0] not in ("train", "eval", "device", "wandb"):
                fail(key, overrides[key], "cannot be changed on resume; only train.*, eval.*, device and wandb.* can")
        config = merge_layer(config, overrides or {}, "the command line")
        validate(config)
        process = dgp.load_process(rundir.load_torch(run_dir / rundir.DGP))
        c = build(config, process=process)
        if (run_dir / rundir.CHECKPOINT).exists():
            restore(c, rundir.load_torch(run_dir / rundir.CHECKPOINT))
        rundir.truncate_metrics(run_dir, c.step)
        rundir.write_config(run_dir, c.config)
        (run_dir / rundir.SUMMARY).unlink(missing_ok=True)
        return cls(c, run_dir, progress=progress)

    def save_checkpoint(self) -> None:
        rundir.save_torch(self.run_dir / rundir.CHECKPOINT, checkpoint_state(self.c))

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
        except BaseException:
            self.close(None)
            raise
        self.close(summary)
        return summary

    def open(self, shared: bool = False) -> None:
        """Start the tracker (W&B) of this run (``shared``: beside other runs of this process)."""
        self.tracker = open_tracker(self.c.config, self.run_dir, shared, self.wandb_id if shared else None)

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
                nonlinear=e["nonlinear"], in_sample=e["in_sample"],
            )
            self.c.extra["identity"] = {k: v for k, v in base.items() if not k.startswith("identity_mcc_matching")}
        return self.c.extra["identity"]

    @property
    def done(self) -> bool:
        return self.c.step >= self.c.config["train"]["steps"]

    def begin(self) -> None:
        """Before the first step: the identity baseline, the initial checkpoint, the progress bar."""
        c, t = self.c, self.c.config["train"]
        self._identity = self.identity()
        if c.step == 0:
            self.save_checkpoint()
        self._bar = tqdm(total=t["steps"], initial=c.step, disable=self.progress is False or None, dynamic_ncols=True, desc="train")
        self._running = torch.zeros((), device=c.device, dtype=torch.float64)
        self._finite = torch.ones((), device=c.device, dtype=torch.bool)
        self._count, self._latest, self._started, self._start_step = 0, {}, time.perf_counter(), c.step

    def after_step(self, loss: Tensor) -> None:
        """Account for one step's loss: log, evaluate and checkpoint at their cadence."""
        c, t = self.c, self.c.config["train"]
        c.step += 1
        self._running += loss
        self._finite &= torch.isfinite(loss)
        self._count += 1
        log_now = c.step % t["log_every"] == 0
        eval_now = c.step % t["eval_every"] == 0 or c.step == t["steps"]
        ckpt_now = c.step % t["checkpoint_every"] == 0 or c.step == t["steps"]
        if log_now or eval_now or ckpt_now:
            if not bool(self._finite):
                self._bar.close()
                raise NonFiniteLoss(
                    f"the loss became NaN or inf between steps {c.step - self._count + 1} and {c.step}; stopped. "
                    f"The last good checkpoint in {self.run_dir} is kept (try a lower optim.lr or optim.grad_clip)."
                )
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
            if ckpt_now:
                self.save_checkpoint()
        self._bar.update(1)

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
