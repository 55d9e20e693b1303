"""The values a tuned run's seeds train with: shipped with the experiment, or tuned afresh with the same budget.

**Shipped values.** ``experiments/<name>/tuned.yaml`` (:data:`SHIPPED`, beside ``experiment.yaml`` and carried by
the wheel with it) holds the values the recorded tables of ``RESULTS.md`` used, as scale -> run label -> the value
of each key the run's ``tune`` entry searches::

    smoke:
      sphere_infonce: {loss.tau: 0.0968, optim.lr: 0.001184}

By default ``icl reproduce`` trains a tuned run's seeds with its shipped values at the scale (``tiny`` reads
``smoke``'s) and does not tune it: a bayes search's path depends on the last digits of its runs' metrics, so it
does not retrace itself on another CPU, and the shipped values are what make a recorded table reproduce from one
command anywhere. A run the file has no values for at the scale is tuned afresh, and ``--retune`` tunes every run
afresh. The whole file is checked before anything runs: a scale the experiment does not have, a run that is not
tuned, a key its run does not tune, a tuned key without a value, or a value outside the range its run searches is
one line naming the file, the entry and the value.

**Tuning afresh.** Each tuned run becomes an offline W&B bayes sweep
(:meth:`identifiable_cl.reproduce.experiment.Experiment.tuning_sweep`: ``tuning.runs`` proposals of W&B's own
engine over the run's ``tune`` keys, on the tuning seed, which no reported run uses, at the tuning steps), written
and run under ``OUT/tuning/<sweep>/`` by :func:`identifiable_cl.sweeps.search.run_search`; the sweeps of different
runs go ``workers`` at a time, one run each. The finished tuning run with the largest ``tuning.metric`` (the first
such in proposal order) gives the tuned values. Rerunning resumes each search where it stopped, as ``icl sweep
run`` does, and a finished search is not run again.

Either way the values used are saved in ``OUT/tuning/best.json`` with where they came from, and a value within
:data:`EDGE` of either end of the range its run searches (on the distribution's own scale, logarithmic for the
``log_*`` ones) is flagged there, on the console and in results.md: the best value may lie outside the range.
"""

from __future__ import annotations

import json
import math
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from identifiable_cl import rundir
from identifiable_cl.reproduce.experiment import DATA_SCALES, Experiment
from identifiable_cl.sweeps import schema
from identifiable_cl.sweeps.search import read_runs, run_search
from identifiable_cl.sweeps.spec import SweepSpec, parse_sweep
from identifiable_cl.yamlfiles import read_yaml_mapping, regular_file

TUNING = "tuning"
BEST = "best.json"
SHIPPED = "tuned.yaml"
SHIPPED_SOURCE, TUNED_SOURCE = "shipped", "tuned"
"""Where the values of a run came from (``source`` of its entry in :data:`BEST`)."""
EDGE = 0.02
"""A value within this fraction of its searched range's width from either end lies on the edge of the range."""
LINEAR = ("int_uniform", "uniform", "q_uniform")
LOGARITHMIC = ("log_uniform_values", "q_log_uniform_values", "inv_log_uniform_values")
EXPONENTS = ("log_uniform", "q_log_uniform")
"""W&B distributions with a range: on a linear scale from min to max, on a log scale from min to max, and on a log
scale from e^min to e^max; the others (normal, beta ...) state none, so any number passes and none is on an edge."""
CATEGORICAL = ("categorical", "categorical_w_probabilities", "constant")


def _searched(spec: Mapping[str, Any]) -> tuple[str, Any]:
    """``("values", [the values])`` of a categorical spec, ``("range", (low, high, log scale?))`` of one with a
    range, ``("numbers", None)`` of one without."""
    kind, filled = schema.classify(spec)
    if kind in CATEGORICAL:
        return "values", list(filled["values"]) if "values" in filled else [filled["value"]]
    if kind in LINEAR + LOGARITHMIC:
        return "range", (filled["min"], filled["max"], kind in LOGARITHMIC)
    if kind in EXPONENTS:
        return "range", (math.exp(filled["min"]), math.exp(filled["max"]), True)
    return "numbers", None


def check_value(where: str, spec: Mapping[str, Any], value: Any) -> None:
    """That ``value`` is one the W&B parameter ``spec`` can propose; a ValueError naming ``where`` otherwise."""
    form, searched = _searched(spec)
    if form == "values":
        if value not in searched:
            raise ValueError(f"{where}={value!r} is not one of the values its run searches: {searched}")
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{where}={value!r} is invalid: a number (write decimals such as 0.0003)")
    if form == "range" and not searched[0] <= value <= searched[1]:
        raise ValueError(f"{where}={value!r} is outside the range its run searches: {searched[0]:g} to {searched[1]:g}")


def edge(spec: Mapping[str, Any], value: Any) -> str | None:
    """``"lower"`` or ``"upper"`` when ``value`` lies within :data:`EDGE` of that end of the range ``spec`` searches
    (for a categorical spec: the smallest or largest of three or more numbers); None otherwise."""
    form, searched = _searched(spec)
    if form == "values":
        numbers = sorted({v for v in searched if isinstance(v, (int, float)) and not isinstance(v, bool)})
        if len(numbers) < 3 or value not in numbers:
            return None
        return "lower" if value == numbers[0] else "upper" if value == numbers[-1] else None
    if form != "range" or isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    low, high, log = searched
    scale = math.log if log else float
    width = scale(high) - scale(low)
    if scale(value) - scale(low) <= EDGE * width:
        return "lower"
    if scale(high) - scale(value) <= EDGE * width:
        return "upper"
    return None


def edges(experiment: Experiment, label: str, values: Mapping[str, Any]) -> dict[str, str]:
    """The tuned keys of run ``label`` whose ``values`` lie on an edge of their searched range, with which edge."""
    tune = experiment.run(label).tune
    return {key: side for key, value in values.items() if (side := edge(tune[key], value)) is not None}


def read_shipped(experiment: Experiment) -> dict[str, dict[str, dict[str, Any]]]:
    """The checked values of the experiment's :data:`SHIPPED` file (module docstring), scale -> label -> values;
    ``{}`` without one."""
    path = experiment.folder / SHIPPED
    if not regular_file(path, "tuned values"):
        return {}
    raw = read_yaml_mapping(path, "tuned values")
    scales = [s for s in experiment.scale_names() if s in DATA_SCALES]
    tuned = {run.label: run.tune for run in experiment.runs}
    for scale, runs in raw.items():
        if scale not in scales:
            raise ValueError(f"{path}: {scale!r} is not a scale of experiment {experiment.name}; the file maps its scales "
                             f"({', '.join(scales)}) to run labels to tuned values")
        if not isinstance(runs, Mapping) or not runs:
            raise ValueError(f"{path}: {scale}={runs!r} is invalid: a mapping of tuned run labels to their values")
        for label, values in runs.items():
            where = f"{path}: {scale}.{label}"
            if label not in tuned:
                raise ValueError(f"{where}: not a run of experiment {experiment.name}; runs: {', '.join(tuned)}")
            if not tuned[label]:
                raise ValueError(f"{where}: run {label} is not tuned (it has no tune entry), so it takes no tuned values")
            if not isinstance(values, Mapping):
                raise ValueError(f"{where}={values!r} is invalid: a mapping of the keys run {label} tunes "
                                 f"({', '.join(tuned[label])}) to values")
            for key, value in values.items():
                if key not in tuned[label]:
                    raise ValueError(f"{where}.{key}={value!r}: run {label} does not tune {key}; it tunes "
                                     f"{', '.join(tuned[label])}")
                check_value(f"{where}.{key}", tuned[label][key], value)
            missing = [key for key in tuned[label] if key not in values]
            if missing:
                raise ValueError(f"{where}: no value for {', '.join(missing)} (run {label} tunes {', '.join(tuned[label])})")
    return {scale: {label: dict(values) for label, values in runs.items()} for scale, runs in raw.items()}


def tuned_labels(experiment: Experiment, labels: Sequence[str] | None = None) -> list[str]:
    """The runs (of ``labels``, when given) with a ``tune`` entry: those whose seeds train with tuned values."""
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


def tune(experiment: Experiment, scale: str, out: Path, labels: Sequence[str], workers: int = 1,
         echo: Callable[[str], None] = print) -> dict[str, dict[str, Any]]:
    """Tune the runs ``labels`` afresh (module docstring); per label its :func:`best_run`. A run whose tuning
    finished no run is an error naming its folder."""
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
        best[label] = {**found, "source": TUNED_SOURCE}
    return best


def choose(experiment: Experiment, scale: str, out: Path, shipped: Mapping[str, Mapping[str, Mapping[str, Any]]],
           labels: Sequence[str] | None = None, workers: int = 1, retune: bool = False,
           echo: Callable[[str], None] = print) -> dict[str, dict[str, Any]]:
    """The values every tuned run (of ``labels``, when given) trains its seeds with: its values in ``shipped``
    (:func:`read_shipped`) at the scale, else (and for every run with ``retune``) those of a fresh tuning (module
    docstring). Per label an entry with ``values``, ``source`` (:data:`SHIPPED_SOURCE` or :data:`TUNED_SOURCE`, a
    tuning's :func:`best_run` beside it) and ``edges`` (:func:`edges`), also written to ``out/tuning/best.json``;
    the edges are echoed."""
    wanted = tuned_labels(experiment, labels)
    at_scale = shipped.get("smoke" if scale == "tiny" else scale, {})
    chosen = {} if retune else {label: {"values": dict(at_scale[label]), "source": SHIPPED_SOURCE}
                                 for label in wanted if label in at_scale}
    if chosen:
        echo(f"values shipped in {experiment.folder / SHIPPED} for {len(chosen)} tuned run(s): their tuning is "
             "skipped (--retune tunes afresh)")
    chosen.update(tune(experiment, scale, out, [label for label in wanted if label not in chosen], workers, echo))
    for label, entry in chosen.items():
        entry["edges"] = edges(experiment, label, entry["values"])
        for key, side in entry["edges"].items():
            echo(f"{label}: {key} = {entry['values'][key]:g} lies on the {side} edge of the range it was tuned in")
    if chosen:
        rundir.write_json(Path(out) / TUNING / BEST, {**read_best(out), **chosen})
    return chosen


def read_best(out: Path) -> dict[str, dict[str, Any]]:
    """The values saved in ``out`` by :func:`choose` (``{}`` when there are none)."""
    path = Path(out) / TUNING / BEST
    if not regular_file(path, "tuning results"):
        return {}
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: unreadable tuning results ({exc}); remove it to tune again") from exc
    if not isinstance(found, dict):
        raise ValueError(f"{path}: unreadable tuning results (not a mapping); remove it to tune again")
    return found


def values(best: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per label the tuned keys' values of :func:`choose`'s (or :func:`read_best`'s) entries."""
    return {label: dict(entry["values"]) for label, entry in best.items()}


def _value(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def summary_line(experiment: Experiment, best: Mapping[str, Mapping[str, Any]]) -> str:
    """One line for the head of results.md: how many tuned runs took shipped values and how many were tuned."""
    shipped = sum(entry.get("source") == SHIPPED_SOURCE for entry in best.values())
    fresh = len(best) - shipped
    parts = [f"{shipped} from `{SHIPPED}` shipped with the experiment (tuning skipped)"] if shipped else []
    parts += [f"{fresh} tuned in this invocation"] if fresh else []
    flagged = sum(bool(entry.get("edges")) for entry in best.values())
    return (f"Tuned runs: {', '.join(parts)}; see Tuning" + (f" ({flagged} with a value on the edge of its range)."
                                                            if flagged else "."))


def section(experiment: Experiment, best: Mapping[str, Mapping[str, Any]], scale: str) -> str:
    """results.md's account of the tuned runs: per run its searched keys, the values chosen, where they came from
    (shipped, or the best tuning run's metric and how many tuning runs finished), and the values on an edge."""
    labels = {r.label for r in experiment.runs}
    best = {label: entry for label, entry in best.items() if label in labels}
    if not best:
        return ""
    t = experiment.tuning
    lines = ["## Tuning", ""]
    if any(entry.get("source") == SHIPPED_SOURCE for entry in best.values()):
        lines += [f"Runs marked shipped trained every reported seed with the values in `{SHIPPED}` beside the "
                  "experiment's `experiment.yaml`, the values its recorded tables used; they were not tuned here "
                  "(`icl reproduce --retune` tunes them afresh).", ""]
    if any(entry.get("source", TUNED_SOURCE) == TUNED_SOURCE for entry in best.values()):
        steps = f"Steps per tuning run: {t.steps[scale]:,}." if scale in t.steps else "Steps per tuning run: as the run's."
        lines += [f"Runs marked tuned: an offline W&B bayes search of {t.count(scale)} runs on seed {t.seed} (not "
                  f"reported), maximising {t.metric} (or the run's own tuning metric); the best run's values below then "
                  f"ran on every reported seed. {steps}", ""]
    lines += ["| run | searched | chosen | from | tuning runs finished |", "|---|---|---|---|---|"]
    for label, entry in best.items():
        searched = ", ".join(experiment.run(label).tune)
        chosen = ", ".join(f"{k} = {_value(v)}" for k, v in entry["values"].items())
        if entry.get("source") == SHIPPED_SOURCE:
            origin, finished = f"shipped ({SHIPPED})", "—"
        else:
            origin, finished = f"tuned: {entry.get('metric_name', t.metric)} {entry['metric']:.3f}", entry["runs"]
        lines.append(f"| {label} | {searched} | {chosen} | {origin} | {finished} |")
    flagged = [(label, key, entry["values"][key], side) for label, entry in best.items()
               for key, side in (entry.get("edges") or {}).items()]
    if flagged:
        lines += ["", f"**On the edge of the searched range** (within {EDGE:.0%} of its width from an end): the best "
                  "value may lie outside the range, so these rows may understate what the loss can do; widen the "
                  "run's `tune` range and pass --retune to find out.", ""]
        for label, key, value, side in flagged:
            spec = experiment.run(label).tune[key]
            lines.append(f"- {label}: {key} = {_value(value)}, at the {side} end of {_range_text(spec)}")
    return "\n".join(lines) + "\n"


def _range_text(spec: Mapping[str, Any]) -> str:
    form, searched = _searched(spec)
    if form == "values":
        return f"the values {searched}"
    low, high, log = searched
    return f"{low:g} to {high:g}" + (" (log scale)" if log else "")
