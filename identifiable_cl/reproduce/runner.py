"""``icl reproduce``: run an experiment through the local sweep runner and write results.md.

For each labelled run the experiment becomes a W&B grid sweep over the seeds
(every override a constant ``value:``), written to
``OUT/sweeps/<experiment>-<scale>-<label>/sweep.yaml``; the planned runs of all
sweeps are executed by :func:`identifiable_cl.sweeps.local.run_groups` (``--pack K``: up to K
seeds of one label in one process; default one run per process), ``workers``
at a time, and finished runs are skipped when the command is repeated. Then
``OUT/results.md`` (tables beside the reference numbers and the identity
baseline, claim verdicts), ``OUT/results.json`` (the same numbers) and
``OUT/figures/*.png`` are written. With ``--report-only`` nothing is run: the report is written
from the runs already finished in OUT. As in ``icl sweep run``, parallel runs share
the cores (``OMP_NUM_THREADS`` = cores // workers unless set).

Runs with a ``tune`` entry train their seeds with the values shipped in the experiment's ``tuned.yaml``, or,
where it has none for them at the scale or with ``retune``, with values tuned first under ``OUT/tuning``
(:mod:`identifiable_cl.reproduce.tuning`); results.md says which, lists the values and flags those on the edge of
their searched range.

An experiment with a ``population`` entry is first checked without training
(:mod:`identifiable_cl.reproduce.population`, seconds at every scale, before any run starts, so a
problem with the entry surfaces at once); its numbers go into results.md and, under
``population``, results.json.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from identifiable_cl import rundir
from identifiable_cl.reproduce import population, report, tuning
from identifiable_cl.reproduce.claims import Verdict, check, tally
from identifiable_cl.reproduce.experiment import (
    RUN_COMMAND,
    SCALES,
    Experiment,
    check_experiment,
    load_experiment,
)
from identifiable_cl.aggregate import sweep_run
from identifiable_cl.sweeps.local import (Outcome, check_count, check_options, is_finished, pack_groups, run_groups,
                                          this_interpreter, write_sweep_file)
from identifiable_cl.sweeps.plan import PlannedRun, plan_runs
from identifiable_cl.sweeps.spec import SweepSpec, parse_sweep

DEFAULT_OUT = "runs/reproduce"
MOST_SEEDS = 10_000
"""The most seeds per run a reproduction takes (``--seeds``)."""
SWEEPS = "sweeps"
RESULTS_MD, RESULTS_JSON = "results.md", "results.json"


@dataclass
class Reproduction:
    """What ``reproduce`` produced: per-label results, claim verdicts, figure paths and the results.md path."""

    experiment: Experiment
    scale: str
    results: dict[str, report.RunResults]
    verdicts: list[Verdict]
    figures: dict[str, Path]
    markdown: Path
    population: population.PopulationCheck | None = None


Planned = list[tuple[str, SweepSpec, PlannedRun]]
"""(run label, its sweep, one planned seed of it)."""


def plan(experiment: Experiment, scale: str, seeds: int, out: Path, labels: Sequence[str] | None = None,
         write: bool = True, tuned: Mapping[str, Mapping[str, Any]] | None = None) -> Planned:
    """Every planned run of the experiment (of the runs ``labels`` only, when given), with the ``tuned`` values
    of the tuned runs; with ``write`` each sweep file is written to ``out/sweeps``."""
    planned = []
    for spec_run in experiment.runs:
        if labels is not None and spec_run.label not in labels:
            continue
        raw = experiment.sweep(spec_run.label, scale, seeds, (tuned or {}).get(spec_run.label))
        spec = parse_sweep(raw, f"{experiment.name}/{spec_run.label}")
        if write:
            write_sweep_file(spec, out / SWEEPS)
        planned += [(spec_run.label, spec, run) for run in placed(raw, spec, out / SWEEPS)]
    return planned


def placed(raw: Mapping[str, Any], spec: SweepSpec, sweeps: Path) -> list[PlannedRun]:
    """The sweep's planned runs, each in the folder an earlier version named it when only that one exists: runs
    were once named with this interpreter's path in their command, where they now name ``icl``
    (:data:`identifiable_cl.reproduce.experiment.RUN_COMMAND`, which the runner launches as that command), so a
    reproduction begun then continues."""
    named_before = parse_sweep({**raw, "command": this_interpreter(RUN_COMMAND)}, spec.name)
    return [old if old.folder.is_dir() and not run.folder.exists() else run
            for run, old in zip(plan_runs(spec, sweeps), plan_runs(named_before, sweeps))]


def run_all(planned: Planned, workers: int, echo: Callable[[str], None], pack: int = 1) -> list[Outcome]:
    """Execute the planned runs not finished before, ``workers`` processes at a time; with ``pack`` > 1
    the seeds of one run label train together, up to ``pack`` per process (``icl sweep run --pack``)."""
    todo = [(spec, run) for _, spec, run in planned if not is_finished(run.folder)]
    groups: list[tuple[SweepSpec, list[PlannedRun]]] = []
    for spec in {id(spec): spec for spec, _ in todo}.values():  # each sweep once, in plan order
        runs = [run for s, run in todo if s is spec]
        groups += [(spec, g) for g in (pack_groups(spec, runs, pack) if pack > 1 else [[r] for r in runs])]
    echo(f"{len(planned)} runs, {len(planned) - len(todo)} finished before, {len(todo)} to run, {workers} at a time"
         + (f", in {len(groups)} packs" if pack > 1 else ""))
    pending = iter(groups)

    def line(outcome: Outcome, spec: SweepSpec, done: int, total: int, where: str) -> str:
        return (f"[{done}/{total}] {spec.name} seed {outcome.run.params.get('seed')}: {outcome.shown} "
                f"(exit {outcome.exit_code}, {outcome.wall_s:.1f} s)")

    return run_groups(lambda: next(pending, None), len(todo), workers=workers, devices=None, echo=echo, line=line)


def collect(experiment: Experiment, planned: Planned) -> dict[str, report.RunResults]:
    """The runs of each label, read back from their folders (failed runs included, with their problem)."""
    results = {r.label: report.RunResults(r.label) for r in experiment.runs}
    for label, _, run in planned:
        results[label].runs.append(sweep_run(run.folder))
    return results


def reproduce(
    name: str | Path,
    scale: str = "smoke",
    *,
    seeds: int = 1,
    workers: int = 1,
    pack: int = 1,
    runs: Sequence[str] | None = None,
    out: str | Path | None = None,
    report_only: bool = False,
    retune: bool = False,
    command: str | None = None,
    echo: Callable[[str], None] = print,
) -> Reproduction:
    """Run experiment ``name`` at ``scale`` with seeds 0..seeds-1 and write results.md into ``out``.

    ``runs`` (labels) restricts the runs to some of the experiment's; claims about the others then
    have no data. ``report_only`` starts nothing: results.md, results.json and the figures are written
    from the runs of ``out`` that have finished (the others are listed as not finished), for a report
    while runs are still going or when a label was run over fewer seeds than another. ``retune`` tunes every tuned
    run afresh instead of training it with the values shipped with the experiment (module docstring)."""
    if scale not in SCALES:
        raise ValueError(f"--scale {scale!r}: allowed: {', '.join(SCALES)}")
    if retune and report_only:
        raise ValueError("--retune tunes runs and --report-only starts none: give one of them")
    check_count("seeds", seeds, MOST_SEEDS)
    check_options(workers, pack, None)
    experiment = load_experiment(name)
    if scale not in experiment.scale_names():
        raise ValueError(f"--scale {scale}: experiment {experiment.name} has the scales {', '.join(experiment.scale_names())}")
    labels = [r.label for r in experiment.runs]
    unknown = [label for label in runs or () if label not in labels]
    if unknown or (runs is not None and not runs):
        raise ValueError(f"--runs {','.join(runs or [])}: allowed: run labels of {experiment.name}, comma-separated: "
                         f"{', '.join(labels)}")
    check_experiment(experiment, (scale,))
    shipped = tuning.read_shipped(experiment)
    out = Path(out) if out is not None else Path(DEFAULT_OUT) / f"{experiment.name}-{scale}"
    pending: list[str] = []
    best = tuning.read_best(out) if report_only else {}
    if report_only:
        planned = plan(experiment, scale, seeds, out, runs, write=False, tuned=tuning.values(best))
        pending = [f"{label} seed {run.params['seed']}" for label, _, run in planned if not is_finished(run.folder)]
        planned = [(label, spec, run) for label, spec, run in planned if is_finished(run.folder)]
        if not planned:
            raise ValueError(f"--report-only: no finished run of {experiment.name} at scale {scale} in {out / SWEEPS}; "
                             "run without --report-only first")
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    checked = None
    if experiment.population is not None:
        checked = population.run_check(experiment, scale)
        echo(f"population check (no training): {len(checked.runs)} runs in {time.perf_counter() - started:.1f} s")
    if report_only:
        echo(f"report only: {len(planned)} finished runs" + (f"; not finished: {', '.join(pending)}" if pending else ""))
    else:
        best = tuning.choose(experiment, scale, out, shipped, runs, workers, retune, echo)
        planned = plan(experiment, scale, seeds, out, runs, tuned=tuning.values(best))
        run_all(planned, workers, echo, pack)
    results = collect(experiment, planned)
    means = {label: res.means() for label, res in results.items()}
    verdicts = [check(c, means, scale) for c in experiment.claims if c.applies(scale)]
    figures = report.draw(experiment, scale, results, out)
    command = command or f"icl reproduce {experiment.name} --scale {scale} --seeds {seeds} --workers {workers} --out {out}"
    text = report.markdown(
        experiment, scale, seeds, results, verdicts, figures, command, out, time.perf_counter() - started,
        population=checked, pending=pending, tuned=tuning.summary_line(experiment, best) if best else "",
    )
    rundir.write_text(out / RESULTS_MD, text + ("\n" + tuning.section(experiment, best, scale) if best else ""))
    data = {
        "experiment": experiment.name,
        "scale": scale,
        "seeds": seeds,
        "means": means,
        "failed": {label: [str(r.path) for r in res.failed] for label, res in results.items()},
        "not_finished": pending,
        "tuning": best,
        "claims": [
            {"claim": v.claim.text, "verdict": v.state, "left": v.left, "right": v.right, "threshold": v.threshold,
             "detail": v.detail}
            for v in verdicts
        ],
    }
    if checked is not None:
        data["population"] = checked.to_json()
    rundir.write_text(out / RESULTS_JSON, json.dumps(data, indent=2))
    plumbing = " (scale tiny checks the plumbing only, not the claims)" if scale == "tiny" else ""
    echo(f"{tally(verdicts)}{plumbing}; results in {out / RESULTS_MD}")
    return Reproduction(experiment, scale, results, verdicts, figures, out / RESULTS_MD, checked)
