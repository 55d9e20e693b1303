"""Tuning before the seeds run: every run of an experiment with a ``tune`` entry gets the same budget.

Each tuned run becomes an offline W&B bayes sweep (:meth:`identifiable_cl.reproduce.experiment.Experiment.tuning_sweep`:
``tuning.runs`` proposals of W&B's own engine over the run's ``tune`` keys, on the tuning seed, which no reported
run uses, at the tuning steps), written and run under ``OUT/tuning/<sweep>/`` by
:func:`identifiable_cl.sweeps.search.run_search`; the sweeps of different runs go ``workers`` at a time, one run
each. The finished tuning run with the largest ``tuning.metric`` (the first such in proposal order) gives the
tuned values, saved in ``OUT/tuning/best.json`` and used for every seed of the run. Rerunning resumes each search
where it stopped, as ``icl sweep run`` does, and a finished search is not run again.
"""

from __future__ import annotations

import json
import math
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from identifiable_cl import rundir
from identifiable_cl.reproduce.experiment import Experiment
from identifiable_cl.sweeps.search import read_runs, run_search
from identifiable_cl.sweeps.spec import SweepSpec, parse_sweep

TUNING = "tuning"
BEST = "best.json"


def tuned_labels(experiment: Experiment, labels: Sequence[str] | None = None) -> list[str]:
    """The runs (of ``labels``, when given) that are tuned before their seeds run."""
    return [r.label for r in experiment.runs if r.tune and (labels is None or r.label in labels)]


def best_run(experiment: Experiment, label: str, sweep_dir: Path) -> dict[str, Any] | None:
    """``{"values", "metric", "runs"}`` of run ``label``'s tuning in ``sweep_dir``: the tuned keys' values of its
    best finished run, that run's metric, and how many runs finished; None when none finished with a finite metric."""
    metric = experiment.tuning_metric(label)
    finished = [record for _, _, record in read_runs(sweep_dir) if record.state == "finished"]
    scored = [(record.summary[metric], record) for record in finished
              if isinstance(record.summary.get(metric), (int, float)) and math.isfinite(record.summary[metric])]
    if not scored:
        return None
    value, record = max(scored, key=lambda pair: pair[0])
    return {"values": {k: record.params[k] for k in experiment.run(label).tune}, "metric": value,
            "metric_name": metric, "runs": len(finished)}


def tune(experiment: Experiment, scale: str, out: Path, labels: Sequence[str] | None = None, workers: int = 1,
         echo: Callable[[str], None] = print) -> dict[str, dict[str, Any]]:
    """Run the tuning of every tuned run (module docstring); per label its :func:`best_run`, also written to
    ``out/tuning/best.json``. A run whose tuning finished no run is an error naming its folder."""
    labels = tuned_labels(experiment, labels)
    if not labels:
        return {}
    folder = Path(out) / TUNING
    specs: dict[str, SweepSpec] = {
        label: parse_sweep(experiment.tuning_sweep(label, scale), f"{experiment.name}/{label} tuning") for label in labels
    }
    count = experiment.tuning.count(scale)
    echo(f"tuning {len(labels)} runs, {count} bayes proposals each on seed {experiment.tuning.seed}, "
         f"{workers} searches at a time")

    def search(label: str) -> None:
        run_search(specs[label], folder, workers=1, count=count, seed=experiment.tuning.seed, echo=echo)

    with ThreadPoolExecutor(max_workers=workers) as pool:
        for future in [pool.submit(search, label) for label in labels]:
            future.result()
    best = {}
    for label, spec in specs.items():
        found = best_run(experiment, label, folder / spec.name)
        if found is None:
            raise ValueError(f"tuning of run {label}: no tuning run finished with {experiment.tuning_metric(label)}; "
                             f"see the logs in {folder / spec.name}")
        best[label] = found
    previous = read_best(out)
    rundir.write_json(folder / BEST, {**previous, **best})
    return best


def read_best(out: Path) -> dict[str, dict[str, Any]]:
    """The tuning results saved in ``out`` (``{}`` when there are none)."""
    path = Path(out) / TUNING / BEST
    if not path.is_file():
        return {}
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: unreadable tuning results ({exc}); remove it to tune again") from exc
    if not isinstance(found, dict):
        raise ValueError(f"{path}: unreadable tuning results (not a mapping); remove it to tune again")
    return found


def values(best: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per label the tuned keys' values of :func:`tune`'s (or :func:`read_best`'s) results."""
    return {label: dict(entry["values"]) for label, entry in best.items()}


def section(experiment: Experiment, best: Mapping[str, Mapping[str, Any]], scale: str) -> str:
    """results.md's account of the tuning: per tuned run its searched keys, the values chosen and their metric."""
    if not best:
        return ""
    t = experiment.tuning
    lines = [
        "## Tuning",
        "",
        f"Each tuned run: an offline W&B bayes search of {t.count(scale)} runs on seed {t.seed} (not reported), maximising "
        f"{t.metric} (or the run's own tuning metric); the best run's values below then ran on every reported seed. "
        f"Steps per tuning run: {t.steps[scale]:,}." if scale in t.steps else "Steps per tuning run: as the run's.",
        "",
        "| run | searched | chosen | best tuning run | tuning runs finished |",
        "|---|---|---|---|---|",
    ]
    for label, entry in best.items():
        if label not in {r.label for r in experiment.runs}:
            continue
        searched = ", ".join(experiment.run(label).tune)
        chosen = ", ".join(f"{k} = {v:.4g}" if isinstance(v, float) else f"{k} = {v}" for k, v in entry["values"].items())
        lines.append(f"| {label} | {searched} | {chosen} | {entry.get('metric_name', t.metric)} {entry['metric']:.3f} | {entry['runs']} |")
    return "\n".join(lines) + "\n"
