"""``icl bench``: sampling, evaluation and training-speed figures on this machine.

- sampling: for each conditional at n = 10 and batch 6144, the time to draw a
  batch (z, z+, negatives, all mixed by the invertible MLP) beside one
  forward+backward pass of the reference encoder on that batch's 2·6144
  observations; target: sampling under 5 % of the encoder step.
- evaluation: see :mod:`identifiable_cl.benchmarks.evaluation`.
- loss: forward + backward of symmetric InfoNCE for every similarity at batch
  1024 and 6144 (n = 10) beside the reference encoder's forward + backward on the
  same 2B rows, for the blocked core (native C and eager torch kernels) and for a
  plain implementation written here that materialises the (2B, 2B) logits; and
  the loss's peak extra memory, measured in a fresh process.
- training: steps/s of the full training step at batch 1024 and 6144, and the
  share of step time spent outside the encoder's own forward + backward +
  optimizer step (sampling, mixing, loss, bookkeeping); target under 15 %; and the host synchronisations
  of one step (:func:`host_syncs`: on CUDA those torch reports, on the CPU those the package's code issues).
- cost: what a steady-state step would make a GPU do, counted on the CPU (kernels launched, bytes moved), part
  by part against the encoder's own step (:mod:`identifiable_cl.benchmarks.step_cost`).
- precision: the reference encoder's training step at batch 1000 under
  ``train.precision`` bf16 against fp32 (torch's BLAS), and fp32 through oneDNN
  (``train.matmul``).
- packing: K runs (seeds 0..K-1; K = 1, 2, 4, 8 on a CPU, 1, 4, 12, 32 on a GPU) stepped as
  one batched pack (``identifiable_cl.solvers.packed``) against the same K runs stepped one after
  the other, on the default config and on R24's setting (reference encoder, batch 1000):
  aggregate run-steps/s of both and their ratio.
- overhead: what a run costs besides training, each a fresh process: ``icl --help`` and ``icl train --help``;
  a 1-step default run with W&B disabled and offline, each part by part (:mod:`identifiable_cl.benchmarks.overhead`)
  against its target (:data:`TARGETS_S`), and as a later run of a sweep does it (identity baseline shared,
  ``train.figures`` false); the default run's wall time per step against its encoder's own
  forward+backward+Adam step.
Every section runs on one device (``icl bench --device``; default CUDA when present), except
the scikit-learn side of the evaluation section, which is CPU code. All ratios are measured side
by side in one process, the calls they compare taken in turn; on a GPU each call is timed by
CUDA events recorded around it after warm-up.
"""

from __future__ import annotations

import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable

import torch
import torch.nn.functional as F
from torch import Tensor

import dgp
from dgp.seeding import stream_seed
from identifiable_cl.encoders import ENCODERS

DEVICES = ("cpu", "cuda")
"""The choices of ``icl bench --device``."""

SAMPLING_CASES: list[tuple[str, dict[str, Any]]] = [
    ("sphere vMF(κ=1)", {"space": {"name": "sphere"}, "conditional": {"name": "vmf", "kappa": 1.0}}),
    ("sphere normal(0.05), projected", {"space": {"name": "sphere"}, "conditional": {"name": "normal"}}),
    ("sphere anisotropic bimodal", {"space": {"name": "sphere"}, "conditional": {"name": "anisotropic", "lambdas": "bimodal"}}),
    ("sphere anisotropic + shell 0.1", {"space": {"name": "sphere"},
                                         "conditional": {"name": "anisotropic", "lambdas": "bimodal", "shell": 0.1}}),
    ("box normal(0.05), truncated", {"space": {"name": "box"}, "conditional": {"name": "normal"}}),
    ("box laplace(0.05), truncated", {"space": {"name": "box"}, "conditional": {"name": "laplace"}}),
    ("box gennorm(0.05, p=3)", {"space": {"name": "box"}, "conditional": {"name": "gennorm", "p": 3.0}}),
    ("R^n content-style dep.", {
        "space": {"name": "euclidean"},
        "marginal": {"name": "content_style", "content_dim": 5, "dependence": True, "content_dependent_style": True},
        "conditional": {"name": "content_style", "content_dim": 5, "p_change": 0.75, "dependence": True},
    }),
    ("sphere vMF + tilted negatives", {"space": {"name": "sphere"}, "conditional": {"name": "vmf", "kappa": 10.0}, "negatives": {"name": "tilted", "beta": 5.0, "num": 1}}),
]

TRAINING_CASES: list[tuple[str, str | None, dict[str, str], tuple[int, ...] | None]] = [
    ("default config ([256]x3)", None, {}, (512,)),
    ("sphere vMF, cosine InfoNCE", "sphere", {}, None),
    ("box Laplace, L1 InfoNCE", "box", {"dgp.conditional.name": "laplace", "loss.similarity": "l1"}, None),
]
"""Label, preset (None: the default config; the presets use the reference encoder), overrides and
batch sizes (None: those given to :func:`bench_training`) of each training case."""


def bench_device(name: str | None = None) -> torch.device:
    """The device of ``icl bench --device NAME`` (None: CUDA when present, else the CPU)."""
    if name is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name not in DEVICES:
        raise ValueError(f"--device={name!r} is invalid: allowed {', '.join(DEVICES)}")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device=cuda: CUDA is not available on this machine; use --device=cpu")
    return torch.device(name)


def _call_seconds(fn: Callable[[], Any], device: torch.device) -> Callable[[], float]:
    """Call ``fn`` once; return a function that gives the call's seconds (on CUDA: between two
    events recorded around it, read once the device has caught up)."""
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        return lambda: (end.synchronize(), start.elapsed_time(end) / 1e3)[1]
    t0 = time.perf_counter()
    fn()
    seconds = time.perf_counter() - t0
    return lambda: seconds


def interleaved(fns: Iterable[Callable[[], Any]], reps: int, warmup: int = 2,
                device: torch.device = torch.device("cpu")) -> list[float]:
    """Median time (s) of each function, called in turn ``reps`` times after ``warmup`` rounds, so
    that a change of the machine's load falls on all of them alike (on CUDA: CUDA events)."""
    fns = list(fns)
    for _ in range(warmup):
        for fn in fns:
            fn()
    pending: list[list[Callable[[], float]]] = [[] for _ in fns]
    for _ in range(reps):
        for fn, own in zip(fns, pending):
            own.append(_call_seconds(fn, device))
    return [statistics.median(read() for read in own) for own in pending]


def timed(fn: Callable[[], Any], reps: int, warmup: int = 2, device: torch.device = torch.device("cpu")) -> float:
    """Median time of ``fn`` in seconds (on CUDA: CUDA events)."""
    return interleaved([fn], reps, warmup, device)[0]


def host_syncs(fn: Callable[[], Any], device: torch.device) -> int:
    """How many times one call of ``fn`` makes the host wait for the CUDA device (the waits torch's
    sync debug mode reports: ``.item()``, ``nonzero``, a tensor's truth value ...); off CUDA, the operations
    of the package's own code that would (:func:`identifiable_cl.benchmarks.syncs.host_syncs`)."""
    if device.type != "cuda":
        from identifiable_cl.benchmarks.syncs import host_syncs as counted

        return sum(counted(fn).values())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught)


def _matmul(device: torch.device) -> str:
    from identifiable_cl.linear import resolve

    return f"encoder's float32 CPU products: {resolve('auto')}" if device.type == "cpu" else "torch's CUDA products"


def encoder_step_time(dim: int, rows: int, device: torch.device, reps: int) -> float:
    """One forward+backward of the reference encoder on ``rows`` observations."""
    encoder = ENCODERS.build({"name": "mlp"}, key="encoder", input_dim=dim, latent_dim=dim).to(device)
    x = torch.randn(rows, dim, device=device)

    def step() -> None:
        encoder.zero_grad(set_to_none=True)
        encoder(x).sum().backward()

    return timed(step, reps, device=device)


def encoder_own_step(c: Any) -> Callable[[], None]:
    """The run's encoder alone on one batch of its observations (2B rows): forward, backward and its Adam
    step, the floor of the run's training step."""
    x = c.process.sample(c.config["train"]["batch_size"], c.batches)
    rows = torch.cat([x.x, x.x_pos])

    def step() -> None:
        c.optimizer.zero_grad(set_to_none=True)
        c.encoder(rows).sum().backward()
        c.optimizer.step()

    return step


def bench_sampling(batch: int = 6144, reps: int = 20, device: torch.device | None = None,
                   print_fn: Callable[[str], None] = print) -> list[dict[str, Any]]:
    device = device or bench_device()
    enc = encoder_step_time(10, 2 * batch, device, max(3, reps // 4))
    print_fn(f"\nsampling at n = 10, batch {batch} on {device} (encoder fwd+bwd on {2 * batch} rows: {enc * 1e3:.1f} ms)")
    print_fn(f"{'conditional':<34}{'sample ms':>10}{'% of encoder':>14}")
    rows = []
    for label, cfg in SAMPLING_CASES:
        process = dgp.build_process({**cfg, "mixing": {"name": "mlp", "cond_draws": 2500}}, seed=0).to(device)
        gen = process.make_generator(0)
        t = timed(lambda: process.sample(batch, gen), reps, device=device)
        rows.append({"case": label, "sample_ms": t * 1e3, "encoder_ms": enc * 1e3, "share": t / enc})
        extra = ""
        accept = getattr(process.conditional, "acceptance_rate", None)
        if accept is not None and cfg["conditional"].get("shell"):
            extra = f"  (shell acceptance {accept:.1%})"
        print_fn(f"{label:<34}{t * 1e3:>10.2f}{100 * t / enc:>13.2f}%{extra}")
    return rows


def bench_training(batches: Iterable[int] = (1000, 6144), steps: int = 10, device: torch.device | None = None,
                   print_fn: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Each training case's step against the encoder's own forward+backward+Adam on the same rows (its floor),
    with the host synchronisations of one steady-state step: on CUDA those torch's sync debug mode reports and
    those the package's own code issues (:func:`identifiable_cl.benchmarks.syncs.host_syncs`), and the same step
    recorded as a CUDA graph (``train.capture: graph``) beside it."""
    from identifiable_cl.benchmarks.syncs import host_syncs as issued
    from identifiable_cl.components import build, load_config
    from identifiable_cl.solvers.captured import WARMUP

    device = device or bench_device()
    cuda = device.type == "cuda"
    print_fn(f"\ntraining steps at n = 10 on {device} (median of {steps} steps, {_matmul(device)}); encoder = its own "
             "forward+backward+Adam step on the same rows" + ("; captured = train.capture: graph" if cuda else ""))
    print_fn(f"{'setting':<30}{'batch':>7}{'steps/s':>9}{'step ms':>9}{'encoder ms':>12}{'overhead':>10}{'step/encoder':>14}"
             + f"{'host syncs':>12}" + (f"{'own code':>10}{'captured ms':>13}{'captured/encoder':>18}" if cuda else ""))
    rows = []
    for label, preset, overrides, own_batches in TRAINING_CASES:
        for batch in own_batches or batches:
            config = load_config(preset, {**overrides, "train.batch_size": batch, "dgp.mixing.cond_draws": 2500,
                                          "device": str(device)})
            c = build(config)
            pure = encoder_own_step(c)
            fns = [c.step, pure]
            if cuda:
                captured = build({**config, "train": {**config["train"], "capture": "graph"}})
                fns.append(captured.step)
            full, core, *graph = interleaved(fns, steps, warmup=WARMUP + 2 if cuda else 2, device=device)
            share = max(0.0, 1 - core / full)
            syncs = host_syncs(c.step, device)
            row = {"case": label, "batch": batch, "steps_per_s": 1 / full, "step_ms": full * 1e3,
                   "encoder_ms": core * 1e3, "overhead": share, "ratio": full / core, "host_syncs": syncs}
            line = (f"{label:<30}{batch:>7}{1 / full:>9.2f}{full * 1e3:>9.1f}{core * 1e3:>12.1f}{100 * share:>9.1f}%"
                    f"{full / core:>13.2f}x{syncs:>12}")
            if cuda:
                row.update(own_code_syncs=sum(issued(c.step).values()), captured_ms=graph[0] * 1e3,
                           captured_ratio=graph[0] / core, captured_syncs=host_syncs(captured.step, device))
                line += f"{row['own_code_syncs']:>10}{graph[0] * 1e3:>13.2f}{graph[0] / core:>17.2f}x"
            rows.append(row)
            print_fn(line)
    return rows


SECTIONS = ("sampling", "evaluation", "loss", "training", "cost", "precision", "packing", "overhead")
PACKING_CASES: list[tuple[str, str | None, dict[str, Any]]] = [
    ("default config", None, {}),
    ("R24 sphere, reference encoder", "sphere", {
        "dgp.conditional.name": "anisotropic", "dgp.conditional.lambdas": "bimodal",
        "loss.name": "aninfonce", "loss.negatives": "r24", "train.batch_size": 1000,
    }),
]
LOSS_KINDS = ("cosine", "l1", "l2", "l3")
NAIVE_LIMIT_BYTES = 2 << 30
"""The plain implementation is skipped where its logits/differences would exceed this."""


def naive_infonce(h: Tensor, h_pos: Tensor, kind: str, tau: float) -> Tensor:
    """Symmetric InfoNCE (NT-Xent) the straightforward way: the whole (2B, 2B) logit matrix
    (for Lp, from the (2B, 2B, d) difference tensor), autograd for the backward pass."""
    both = torch.cat([h, h_pos])
    if kind == "cosine":
        unit = F.normalize(both, dim=1)
        logits = unit @ unit.T / tau
    else:
        logits = -(both[:, None, :] - both[None, :, :]).abs().pow(int(kind[1])).sum(-1) / tau
    batch = h.shape[0]
    logits = logits.masked_fill(torch.eye(2 * batch, dtype=torch.bool, device=h.device), -math.inf)
    targets = torch.cat([torch.arange(batch, 2 * batch), torch.arange(batch)]).to(h.device)
    return F.cross_entropy(logits, targets)


def _loss_inputs(batch: int, device: torch.device) -> tuple[Tensor, Tensor]:
    g = torch.Generator().manual_seed(stream_seed(0, "bench.loss"))
    h = torch.randn(batch, 10, generator=g).to(device)
    return h.requires_grad_(), (h.detach() + 0.1 * torch.randn(batch, 10, generator=g).to(device)).requires_grad_()


BLOCKS_MIB = 64
"""The memory budget of the ``blocks`` implementation of :func:`loss_step`: blocks of rows well below the whole
matrix at the bench's batches, to weigh the whole matrix against blocks on an accelerator."""


def loss_step(kind: str, batch: int, impl: str, device: torch.device) -> Callable[[], None]:
    """Forward + backward of symmetric InfoNCE (τ = 0.1) by ``impl``: native, fused, eager (the whole matrix where
    it fits the default ``train.loss_memory``), blocks (eager within :data:`BLOCKS_MIB`) or naive."""
    from identifiable_cl.losses import InfoNCE
    from identifiable_cl.losses.blocked import loss_memory, use_kernels

    h, h_pos = _loss_inputs(batch, device)
    loss = InfoNCE(dim=10, similarity=kind, tau=0.1)

    def step() -> None:
        if impl == "naive":
            naive_infonce(h, h_pos, kind, 0.1).backward()
        elif impl == "blocks":
            with use_kernels("eager"), loss_memory(BLOCKS_MIB):
                loss(h, h_pos).backward()
        else:
            with use_kernels(impl):
                loss(h, h_pos).backward()

    return step


def loss_peak_memory(kind: str, batch: int, impl: str, device: torch.device = torch.device("cpu")) -> float:
    """Peak extra memory (MiB) of one loss forward + backward: on a CPU the resident memory of a fresh
    process (Linux), on CUDA the device memory allocated by torch beyond what was allocated before.

    On a CPU, the child's resident high-water mark (``VmHWM`` of ``/proc/self/status``, which starts
    afresh with the process, unlike ``ru_maxrss``) after the call minus its resident size
    (``VmRSS``) just before it.
    """
    if device.type == "cuda":
        step = loss_step(kind, batch, impl, device)
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        step()
        torch.cuda.synchronize(device)
        return (torch.cuda.max_memory_allocated(device) - base) / 2**20
    code = (
        "import torch; from identifiable_cl.benchmarks.sections import loss_step, _status_kib; "
        f"s = loss_step({kind!r}, {batch}, {impl!r}, torch.device('cpu')); "
        "base = _status_kib('VmRSS'); s(); print(_status_kib('VmHWM') - base)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    return float(done.stdout.split()[-1]) / 1024 if done.returncode == 0 else math.nan


def _status_kib(field: str) -> int:
    """A ``kB`` field of ``/proc/self/status``."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def bench_loss(batches: Iterable[int] = (1024, 6144), reps: int = 3, memory: bool = True,
               device: torch.device | None = None, print_fn: Callable[[str], None] = print) -> list[dict[str, Any]]:
    from identifiable_cl.losses import fused, native

    device = device or bench_device()
    impls = (["native"] if device.type == "cpu" and native.available() else []) + ["eager"]
    if device.type == "cuda" and fused.triton_available():
        impls.insert(0, "fused")
    impls += ["naive"] if device.type == "cpu" else ["blocks", "naive"]  # a CPU's eager kernels already take blocks
    print_fn(f"\nloss forward+backward, symmetric InfoNCE, n = 10, on {device}: ms, and % of the encoder's fwd+bwd on 2B rows "
             f"({_matmul(device)})")
    print_fn(f"{'similarity':<11}{'batch':>6}{'encoder':>9}" + "".join(f"{i:>18}" for i in impls) + f"{'naive/best':>12}"
             + (f"{'peak MiB':>10}" if memory else ""))
    rows = []
    for batch in batches:
        enc = encoder_step_time(10, 2 * batch, device, reps)
        for kind in LOSS_KINDS:
            row: dict[str, Any] = {"similarity": kind, "batch": batch, "encoder_ms": enc * 1e3}
            cells = []
            for impl in impls:
                width = 10 if kind != "cosine" else 1
                if impl == "naive" and (2 * batch) ** 2 * width * 4 > NAIVE_LIMIT_BYTES:
                    row[impl] = math.nan
                    cells.append(f"{'(too big)':>18}")
                    continue
                t = timed(loss_step(kind, batch, impl, device), reps, warmup=1, device=device)
                row[impl] = t * 1e3
                cells.append(f"{t * 1e3:>9.1f} ({100 * t / enc:>5.1f}%)")
            best = min(row[i] for i in impls if i != "naive")
            speedup = row["naive"] / best if not math.isnan(row["naive"]) else math.nan
            line = f"{kind:<11}{batch:>6}{enc * 1e3:>9.1f}" + "".join(cells) + f"{speedup:>11.1f}x"
            if memory:
                row["peak_mib"] = loss_peak_memory(kind, batch, impls[0], device)
                line += f"{row['peak_mib']:>10.0f}"
            rows.append(row)
            print_fn(line)
    return rows


PAIR_LOSSES = {"nce": {"similarity": "l1", "tau": 0.1}, "nwj": {"similarity": "l1", "tau": 0.1}, "margin": {},
               "triplet": {"normalize": False}, "triplet_hardest": {"normalize": False, "mining": "hardest"},
               "scl": {}}
"""The losses that sum a function over the negative pairs (:mod:`identifiable_cl.losses.elementwise`), with the
options they are timed with (a ``_suffix`` names a variant of the loss before it)."""


def bench_pair_losses(batches: Iterable[int] = (1024, 6144), reps: int = 3, device: torch.device | None = None,
                      print_fn: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Forward + backward of each loss of :data:`PAIR_LOSSES` (symmetric negatives, n = 10, row-blocked), as ms
    and as a share of the encoder's own forward + backward on the 2B rows."""
    from identifiable_cl.losses import LOSSES

    device = device or bench_device()
    print_fn(f"\nlosses over the negative pairs (row-blocked), symmetric negatives, n = 10, on {device}: "
             "forward+backward ms, and % of the encoder's fwd+bwd on 2B rows")
    print_fn(f"{'loss':<16}{'batch':>6}{'encoder':>9}{'loss':>18}")
    rows = []
    for batch in batches:
        enc = encoder_step_time(10, 2 * batch, device, reps)
        h, h_pos = _loss_inputs(batch, device)
        for label, options in PAIR_LOSSES.items():
            loss = LOSSES.build({"name": label.split("_")[0], **options}, key="loss", dim=10).to(device)
            ms = timed(lambda: loss(h, h_pos).backward(), reps, warmup=1, device=device) * 1e3
            rows.append({"loss": label, "batch": batch, "encoder_ms": enc * 1e3, "ms": ms})
            print_fn(f"{label:<16}{batch:>6}{enc * 1e3:>9.1f}{ms:>9.1f} ({100 * ms / (enc * 1e3):>5.1f}%)")
    return rows


def bench_precision(batch: int = 1000, steps: int = 10, device: torch.device | None = None,
                    print_fn: Callable[[str], None] = print) -> dict[str, Any]:
    """Training step of the reference encoder (R24's sphere setting) in fp32 with torch's BLAS (on CUDA:
    its CUDA products), in fp32 with oneDNN's products (a CPU where torch has them, see
    ``identifiable_cl.linear``), in tf32 (CUDA only: a CPU computes it as fp32) and in bf16."""
    from identifiable_cl import linear
    from identifiable_cl.components import build, load_config

    device = device or bench_device()
    cases = {"fp32": {"train.matmul": "blas"}, "bf16": {"train.precision": "bf16"}}
    if device.type == "cuda":
        cases["tf32"] = {"train.precision": "tf32"}
    if device.type == "cpu" and linear._operator() is not None:
        cases["fp32_onednn"] = {"train.matmul": "onednn"}
    cs = [build(load_config("sphere", {"train.batch_size": batch, "dgp.mixing.cond_draws": 2500, "device": str(device), **o}))
          for o in cases.values()]
    # warm-up: the first bf16 steps also create the device's bf16 matrix-product kernels
    times = interleaved([c.step for c in cs], steps, warmup=3, device=device)
    out: dict[str, Any] = dict(zip(cases, times))
    out["speedup"] = out["fp32"] / out["bf16"]
    line = (f"\nprecision, reference encoder, batch {batch}, on {device}: fp32 {out['fp32'] * 1e3:.1f} ms, bf16 "
            f"{out['bf16'] * 1e3:.1f} ms per step: bf16 speed-up {out['speedup']:.2f}x")
    if "tf32" in out:
        out["tf32_speedup"] = out["fp32"] / out["tf32"]
        line += f"; tf32 {out['tf32'] * 1e3:.1f} ms, {out['tf32_speedup']:.2f}x"
    if "fp32_onednn" in out:
        out["onednn_speedup"] = out["fp32"] / out["fp32_onednn"]
        line += (f"; fp32 through oneDNN {out['fp32_onednn'] * 1e3:.1f} ms, {out['onednn_speedup']:.2f}x "
                 f"(train.matmul=auto picks {linear.resolve('auto')} here)")
    print_fn(line)
    return out


PACK_SIZES = {"cpu": (1, 2, 4, 8), "cuda": (1, 4, 12)}
"""The pack sizes K of the packing section on each kind of device."""


def bench_packing(sizes: Iterable[int] | None = None, steps: int = 5, device: torch.device | None = None,
                  print_fn: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Aggregate run-steps/s of K runs stepped one after the other against the same runs stacked along a run axis
    (:class:`~identifiable_cl.solvers.packed.StackedPack`) and, on CUDA, that pack's step recorded as a CUDA graph
    (``train.capture: graph``); each configuration is built once and timed in those phases one after the other."""
    from identifiable_cl.components import build, load_config
    from identifiable_cl.solvers.captured import WARMUP
    from identifiable_cl.solvers.packed import StackedPack, batched_by_default

    device = device or bench_device()
    cuda = device.type == "cuda"
    sizes = PACK_SIZES[device.type] if sizes is None else sizes
    print_fn(f"\npacked runs on {device} (median of {steps} steps): aggregate run-steps/s, one batched step of the pack vs "
             "the runs' steps one after the other" + ("; captured = the pack's step as a CUDA graph" if cuda else ""))
    print_fn(f"{'setting':<32}{'K':>3}{'sequential':>12}{'batched':>10}{'ratio':>8}"
             + (f"{'captured':>10}{'ratio':>8}" if cuda else ""))
    rows = []
    for label, preset, overrides in PACKING_CASES:
        for k in sizes:
            configs = [load_config(preset, {**overrides, "seed": seed, "dgp.mixing.cond_draws": 2500,
                                            "device": str(device)}) for seed in range(k)]
            cs = [build(c) for c in configs]  # built once: in turn, then stacked, then stacked and captured
            warmup = WARMUP + 2 if cuda else 1
            sequential, = interleaved([lambda: [c.step() for c in cs]], steps, warmup=warmup, device=device)
            walls = []
            for capture in (False, True) if cuda else (False,):
                pack = StackedPack(cs, capture=capture)
                walls += interleaved([pack.step], steps, warmup=warmup, device=device)
                pack.release()
            packed, *graph = walls
            row = {"case": label, "k": k, "sequential": k / sequential, "packed": k / packed, "ratio": sequential / packed}
            line = f"{label:<32}{k:>3}{row['sequential']:>12.2f}{row['packed']:>10.2f}{row['ratio']:>7.2f}x"
            if cuda:
                row.update(captured=k / graph[0], captured_ratio=sequential / graph[0])
                line += f"{row['captured']:>10.2f}{row['captured_ratio']:>7.2f}x"
            rows.append(row)
            print_fn(line)
    mode = "one batched step" if batched_by_default(cs) else "each run's own step in turn"
    print_fn(f"packs on this device take {mode} unless told (identifiable_cl.solvers.packed)")
    return rows


def _run(argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    """Wall seconds of running ``argv`` to its end, and its standard output (a ValueError with its errors if it
    fails)."""
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise ValueError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    return seconds, done.stdout


def _wall(argv: list[str], env: dict[str, str], reps: int = 1) -> float:
    """Median wall seconds of running ``argv`` to its end (:func:`_run`)."""
    return statistics.median(_run(argv, env)[0] for _ in range(reps))


TARGETS_S = {"train_help_s": 1.0, "one_step_s": 4.0, "one_step_offline_s": 6.0, "first_step_s": 2.5}
"""The fixed costs a run aims at (seconds, on 2 CPU cores): ``icl train --help``, a 1-step default run with W&B
disabled and with W&B offline (figures on, the published evaluation sizes)."""


def one_step_parts(run_dir: Path, env: dict[str, str], *options: str) -> dict[str, float]:
    """A 1-step default run (with ``options``) in a fresh process, timed part by part
    (:mod:`identifiable_cl.benchmarks.overhead`): each part's seconds, ``start`` (from the spawn to its first line
    of Python), ``interpreter`` (the interpreter's start and exit, torch's teardown included: the process's wall
    time less what it timed inside) and ``wall``."""
    import json

    argv = [sys.executable, "-m", "identifiable_cl.benchmarks.overhead", str(run_dir), "--train.steps=1", *options]
    spawned = time.time()
    wall, stdout = _run(argv, env)
    parts = json.loads(stdout.strip().splitlines()[-1])
    start = max(0.0, parts.pop("started_at") - spawned)
    return {**{k: v for k, v in parts.items() if k != "exit_code"}, "start": start,
            "interpreter": wall - parts["total"], "wall": wall}


def _parts_line(parts: dict[str, float]) -> str:
    from identifiable_cl.benchmarks.overhead import PARTS

    return "  ".join(f"{p} {parts[p]:.2f}" for p in ("interpreter", *PARTS))


def nonlinear_fit_floor(config: dict[str, Any], device: torch.device) -> dict[str, float]:
    """What one nonlinear R² fit at ``config``'s final sizes must multiply
    (:mod:`identifiable_cl.evaluation.kernel_ridge`): for each length-scale the features F = K T (rows × centres × centres at most) and FᵀF (rows × centres²), in
    float64; and the seconds that takes at the float64 product rate measured here (a (rows, centres) by
    (centres, centres) product)."""
    from identifiable_cl.evaluation.kernel_ridge import validation_rows
    from identifiable_cl.evaluation.regression import BANDWIDTH_FACTORS, VALIDATION_FRACTION

    e = config["eval"]
    rows = e["final_n_fit"] - validation_rows(e["final_n_fit"], VALIDATION_FRACTION)
    centres = min(e["final_n_centres"], rows)
    scales = len(BANDWIDTH_FACTORS)
    gflop = scales * 2 * (2.0 * rows * centres * centres) / 1e9
    a = torch.randn(rows, centres, dtype=torch.float64, device=device)
    b = torch.randn(centres, centres, dtype=torch.float64, device=device)
    product = timed(lambda: a @ b, 3, device=device)
    gflops = 2.0 * rows * centres * centres / product / 1e9
    return {"rows": rows, "centres": centres, "scales": scales, "gflop": gflop, "gflops": gflops,
            "seconds": gflop / gflops}


def bench_overhead(steps: int = 3000, device: torch.device | None = None,
                   print_fn: Callable[[str], None] = print) -> dict[str, Any]:
    """Seconds of ``icl --help``, ``icl train --help`` and 1-step default runs (W&B disabled and offline, each part
    by part; as a later run of a sweep: identity baseline shared, figures off), each against its target
    (:data:`TARGETS_S`), and the ratio of a ``steps``-step default run's wall time per step to the encoder's own
    step on its batch (the run's floor)."""
    from identifiable_cl.components import build, load_config
    from identifiable_cl.rundir import IDENTITY_CACHE

    device = device or bench_device()
    icl = [sys.executable, "-m", "identifiable_cl.cli"]
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "WANDB_MODE": "disabled", IDENTITY_CACHE: str(Path(tmp) / "identity"),
               "WANDB_DIR": tmp, "WANDB_SILENT": "true"}

        def train(name: str, *options: str) -> float:
            return _wall([*icl, "train", "--quiet", f"--device={device}", "--run-dir", str(Path(tmp) / name),
                          *options], env)

        out: dict[str, Any] = {"help_s": _wall([*icl, "--help"], env, 3),
                               "train_help_s": _wall([*icl, "train", "--help"], env, 3)}
        alone = {k: v for k, v in env.items() if k != IDENTITY_CACHE}
        out["parts"] = one_step_parts(Path(tmp) / "one", alone, f"--device={device}")
        out["parts_offline"] = one_step_parts(Path(tmp) / "offline", {**alone, "WANDB_MODE": "offline"},
                                              f"--device={device}")
        out["one_step_s"], out["one_step_offline_s"] = out["parts"]["wall"], out["parts_offline"]["wall"]
        out["first_step_s"] = out["parts"]["first_step"] + out["parts"]["start"]
        train("first", "--train.steps=1", "--train.figures=false")  # fills the shared identity baseline
        out["one_step_shared_s"] = train("later", "--train.steps=1", "--train.figures=false")
        out["run_s"] = train("run", f"--train.steps={steps}")
    floor = encoder_own_step(build(load_config(None, {"device": str(device)})))
    out["floor_ms"] = timed(floor, 20, device=device) * 1e3
    out["run_over_floor"] = out["run_s"] / steps / (out["floor_ms"] / 1e3)

    def against(key: str) -> str:
        return f"{out[key]:.2f} s (target {TARGETS_S[key]:g} s: {'met' if out[key] <= TARGETS_S[key] else 'missed'})"

    print_fn(f"\nper-run overhead on {device} (fresh processes)")
    print_fn(f"icl --help {out['help_s']:.2f} s, icl train --help {against('train_help_s')}")
    for key, parts, mode in (("one_step_s", "parts", "disabled"), ("one_step_offline_s", "parts_offline", "offline")):
        print_fn(f"1-step default run, W&B {mode}: {against(key)}")
        print_fn(f"  parts (s): {_parts_line(out[parts])}")
        if out[key] > TARGETS_S[key]:
            largest = sorted(((v, p) for p, v in out[parts].items() if p not in ("total", "wall")), reverse=True)[:3]
            print_fn("  largest: " + ", ".join(f"{p} {v:.2f} s" for v, p in largest))
    if out["one_step_s"] > TARGETS_S["one_step_s"]:
        out["nonlinear_fit"] = nonlinear_fit_floor(load_config(None, {"device": str(device)}), device)
        f = out["nonlinear_fit"]
        print_fn(f"  why: the identity baseline and the final evaluation each fit the nonlinear R² at the final sizes "
                 f"({f['rows']:,} training rows, {f['centres']:,} centres, {f['scales']} length-scales): K T and FᵀF "
                 f"are up to {f['gflop']:.0f} GFLOP of float64 products a fit, {f['seconds']:.2f} s at the "
                 f"{f['gflops']:.0f} GFLOP/s a float64 product reaches here")
    print_fn(f"time to the first step of icl train (default run, W&B disabled, from the process's start): "
             f"{against('first_step_s')}")
    print_fn(f"as a later run of a sweep (identity baseline shared, no figures, W&B disabled) "
             f"{out['one_step_shared_s']:.2f} s")
    print_fn(f"{steps}-step default run {out['run_s']:.1f} s: {out['run_s'] / steps * 1e3:.1f} ms per step, "
             f"{out['run_over_floor']:.2f}x its encoder's own step ({out['floor_ms']:.1f} ms)")
    return out


def run_bench(quick: bool = False, sections: Iterable[str] | None = None, device: str | None = None,
              print_fn: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the selected sections (all by default) on ``device`` (see :func:`bench_device`) and return their rows."""
    on = bench_device(device)
    sections = list(sections or SECTIONS)
    torch.manual_seed(stream_seed(0, "bench"))
    out: dict[str, Any] = {}
    if "sampling" in sections:
        out["sampling"] = bench_sampling(reps=5 if quick else 20, device=on, print_fn=print_fn)
    if "evaluation" in sections:
        from identifiable_cl.benchmarks import evaluation as eval_bench

        print_fn("")
        out["evaluation"] = eval_bench.run(print_fn=print_fn, quick=quick, device=on)
    if "loss" in sections:
        out["loss"] = bench_loss(batches=(1024,) if quick else (1024, 6144), reps=2 if quick else 3,
                                 memory=not quick, device=on, print_fn=print_fn)
        out["pair_losses"] = bench_pair_losses(batches=(1024,) if quick else (1024, 6144), reps=2 if quick else 3,
                                               device=on, print_fn=print_fn)
    if "training" in sections:
        out["training"] = bench_training(batches=(1000,) if quick else (1000, 6144), steps=3 if quick else 10,
                                         device=on, print_fn=print_fn)
    if "cost" in sections:
        from identifiable_cl.benchmarks.step_cost import bench_cost

        out["cost"] = bench_cost(quick=quick, print_fn=print_fn)
    if "precision" in sections:
        out["precision"] = bench_precision(steps=2 if quick else 10, device=on, print_fn=print_fn)
    if "packing" in sections:
        out["packing"] = bench_packing(sizes=PACK_SIZES[on.type][:2] if quick else None, steps=2 if quick else 5,
                                       device=on, print_fn=print_fn)
    if "overhead" in sections:
        out["overhead"] = bench_overhead(steps=300 if quick else 3000, device=on, print_fn=print_fn)
    return out
