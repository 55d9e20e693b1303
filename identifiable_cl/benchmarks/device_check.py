"""The prepared GPU check: CUDA tests, ``icl bench`` on the device, and R24's table at paper scale in one go.

    python -m identifiable_cl.benchmarks.device_check OUT [--budget SECONDS] [--device cuda] [--capture graph] [--tiny]

Runs on a machine with torch (CUDA build), scipy, scikit-learn, matplotlib and pytest, with or without
wandb (W&B is switched off: ``WANDB_MODE=disabled``), from the repository root of a source checkout
(the tests live there) with the package importable (``pip install --no-deps --no-build-isolation -e .``
or ``PYTHONPATH=.``). Every step has a share of the budget and is stopped when it runs out, so the
whole check ends within ``--budget`` seconds (default 540), in this order:

1. ``pytest -m cuda`` (the CUDA variants of the suite) → ``OUT/tests.txt``;
2. ``icl bench --device DEVICE --only loss training precision packing`` → ``OUT/bench.txt``: the loss as the
   whole matrix against 64 MiB blocks; each training step against its encoder's floor at batch 1000 and 6144,
   with its host synchronisations (torch's sync debug mode and the package's own count) and the same step
   recorded as a CUDA graph; bf16 against fp32; packs of K = 1, 4, 12, 32 stacked along a run axis, and
   captured, against the same runs in turn;
3. R24 (experiment ``rusak2024``) at paper scale, 4 runs × 3 seeds, the three seeds of a run packed
   in one process (stacked along a run axis, each step recorded as a CUDA graph unless ``--capture eager``)
   and the four processes side by side on the device. The number of steps is measured,
   then chosen: two pilot reproductions of 100 and 500 steps give the fixed cost ``a`` and the cost
   per step ``b`` of the whole reproduction (wall ≈ a + b·N); the full run takes 100,000 steps if
   a + b·N fits 90 % of the budget left, else 50,000, else the most that fit (a multiple of 1,000); a pilot
   stopped at its share measures nothing, and then no paper-scale run starts →
   ``OUT/r24.log`` (the runner's output), ``OUT/reproduce.md`` (the reproduction's own report);
4. ``OUT/results.md``: AnInfoNCE's in-sample linear R² and MCC (mean ± std over the seeds) against
   the official training logs at the nearest logged step count at or below the one taken, with the
   tolerance ±0.02, and every step's wall time; ``OUT/device_check.json``: the same as data.

The runs themselves are written to ``--work`` (default: a new temporary folder), outside ``OUT``; no file
in ``OUT`` exceeds :data:`MAX_FILE_BYTES` (a longer log keeps its end).
``--tiny`` checks the plumbing on any machine in well under a minute: the experiment's ``tiny``
settings (a small encoder, batch 64, small evaluations), pilots of 2 and 4 steps, 12 or 8 steps for
the full run, one seed of the bimodal AnInfoNCE run; ``--tests`` and ``--bench`` narrow steps 1 and 2.
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


@dataclass(frozen=True)
class Plan:
    """What the R24 step runs: its scale's settings, patched by ``patch``; pilot and candidate step counts."""

    scale: str
    pilots: tuple[int, int]
    candidates: tuple[int, ...]
    seeds: int
    runs: tuple[str, ...] | None
    patch: dict[str, Any] = field(default_factory=dict)
    granularity: int = 1000


def paper_plan(capture: str = "graph") -> Plan:
    return Plan("paper", (100, 500), (100000, 50000), seeds=3, runs=None, patch={"train.capture": capture})


def tiny_plan() -> Plan:
    from identifiable_cl.reproduce.experiment import TINY

    return Plan("paper", (2, 4), (12, 8), seeds=1, runs=("aninfonce_bimodal",),
                patch={**TINY, "eval.in_sample_n": 256}, granularity=1)


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


def choose_steps(pilots: tuple[int, int], walls: tuple[float, float], left: float, candidates: Sequence[int],
                 granularity: int) -> tuple[int, float, float, str]:
    """``(steps, a, b, why)``: from two pilot walls, the fixed cost ``a`` and cost per step ``b`` (wall ≈ a + b·N),
    then the first candidate whose predicted wall fits 90 % of ``left``, else the most steps that fit, in
    multiples of ``granularity`` (at least the longer pilot's). A slope that noise made non-positive is
    replaced by the longer pilot's wall per step, which overestimates it."""
    (n1, n2), (w1, w2) = pilots, walls
    b = (w2 - w1) / (n2 - n1)
    if not b > 0:
        b = w2 / n2
    a = max(0.0, w1 - b * n1)
    room = 0.9 * left
    for n in candidates:
        if a + b * n <= room:
            return n, a, b, f"{n} steps fit: predicted {a + b * n:.0f} s of {left:.0f} s left"
    fit = int((room - a) / b) // granularity * granularity if room > a else 0
    steps = max(fit, n2)
    return steps, a, b, (f"{candidates[-1]} steps do not fit (predicted {a + b * candidates[-1]:.0f} s of {left:.0f} s "
                         f"left): {steps} steps, the most that fit")


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


def markdown(device: str, plan: Plan, steps: int, why: str, rows: list[dict[str, Any]], record: list[Step],
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
        f"## R24 at paper scale: {steps} steps, {plan.seeds} seed(s)",
        "",
        f"Steps chosen: {why}.",
        "",
        "AnInfoNCE, in-sample (4,096 fresh samples, as the official logs), mean ± std over seeds, against R24's "
        f"official training logs at the nearest logged step at or below {steps}; tolerance ±{TOLERANCE}:",
        "",
        "| run | metric | seeds | ours | log (step) | within |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        log = f"{r['log']:.3f} ({r['log_step']})" if r["log_step"] is not None else "(no log this early)"
        ours = f"{r['mean']:.3f} ± {r['std']:.3f}" if r["mean"] is not None else "(no finished run)"
        lines.append(f"| {r['run']} | {r['metric']} | {r['seeds']} | {ours} | {log} | {'yes' if r['within'] else 'no'} |")
    if steps:
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
              command: str = "", capture: str = "graph") -> dict[str, Any]:
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
    plan = tiny_plan() if tiny else paper_plan(capture)

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

    walls: list[float] = []
    r24_log = out / "r24.log"
    full = work / "reproduce"
    for n in plan.pilots:
        step = begin(f"R24 pilot, {n} steps")
        folder = experiment_copy(plan, n, work / f"experiment-{n}")
        # the longer pilot gets twice the shorter one's wall where the budget allows: its fixed cost alone
        # can exceed a quarter of what is left
        share = 0.25 * left() if not walls else min(0.5 * left(), max(0.25 * left(), 2 * walls[0]))
        code = run_logged(reproduce_argv(folder, plan, work / f"pilot-{n}"), r24_log, share, step, env)
        step.finished, step.outcome = code is not None, f"exit {code}; {step.wall_s:.1f} s"
        walls.append(step.wall_s)
        if code is None:
            break
    if not record[-1].finished:  # a pilot stopped: the loop ended there
        steps, a, b = 0, None, None
        why = (f"the {plan.pilots[len(walls) - 1]}-step pilot did not finish within its share of the budget "
               f"({walls[-1]:.0f} s), so no cost per step was measured and no paper-scale run was started; "
               "give the check a larger --budget or fewer --bench sections")
    else:
        steps, a, b, why = choose_steps(plan.pilots, (walls[0], walls[1]), left() - 15, plan.candidates,
                                        plan.granularity)
        why += f" (fixed cost a = {a:.1f} s, b = {1e3 * b:.2f} ms per step of the whole reproduction)"
        step = begin(f"R24 paper scale, {steps} steps")
        folder = experiment_copy(plan, steps, work / "experiment")
        code = run_logged(reproduce_argv(folder, plan, full), r24_log, left() - 10, step, env)
        step.finished, step.outcome = code is not None, f"exit {code}; {last_line(r24_log)}"
    if (full / "results.md").is_file():
        rundir.write_text(out / "reproduce.md", (full / "results.md").read_text())

    rows = comparison(summaries(full, plan.scale), steps)
    name = device_name(device)
    rundir.write_text(out / "results.md", markdown(name, plan, steps, why, rows, record, command))
    data = {"device": name, "torch": _torch_version(), "budget_s": budget, "steps": steps, "why": why,
            "pilots": dict(zip(map(str, plan.pilots), walls)), "fixed_s": a, "step_s": b,
            "record": [asdict(s) for s in record], "comparison": rows, "work": str(work)}
    rundir.write_text(out / "device_check.json", json.dumps(data, indent=2))
    for path in out.iterdir():
        keep_end(path)
    return data


def refused(args: argparse.Namespace) -> str | None:
    """Why the check cannot start, in one line, before it writes anything; None when it can."""
    if not args.budget > 0:
        return f"--budget={args.budget}: must be a positive number of seconds"
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
                        help="train.capture of R24's paper-scale runs (default: graph)")
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
                     Path(args.work) if args.work else None, command, args.capture)
    print((Path(args.out) / "results.md").read_text())
    return 0 if all(s["finished"] for s in data["record"]) else 1


if __name__ == "__main__":
    sys.exit(main())
