"""``icl bench``: sampling, evaluation and training-speed figures on this machine.

- sampling: for each conditional at n = 10 and batch 6144, the time to draw a
  batch (z, z+, negatives, all mixed by the invertible MLP) beside one
  forward+backward pass of the reference encoder on that batch's 2·6144
  observations; target: sampling under 5 % of the encoder step.
- evaluation: see :mod:`identifiable_cl.evaluation.bench`.
- training: steps/s of the full training step at batch 1024 and 6144, and the
  share of step time spent outside the encoder's own forward + backward +
  optimizer step (sampling, mixing, loss, bookkeeping); target under 10 %.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable, Iterable

import torch

import dgp
from dgp.seeding import stream_seed
from identifiable_cl.components import build_encoder

SAMPLING_CASES: list[tuple[str, dict[str, Any]]] = [
    ("sphere vMF(κ=1)", {"conditional": {"name": "vmf", "kappa": 1.0}}),
    ("sphere normal(0.05), projected", {"conditional": {"name": "normal"}}),
    ("sphere anisotropic bimodal", {"conditional": {"name": "anisotropic", "lambdas": "bimodal"}}),
    ("sphere anisotropic + shell 0.1", {"conditional": {"name": "anisotropic", "lambdas": "bimodal", "shell": 0.1}}),
    ("box normal(0.05), truncated", {"space": {"name": "box"}, "conditional": {"name": "normal"}}),
    ("box laplace(0.05), truncated", {"space": {"name": "box"}, "conditional": {"name": "laplace"}}),
    ("box gennorm(0.05, p=3)", {"space": {"name": "box"}, "conditional": {"name": "gennorm", "p": 3.0}}),
    ("R^n content-style dep.", {
        "space": {"name": "euclidean"},
        "marginal": {"name": "content_style", "content_dim": 5, "dependence": True, "content_dependent_style": True},
        "conditional": {"name": "content_style", "content_dim": 5, "p_change": 0.75, "dependence": True},
    }),
    ("sphere vMF + tilted negatives", {"conditional": {"name": "vmf", "kappa": 10.0}, "negatives": {"name": "tilted", "beta": 5.0, "num": 1}}),
]

TRAINING_CASES: list[tuple[str, str, dict[str, str]]] = [
    ("sphere vMF, cosine InfoNCE", "sphere", {}),
    ("box Laplace, L1 InfoNCE", "box", {"dgp.conditional.name": "laplace", "loss.similarity": "l1"}),
]
"""Label, preset (both use the reference encoder) and overrides of each training case."""


def timed(fn: Callable[[], Any], reps: int, warmup: int = 2) -> float:
    """Median wall time of ``fn`` in seconds (CUDA synchronised)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def encoder_step_time(dim: int, rows: int, device: torch.device, reps: int) -> float:
    """One forward+backward of the reference encoder on ``rows`` observations."""
    encoder = build_encoder({"name": "mlp"}, dim, dim).to(device)
    x = torch.randn(rows, dim, device=device)

    def step() -> None:
        encoder.zero_grad(set_to_none=True)
        encoder(x).sum().backward()

    return timed(step, reps)


def bench_sampling(batch: int = 6144, reps: int = 20, print_fn: Callable[[str], None] = print) -> list[dict[str, Any]]:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    enc = encoder_step_time(10, 2 * batch, device, max(3, reps // 4))
    print_fn(f"\nsampling at n = 10, batch {batch} on {device} (encoder fwd+bwd on {2 * batch} rows: {enc * 1e3:.1f} ms)")
    print_fn(f"{'conditional':<34}{'sample ms':>10}{'% of encoder':>14}")
    rows = []
    for label, cfg in SAMPLING_CASES:
        process = dgp.build_process({**cfg, "mixing": {"name": "mlp", "cond_draws": 2500}}, seed=0).to(device)
        gen = process.make_generator(0)
        t = timed(lambda: process.sample(batch, gen), reps)
        rows.append({"case": label, "sample_ms": t * 1e3, "encoder_ms": enc * 1e3, "share": t / enc})
        extra = ""
        accept = getattr(process.conditional, "acceptance_rate", None)
        if accept is not None and cfg["conditional"].get("shell"):
            extra = f"  (shell acceptance {accept:.1%})"
        print_fn(f"{label:<34}{t * 1e3:>10.2f}{100 * t / enc:>13.2f}%{extra}")
    return rows


def bench_training(batches: Iterable[int] = (1024, 6144), steps: int = 10, print_fn: Callable[[str], None] = print) -> list[dict[str, Any]]:
    from identifiable_cl.config import load_config
    from identifiable_cl.training import build, train_step

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    print_fn(f"\ntraining at n = 10, reference encoder, on {device} (median of {steps} steps)")
    print_fn(f"{'setting':<30}{'batch':>7}{'steps/s':>9}{'step ms':>9}{'encoder ms':>12}{'overhead':>10}")
    rows = []
    for label, preset, overrides in TRAINING_CASES:
        for batch in batches:
            config = load_config(preset, {**overrides, "train.batch_size": batch, "dgp.mixing.cond_draws": 2500})
            c = build(config)
            full = timed(lambda: train_step(c), steps)
            x = c.process.sample(batch, c.batches)
            rows_in = torch.cat([x.x, x.x_pos])

            def pure() -> None:
                c.optimizer.zero_grad(set_to_none=True)
                c.encoder(rows_in).sum().backward()
                c.optimizer.step()

            core = timed(pure, steps)
            share = max(0.0, 1 - core / full)
            rows.append({"case": label, "batch": batch, "steps_per_s": 1 / full, "step_ms": full * 1e3,
                         "encoder_ms": core * 1e3, "overhead": share})
            print_fn(f"{label:<30}{batch:>7}{1 / full:>9.2f}{full * 1e3:>9.1f}{core * 1e3:>12.1f}{100 * share:>9.1f}%")
    return rows


def run_bench(quick: bool = False, sections: Iterable[str] | None = None, print_fn: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the selected sections (all by default) and return their rows."""
    sections = list(sections or ["sampling", "evaluation", "training"])
    torch.manual_seed(stream_seed(0, "bench"))
    out: dict[str, Any] = {}
    if "sampling" in sections:
        out["sampling"] = bench_sampling(reps=5 if quick else 20, print_fn=print_fn)
    if "evaluation" in sections:
        from identifiable_cl.evaluation import bench as eval_bench

        print_fn("")
        out["evaluation"] = eval_bench.run(print_fn=print_fn, quick=quick)
    if "training" in sections:
        out["training"] = bench_training(batches=(1024,) if quick else (1024, 6144), steps=3 if quick else 10, print_fn=print_fn)
    return out
