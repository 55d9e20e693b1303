"""The prepared GPU check: CUDA tests, ``icl bench`` on the device, and R24's table in one go.

    python -m identifiable_cl.benchmarks.device_check OUT [--budget SECONDS] [--device cuda] [--capture graph]
        [--r24 medium|paper] [--steps N] [--tiny]

Runs on a machine with torch (CUDA build, with Triton), scipy, scikit-learn, matplotlib and pytest, with or
without wandb (W&B is switched off: ``WANDB_MODE=disabled``), from the repository root of a source checkout (the
tests live there) with the package importable (``pip install --no-deps --no-build-isolation -e .`` or
``PYTHONPATH=.``). Every step has a share of the budget and is stopped when it runs out, so the whole check ends
within ``--budget`` seconds (default 540), in this order:

1. ``pytest -m cuda`` (the CUDA variants of the suite, the fused Triton kernels among them) → ``OUT/tests.txt``;
2. ``icl bench --device DEVICE --only loss training precision packing`` → ``OUT/bench.txt``: the loss as the
   whole matrix against the fused kernels and 64 MiB blocks; each training step against its encoder's floor at
   batch 1000 and 6144, with its host synchronisations and the same step recorded as a CUDA graph; bf16 and tf32
   against fp32; packs of K = 1, 4, 12 stacked along a run axis, and captured, against the same runs in turn
   (each configuration built once);
3. R24 (experiment ``rusak2024``), 4 runs × 3 seeds, the three seeds of a run packed in one process (stacked
   along a run axis, each step recorded as a CUDA graph unless ``--capture eager``) and the four processes side
   by side on the device, for ``--steps`` steps (default: the scale's own, 10,000 at ``medium`` and 100,000 at
   ``paper``), stopped at the budget left → ``OUT/r24.log`` (the runner's output), ``OUT/reproduce.md`` (the
   reproduction's own report). The cost of a step is read from the runs' own wall times afterwards: the
   first call (``--r24 medium``) measures it, and a second call (``--r24 paper --steps N``) takes as many of the
   paper's 100,000 steps as that cost fits into its budget;
4. ``OUT/results.md``: AnInfoNCE's in-sample linear R² and MCC (mean ± std over the seeds) against the official
   training logs at the nearest logged step count at or below the one taken, with the tolerance ±0.02, the cost
   per step, and every step's wall time; ``OUT/device_check.json``: the same as data.

The runs themselves are written to ``--work`` (default: a new temporary folder), outside ``OUT``; no file in ``OUT``
exceeds :data:`MAX_FILE_BYTES` (a longer log keeps its end), and ``OUT`` holds at most six files.
``--tiny`` checks the plumbing on any machine in well under a minute: the experiment's ``tiny`` settings (a small
encoder, batch 64, small evaluations), 12 steps, one seed of the bimodal AnInfoNCE run; ``--tests`` and
``--bench`` narrow steps 1 and 2.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import yaml

OFFICIAL_LOGS: dict[str, dict[int, tuple[float, float]]] = {
    "aninfonce_bimodal": {10000: (0.963, 0.676), 25000: (0.993, 0.677), 50000: (0.995, 0.675), 100000: (0.997, 0.685)},
    "aninfonce_linear": {10000: (0.971, 0.833), 25000: (0.993, 0.914), 50000: (0.997, 0.961), 100000: (0.996, 0.988)},
}
"""In-sample linear R² and MCC of AnInfoNCE in R24's official training logs (brendel-group/AnInfoNCE,
``training_logs/``; sphere n = 10, batch 1000, scored on 4,096 fresh samples), by step."""
TOLERANCE = 0.02
EXPERIMENT = "rusak2024"
BENCH_SECTIONS = ("loss", "training", "precision", "packing")
MAX_FILE_BYTES = 16 << 20
"""The most bytes a file of ``OUT`` holds."""


SCALE_STEPS = {"medium": 10000, "paper": 100000}
"""The steps R24's runs take at each scale the check runs, unless ``--steps`` says."""


@dataclass(frozen=True)
class Plan:
    """What the R24 step runs: its scale's settings, patched by ``patch``, for ``steps`` steps."""

    scale: str
    steps: int
    seeds: int
    runs: tuple[str, ...] | None
    patch: dict[str, Any] = field(default_factory=dict)


def r24_plan(scale: str = "medium", steps: int | None = None, capture: str = "graph") -> Plan:
    return Plan(scale, SCALE_STEPS[scale] if steps is None else steps, seeds=3, runs=None,
                patch={"train.capture": capture})


def tiny_plan() -> Plan:
    from identifiable_cl.reproduce.experiment import TINY

    return Plan("medium", 12, seeds=1, runs=("aninfonce_bimodal",), patch={**TINY, "eval.in_sample_n": 256})


@dataclass
class Step:
    """One step of the check: its name, wall seconds, whether it finished in its time, and a one-line outcome."""

    name: str
    wall_s: float = 0.0
    finished: bool = False
    outcome: str = ""


def run_logged(argv: Sequence[str], log: Path, timeout: float, step: Step, env: dict[str, str]) -> int | None:
    """Run ``argv`` with stdout and stderr into ``log`` (appended), stopped after ``timeout`` seconds;
    the exit code, or None when it was stopped. ``step`` gets the wall time."""
    from identifiable_cl import rundir

    started = time.monotonic()
    with rundir.open_log(log, append=True) as out:
        out.write(f"$ {' '.join(argv)}\n")
        out.flush()
        process = subprocess.Popen(list(argv), stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            code: int | None = process.wait(timeout=max(1.0, timeout))
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            process.wait()
            code = None
            out.write(f"\n[stopped after {timeout:.0f} s: the step's share of the budget]\n")
    step.wall_s += time.monotonic() - started
    return code


def last_line(path: Path) -> str:
    lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1] if lines else ""


def experiment_copy(plan: Plan, steps: int, folder: Path) -> Path:
    """A copy of the packaged R24 experiment whose ``plan.scale`` settings are patched and train for ``steps``."""
    from identifiable_cl import rundir
    from identifiable_cl.yamlfiles import read_yaml_mapping
    from identifiable_cl.reproduce.experiment import EXPERIMENTS_DIR, FILE

    raw = dict(read_yaml_mapping(Path(EXPERIMENTS_DIR) / EXPERIMENT / FILE, "experiment file"))
    scale = dict(raw["scales"][plan.scale])
    scale.update(plan.patch)
    scale["train.steps"] = steps
    for key in ("train.eval_every", "train.checkpoint_every", "train.log_every"):
        scale[key] = min(int(scale.get(key, steps)), steps)
    raw["scales"] = {**raw["scales"], plan.scale: scale}
    folder.mkdir(parents=True, exist_ok=True)
    rundir.write_text(folder / FILE, yaml.safe_dump(raw, sort_keys=False, allow_unicode=True))
    return folder


def reproduce_argv(experiment: Path, plan: Plan, out: Path) -> list[str]:
    """The ``icl reproduce`` command of ``plan``: the seeds of a run in one pack, every run in its own process."""
    runs = plan.runs or tuple(OFFICIAL_LOGS) + ("infonce_bimodal", "infonce_linear")
    argv = [sys.executable, "-m", "identifiable_cl.cli", "reproduce", str(experiment), "--scale", plan.scale,
            "--seeds", str(plan.seeds), "--pack", str(plan.seeds), "--workers", str(len(runs)), "--out", str(out)]
    return argv + (["--runs", ",".join(plan.runs)] if plan.runs else [])


def logged_column(steps: int, run: str) -> int | None:
    """The official log's step count nearest at or below ``steps`` (None below the first)."""
    below = [s for s in OFFICIAL_LOGS[run] if s <= steps]
    return max(below) if below else None


def summaries(out: Path, scale: str) -> dict[str, list[dict[str, Any]]]:
    """The finished runs' summaries of a reproduction in ``out`` at ``scale``, by run label."""
    from identifiable_cl.aggregate import sweep_run

    found: dict[str, list[dict[str, Any]]] = {}
    for folder in sorted(p for p in out.glob("sweeps/*/*") if p.is_dir()):
        run = sweep_run(folder)
        if run.problem is None and run.summary is not None:
            label = folder.parent.name.removeprefix(f"{EXPERIMENT}-{scale}-")
            found.setdefault(label, []).append(run.summary)
    return found


def step_costs(found: dict[str, list[dict[str, Any]]], pack: int) -> dict[str, float]:
    """Per run label, the median over its runs of the pack's wall seconds per step (``wall_s / steps`` of the
    summaries: a packed run's wall time is its pack's), and ``per_run_step``: that over the pack's ``pack`` runs,
    averaged over the labels (the four packs train side by side, so each one's time is shared with the others)."""
    costs = {label: statistics.median(s["wall_s"] / s["steps"] for s in runs)
             for label, runs in found.items() if runs}
    if costs:
        costs["per_run_step"] = statistics.fmean(costs.values()) / pack
    return costs


def comparison(found: dict[str, list[dict[str, Any]]], steps: int) -> list[dict[str, Any]]:
    """Per AnInfoNCE run and metric: the mean ± std over seeds against the official log at ``steps``."""
    rows = []
    for run, log in OFFICIAL_LOGS.items():
        column = logged_column(steps, run)
        for i, metric in enumerate(("r2_linear_in_sample", "mcc_pearson_in_sample")):
            values = [s[metric] for s in found.get(run, []) if isinstance(s.get(metric), (int, float))]
            mean = statistics.fmean(values) if values else None
            std = statistics.pstdev(values) if values else None
            reference = log[column][i] if column is not None else None
            within = mean is not None and reference is not None and abs(mean - reference) <= TOLERANCE
            rows.append({"run": run, "metric": metric, "seeds": len(values), "mean": mean, "std": std,
                         "log_step": column, "log": reference, "within": within})
    return rows


def markdown(device: str, plan: Plan, costs: dict[str, float], rows: list[dict[str, Any]], record: list[Step],
             command: str) -> str:
    lines = [
        "# Device check",
        "",
        f"Device: {device}; torch {_torch_version()}; Python {platform.python_version()}.",
        f"Command: `{command}`.",
        "",
        "| step | wall | outcome |",
        "|---|---|---|",
    ]
    lines += [f"| {s.name} | {s.wall_s:.0f} s | {s.outcome}{'' if s.finished else ' (stopped or failed)'} |" for s in record]
    lines += [
        "",
        f"## R24 at {plan.scale} scale: {plan.steps} steps, {plan.seeds} seed(s)",
        "",
        "Cost of a step, from the runs' own wall times (evaluations included): "
        + ("; ".join(f"{label} {1e3 * cost:.2f} ms per step of its pack" for label, cost in costs.items()
                     if label != "per_run_step")
           + f"; {1e3 * costs['per_run_step']:.3f} ms per run-step, the packs side by side"
           if costs else "no run finished") + ".",
        "",
        "AnInfoNCE, in-sample (4,096 fresh samples, as the official logs), mean ± std over seeds, against R24's "
        f"official training logs at the nearest logged step at or below {plan.steps}; tolerance ±{TOLERANCE}:",
        "",
        "| run | metric | seeds | ours | log (step) | within |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        log = f"{r['log']:.3f} ({r['log_step']})" if r["log_step"] is not None else "(no log this early)"
        ours = f"{r['mean']:.3f} ± {r['std']:.3f}" if r["mean"] is not None else "(no finished run)"
        lines.append(f"| {r['run']} | {r['metric']} | {r['seeds']} | {ours} | {log} | {'yes' if r['within'] else 'no'} |")
    if costs:
        lines += ["", "The reproduction's own report, with every run and claim: `reproduce.md`."]
    lines.append("")
    return "\n".join(lines)


def _torch_version() -> str:
    import torch

    return torch.__version__


def device_name(device: str) -> str:
    import torch

    if device.startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"


def keep_end(path: Path, limit: int = MAX_FILE_BYTES) -> None:
    """Cut the file at ``path`` to its last ``limit`` bytes, saying so on its first line, when it is longer."""
    from identifiable_cl import rundir

    size = path.stat().st_size
    if size > limit:
        with open(path, "rb") as f:
            f.seek(size - limit + 200)
            end = f.read()
        rundir.write_bytes(path, f"[the first {size - len(end)} bytes were left out]\n".encode() + end)


def run_check(out: Path, budget: float = 540.0, device: str = "cuda", tiny: bool = False,
              tests: Sequence[str] = ("tests",), bench: Sequence[str] = BENCH_SECTIONS, work: Path | None = None,
              command: str = "", capture: str = "graph", scale: str = "medium",
              steps: int | None = None) -> dict[str, Any]:
    """Run the check (see the module docstring) into ``out``; returns what ``device_check.json`` holds."""
    from identifiable_cl import rundir

    deadline = time.monotonic() + budget
    record: list[Step] = []

    def left() -> float:  # seconds left of the budget
        return max(0.0, deadline - time.monotonic())

    def begin(name: str) -> Step:  # a new step of the record
        record.append(Step(name))
        return record[-1]

    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="device-check-")) if work is None else work
    env = {**os.environ, "WANDB_MODE": "disabled", "PYTHONUNBUFFERED": "1"}
    plan = tiny_plan() if tiny else r24_plan(scale, steps, capture)

    step = begin("CUDA tests (pytest -m cuda)")
    log = out / "tests.txt"
    code = run_logged([sys.executable, "-m", "pytest", "-m", "cuda", "-q", "-p", "no:cacheprovider", *tests], log,
                      min(150.0, 0.3 * left()), step, env)
    step.finished, step.outcome = code in (0, 5), last_line(log)

    step = begin("icl bench --device " + device)
    log = out / "bench.txt"
    argv = [sys.executable, "-m", "identifiable_cl.cli", "bench", "--device", device, "--only", *bench]
    code = run_logged(argv + (["--quick"] if tiny else []), log, min(180.0, 0.35 * left()), step, env)
    step.finished, step.outcome = code == 0, f"{len(log.read_text().splitlines())} lines"

    step = begin(f"R24 at {plan.scale} scale, {plan.steps} steps")
    full = work / "reproduce"
    folder = experiment_copy(plan, plan.steps, work / "experiment")
    code = run_logged(reproduce_argv(folder, plan, full), out / "r24.log", left() - 10, step, env)
    step.finished, step.outcome = code is not None, f"exit {code}; {last_line(out / 'r24.log')}"
    if (full / "results.md").is_file():
        rundir.write_text(out / "reproduce.md", (full / "results.md").read_text())

    found = summaries(full, plan.scale)
    costs = step_costs(found, plan.seeds)
    rows = comparison(found, plan.steps)
    name = device_name(device)
    rundir.write_text(out / "results.md", markdown(name, plan, costs, rows, record, command))
    data = {"device": name, "torch": _torch_version(), "budget_s": budget, "scale": plan.scale, "steps": plan.steps,
            "step_costs_s": costs, "record": [asdict(s) for s in record], "comparison": rows, "work": str(work)}
    rundir.write_text(out / "device_check.json", json.dumps(data, indent=2))
    for path in out.iterdir():
        keep_end(path)
    return data


def refused(args: argparse.Namespace) -> str | None:
    """Why the check cannot start, in one line, before it writes anything; None when it can."""
    if not args.budget > 0:
        return f"--budget={args.budget}: must be a positive number of seconds"
    if args.steps is not None and not 1 <= args.steps <= SCALE_STEPS["paper"]:
        return f"--steps={args.steps}: must be a whole number of steps from 1 to {SCALE_STEPS['paper']}"
    for name, path in (("OUT", args.out), ("--work", args.work)):
        if path is not None and Path(path).exists() and not Path(path).is_dir():
            return f"{name} {path!r} is a file: give a folder (new or existing) for the check's files"
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            return ("--device cuda: CUDA is not available on this machine; use --device cpu (with --tiny, a check of "
                    "the plumbing)")
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m identifiable_cl.benchmarks.device_check",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="folder for the check's files")
    parser.add_argument("--budget", type=float, default=540.0, help="seconds for the whole check (default: 540)")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="where to bench (default: cuda)")
    parser.add_argument("--capture", default="graph", choices=("graph", "eager"),
                        help="train.capture of R24's runs (default: graph)")
    parser.add_argument("--r24", default="medium", choices=tuple(SCALE_STEPS),
                        help="the scale of R24's runs (default: medium, 10,000 steps)")
    parser.add_argument("--steps", type=int, help="steps of R24's runs (default: the scale's own)")
    parser.add_argument("--tiny", action="store_true", help="check the plumbing in seconds (any machine)")
    parser.add_argument("--tests", nargs="+", default=["tests"], help="test paths for pytest -m cuda (default: tests)")
    parser.add_argument("--bench", nargs="+", default=list(BENCH_SECTIONS), help="bench sections")
    parser.add_argument("--work", help="folder for the runs (default: a new temporary folder)")
    args = parser.parse_args(argv)
    problem = refused(args)
    if problem is not None:
        print(f"device_check: error: {problem}", file=sys.stderr)
        return 2
    command = " ".join(["python -m identifiable_cl.benchmarks.device_check", *(argv if argv is not None else sys.argv[1:])])
    data = run_check(Path(args.out), args.budget, args.device, args.tiny, args.tests, args.bench,
                     Path(args.work) if args.work else None, command, args.capture, args.r24, args.steps)
    print((Path(args.out) / "results.md").read_text())
    return 0 if all(s["finished"] for s in data["record"]) else 1


if __name__ == "__main__":
    sys.exit(main())
