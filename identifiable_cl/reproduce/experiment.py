"""An experiment: one paper's runs at several scales, its reference numbers, claims and figures.

Read from ``experiments/<name>/experiment.yaml``::

    name: rusak2024
    title: one line
    paper: full citation
    reference_source: where the reference numbers come from
    notes: free text shown in results.md (optional)
    cells: {family: {dotted.key: value}}     # optional: runs and claims made from the registries
                                              #   (identifiable_cl.reproduce.atlas), every loss on each family
    base: {dotted.key: value, ...}            # every run, every scale
    scales:
      paper: {dotted.key: value, ...}         # the published settings
      medium: {dotted.key: value, ...}        # optional: published settings, fewer steps
      smoke: {dotted.key: value, ...}         # reduced for a CPU
    runs:
      - label: infonce_bimodal
        description: one line
        overrides: {dotted.key: value, ...}
        scales: {paper: {...}, smoke: {...}}  # optional per-run, per-scale overrides
        reference: {metric: number or text,   # optional published numbers, for every
                    metric: {scale: number or text}}  # scale or per scale
        tune: {dotted.key: W&B parameter}     # optional: tuned before the seeds run (needs tuning)
        tune_metric: r2_linear_content        # optional: what this run's tuning maximises instead
    tuning:                                   # optional: how the runs with ``tune`` are tuned
      runs: 8                                 # bayes proposals per tuned run (at tiny: 2)
      seed: 100                               # the root seed of every tuning run (not reported)
      metric: r2_linear                       # summary key the search maximises
      steps: {smoke: 500, medium: 2000}       # train.steps of a tuning run per scale (default: the run's)
      overrides: {eval.nonlinear: false}      # optional: on top of every tuning run's config
    metrics: [summary keys shown in the table]
    claims: [see identifiable_cl.reproduce.claims]
    figures: [see identifiable_cl.reproduce.report]
    population:                               # optional: a check of the objective, no training
      series:                                 # required, non-empty
        - label: one line                     # required text
          runs: [run labels]                  # required; the first is the reference of the ratios
          tau: run                            # optional: run (default) or optimal
          batch_size: 2048                    # optional: this series' batch_size (as below)
      epsilons: [0.1, 0.3, 1.0]               # optional: distortion strengths, numbers > 0
      distortions: [stretch, warp]            # optional: a non-empty subset of stretch, warp
      batches: 16                             # optional: Monte-Carlo batches per run, int >= 2,
                                              #   or {scale: int}
      batch_size: null                        # optional: anchors per batch, int >= 2 or null (the
                                              #   run's train.batch_size), or {scale: int or null}
      seed: 0                                 # optional: int >= 0, seeds the batches and the rotation

``population`` (see :mod:`identifiable_cl.reproduce.population`) evaluates, for each listed run,
the expected loss of the run's process and loss by Monte Carlo over fresh batches, for the true
inverse h = z and for distorted encoders applied to the latents; ``icl reproduce`` runs it at
every scale (it takes seconds) and reports the margins in results.md and results.json. ``tau:
optimal`` evaluates a series at the optimal temperature 1/(κ − β r²) of vMF(κ) positives and
negatives tilted by β on the sphere of radius r (where κ > β r²; else at the run's own
``loss.tau``); ``run`` at the run's ``loss.tau`` (a learnt τ's initial value). A per-scale
``batches`` or ``batch_size`` takes the default at a scale it omits; at ``tiny`` the check always
runs with :data:`TINY_POPULATION` (a few batches of the run's tiny batch size). A series' own ``batch_size`` replaces the entry's for its runs: with negatives drawn per
anchor the expected loss does not depend on the batch size, so a larger one only narrows the
standard errors, while with in-batch negatives it sets their number (keep the run's there).

A run's config at a scale is the defaults, then ``base``, ``scales[scale]``, the
run's ``overrides`` and the run's ``scales[scale]``, each layer a ``--key=value``
override; a layer that changes a component's ``name`` drops the options earlier
layers gave that component (as :func:`identifiable_cl.config.merge_layer` does).
The ``tiny`` scale is ``smoke`` with :data:`TINY` on top: a few steps and small
evaluation samples, to check the plumbing, not the claims. ``paper`` and ``smoke`` are
required; ``medium`` (the published settings trained for fewer steps, sized to finish on one
machine) exists where the experiment defines it.

A run with ``tune`` trains its seeds with the values of its ``tune`` keys shipped in the folder's ``tuned.yaml``
(the ones the recorded tables used), or, without shipped values, after an equal budget of tuning
(:mod:`identifiable_cl.reproduce.tuning`): an offline W&B bayes search (:meth:`Experiment.tuning_sweep`) of
``tuning.runs`` runs over its ``tune`` keys, every other key as at the scale, on the tuning seed and at the tuning
steps, whose best run's values are taken. Those values then join the run's overrides for every seed
(:meth:`Experiment.sweep`'s ``tuned``).

The experiment folders are found through :mod:`identifiable_cl.packaged`, in a wheel as in a
source checkout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from identifiable_cl.components import load_config
from identifiable_cl.config import DEFAULTS, drops_options, merge_layer
from identifiable_cl.yamlfiles import read_yaml_mapping
from identifiable_cl.packaged import EXPERIMENTS_DIR
from identifiable_cl.reproduce.claims import Claim, check_entries
from identifiable_cl.sweeps.spec import is_config_key, parse_sweep


FILE = "experiment.yaml"
SCALES = ("paper", "medium", "smoke", "tiny")
DATA_SCALES = ("paper", "medium", "smoke")
"""Scales an experiment file defines (``medium`` optionally); ``tiny`` is derived from ``smoke``."""
REQUIRED_SCALES = ("paper", "smoke")
TINY: dict[str, Any] = {
    "train.steps": 4,
    "train.batch_size": 64,
    "train.log_every": 2,
    "train.eval_every": 2,
    "train.checkpoint_every": 4,
    "encoder.widths": [16, 16],
    "dgp.mixing.cond_draws": 100,
    "eval.n_fit": 256,
    "eval.n_test": 256,
    "eval.final_n_fit": 256,
    "eval.final_n_test": 256,
    "eval.nonlinear": False,
}
FIGURE_KINDS = ("curves", "against", "bars", "atlas")
RUN_COMMAND = ("${env}", "icl", "train", "--quiet", "${args}")
"""How every sweep of an experiment runs its runs. ``icl`` is spelled as the program, not this interpreter's path,
so a run's id (a digest of its sweep's command and parameters) is the same from any interpreter, virtual
environment or machine, and a reproduction resumes wherever it is started; the runner puts this
interpreter in its place at launch (:func:`identifiable_cl.sweeps.local.this_interpreter`)."""
POPULATION_TAUS = ("run", "optimal")
POPULATION_DISTORTIONS = ("stretch", "warp")
POPULATION_DEFAULTS: dict[str, Any] = {
    "epsilons": (0.1, 0.3, 1.0),
    "distortions": POPULATION_DISTORTIONS,
    "batches": 16,
    "batch_size": None,
    "seed": 0,
}
"""The values of the ``population`` entries an experiment file leaves out."""
TINY_POPULATION: dict[str, Any] = {"batches": 4, "batch_size": None}
"""The population check's sizes at the ``tiny`` scale, whatever the entry says (plumbing only)."""


def combine(*layers: Mapping[str, Any]) -> dict[str, Any]:
    """Flat ``{dotted.key: value}`` layers merged in order by :func:`identifiable_cl.config.drops_options`."""
    out: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.items():
            section = drops_options(key, out.get(key), value)
            if section is not None:
                out = {k: v for k, v in out.items() if not k.startswith(section + ".")}
            out[key] = value
    return out


def _overrides(where: str, raw: Any) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}={raw!r} is invalid: expected a mapping of dotted config keys to values")
    for key in raw:
        if not isinstance(key, str) or not is_config_key(key):
            raise ValueError(f"{where}.{key}: not an `icl train` config key (write flat dotted keys, e.g. loss.tau)")
        if key == "seed":
            raise ValueError(f"{where}.seed: seeds are chosen with --seeds, not in the experiment file")
    return dict(raw)


def _scaled(where: str, raw: Any) -> dict[str, dict[str, Any]]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping) or any(k not in DATA_SCALES for k in raw):
        raise ValueError(f"{where}={raw!r} is invalid: a mapping from {', '.join(DATA_SCALES)} to overrides")
    return {k: _overrides(f"{where}.{k}", v) for k, v in raw.items()}


@dataclass(frozen=True)
class LabelledRun:
    """One labelled configuration of an experiment."""

    label: str
    description: str
    overrides: dict[str, Any]
    scales: dict[str, dict[str, Any]]
    reference: dict[str, Any]
    tune: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The tuned keys and their W&B parameter specs (``{}``: not tuned)."""
    tune_metric: str | None = None
    """The summary key this run's tuning maximises (None: the experiment's ``tuning.metric``)."""

    def reference_at(self, metric: str, scale: str) -> Any:
        """The published number (or text) for ``metric`` at ``scale``: a per-scale entry's value there
        (``tiny`` reads ``smoke``'s), or the entry itself; None when there is none."""
        value = self.reference.get(metric)
        if isinstance(value, Mapping):
            return value.get("smoke" if scale == "tiny" else scale)
        return value


TUNING_AT_TINY = 2
"""Tuning runs per tuned run at the ``tiny`` scale (plumbing only)."""


@dataclass(frozen=True)
class Tuning:
    """How the runs with ``tune`` are tuned (module docstring)."""

    runs: int
    seed: int
    metric: str
    steps: dict[str, int]
    overrides: dict[str, Any] = field(default_factory=dict)

    def count(self, scale: str) -> int:
        """Bayes proposals per tuned run at ``scale``."""
        return min(self.runs, TUNING_AT_TINY) if scale == "tiny" else self.runs


def _tuning(where: str, raw: Any) -> Tuning | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}={raw!r} is invalid: a mapping with runs, seed, metric and steps")
    check_entries(where, raw, {"runs", "seed", "metric", "steps", "overrides"})
    runs, seed, metric, steps = raw.get("runs", 8), raw.get("seed", 100), raw.get("metric", "r2_linear"), raw.get("steps") or {}
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 1:
        raise ValueError(f"{where}.runs={runs!r} is invalid: an integer >= 1")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"{where}.seed={seed!r} is invalid: an integer >= 0")
    if not isinstance(metric, str) or not metric:
        raise ValueError(f"{where}.metric={metric!r} is invalid: a summary key")
    if not isinstance(steps, Mapping) or any(k not in DATA_SCALES or isinstance(v, bool) or not isinstance(v, int)
                                             or v < 1 for k, v in steps.items()):
        raise ValueError(f"{where}.steps={steps!r} is invalid: a mapping from {', '.join(DATA_SCALES)} to steps >= 1")
    return Tuning(runs, seed, metric, dict(steps), _overrides(f"{where}.overrides", raw.get("overrides")))


def _tune(where: str, raw: Any) -> dict[str, dict[str, Any]]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping) or not raw:
        raise ValueError(f"{where}={raw!r} is invalid: a mapping of dotted config keys to W&B parameter specs")
    for key, spec in raw.items():
        if not isinstance(key, str) or not is_config_key(key) or key == "seed":
            raise ValueError(f"{where}.{key}: not a tunable `icl train` config key (write flat dotted keys, e.g. loss.tau)")
        if not isinstance(spec, Mapping) or not ({"values", "distribution", "min"} & set(spec)):
            raise ValueError(f"{where}.{key}={spec!r} is invalid: a W&B parameter with values, or a distribution "
                             "with min and max")
    return {k: dict(v) for k, v in raw.items()}


@dataclass(frozen=True)
class PopulationSeries:
    """Runs checked together; ratios of margins are taken to the first run's (``reference``)."""

    label: str
    runs: tuple[str, ...]
    tau: str
    batch_size: Any = None
    """As :attr:`Population.batch_size`; the entry's when the series gives none."""

    @property
    def reference(self) -> str:
        return self.runs[0]


@dataclass(frozen=True)
class Population:
    """A parsed ``population`` entry; see the module docstring."""

    series: tuple[PopulationSeries, ...]
    epsilons: tuple[float, ...]
    distortions: tuple[str, ...]
    batches: Any
    """An int, or a mapping from scales to ints."""
    batch_size: Any
    """An int, None (the run's ``train.batch_size``), or a mapping from scales to those."""
    seed: int

    @staticmethod
    def _at(value: Any, scale: str, default: Any) -> Any:
        return value.get(scale, default) if isinstance(value, Mapping) else value

    def batches_at(self, scale: str) -> int:
        """Monte-Carlo batches per run at ``scale``."""
        if scale == "tiny":
            return TINY_POPULATION["batches"]
        return self._at(self.batches, scale, POPULATION_DEFAULTS["batches"])

    def batch_size_at(self, scale: str, series: PopulationSeries) -> int | None:
        """Anchors per batch at ``scale`` for the runs of ``series``; None: the run's own ``train.batch_size``."""
        if scale == "tiny":
            return TINY_POPULATION["batch_size"]
        return self._at(series.batch_size, scale, POPULATION_DEFAULTS["batch_size"])

    def labels(self) -> tuple[str, ...]:
        """Every run checked, in series order, each once."""
        return tuple(dict.fromkeys(label for s in self.series for label in s.runs))


def _population_int(where: str, value: Any, minimum: int, allow_none: bool = False) -> Any:
    def one(key: str, v: Any) -> Any:
        if v is None and allow_none:
            return None
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            extra = " or null" if allow_none else ""
            raise ValueError(f"{key}={v!r} is invalid: expected an integer >= {minimum}{extra}")
        return v

    if isinstance(value, Mapping):
        if not value or any(k not in DATA_SCALES for k in value):
            raise ValueError(
                f"{where}={dict(value)!r} is invalid: a per-scale value maps scales ({', '.join(DATA_SCALES)}) "
                "to values"
            )
        return {k: one(f"{where}.{k}", v) for k, v in value.items()}
    return one(where, value)


def _population(where: str, raw: Any, labels: Sequence[str]) -> Population | None:
    """The checked ``population`` entry (None when the file has none)."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}={raw!r} is invalid: a mapping with series (and optionally "
                         f"{', '.join(POPULATION_DEFAULTS)})")
    check_entries(where, raw, {"series", *POPULATION_DEFAULTS})
    raw = {**POPULATION_DEFAULTS, **raw}
    batch_size = _population_int(f"{where}.batch_size", raw["batch_size"], 2, allow_none=True)
    series_raw = raw.get("series")
    if not isinstance(series_raw, list) or not series_raw:
        raise ValueError(f"{where}.series: a non-empty list of {{label, runs, tau}}")
    series = []
    for i, s in enumerate(series_raw):
        at = f"{where}.series[{i}]"
        if not isinstance(s, Mapping):
            raise ValueError(f"{at}={s!r} is invalid: a mapping {{label: text, runs: [run labels], tau: run or optimal}}")
        check_entries(at, s, {"label", "runs", "tau", "batch_size"})
        runs = s.get("runs")
        if not isinstance(runs, list) or not runs or not all(isinstance(r, str) for r in runs):
            raise ValueError(f"{at}.runs={runs!r} is invalid: a non-empty list of run labels")
        bad = [r for r in runs if r not in labels]
        if bad:
            raise ValueError(f"{at}.runs: unknown run(s) {bad}; runs: {', '.join(labels)}")
        if len(set(runs)) != len(runs):
            raise ValueError(f"{at}.runs={runs!r}: each run once")
        tau = s.get("tau", "run")
        if tau not in POPULATION_TAUS:
            raise ValueError(f"{at}.tau={tau!r} is invalid: allowed: {', '.join(POPULATION_TAUS)}")
        taken = [r for r in runs if any(r in earlier.runs for earlier in series)]
        if taken:
            raise ValueError(f"{at}.runs: {taken} already in an earlier series (each run is checked once)")
        size = _population_int(f"{at}.batch_size", s.get("batch_size", batch_size), 2, allow_none=True)
        series.append(PopulationSeries(_text(at, s, "label"), tuple(runs), tau, size))
    epsilons = raw["epsilons"]
    if not isinstance(epsilons, (list, tuple)) or not epsilons or not all(
            not isinstance(e, bool) and isinstance(e, (int, float)) and math.isfinite(e) and e > 0 for e in epsilons):
        raise ValueError(f"{where}.epsilons={epsilons!r} is invalid: a non-empty list of numbers > 0")
    if len(set(epsilons)) != len(epsilons):
        raise ValueError(f"{where}.epsilons={epsilons!r}: each strength once")
    distortions = raw["distortions"]
    if (not isinstance(distortions, (list, tuple)) or not distortions
            or any(d not in POPULATION_DISTORTIONS for d in distortions) or len(set(distortions)) != len(distortions)):
        raise ValueError(f"{where}.distortions={distortions!r} is invalid: a non-empty list of distinct names "
                         f"from {', '.join(POPULATION_DISTORTIONS)}")
    return Population(
        series=tuple(series),
        epsilons=tuple(float(e) for e in epsilons),
        distortions=tuple(distortions),
        batches=_population_int(f"{where}.batches", raw["batches"], 2),
        batch_size=batch_size,
        seed=_population_int(f"{where}.seed", raw["seed"], 0),
    )


@dataclass(frozen=True)
class Experiment:
    """A parsed ``experiment.yaml``; see the module docstring."""

    name: str
    title: str
    paper: str
    reference_source: str
    notes: str
    base: dict[str, Any]
    scales: dict[str, dict[str, Any]]
    runs: tuple[LabelledRun, ...]
    metrics: tuple[str, ...]
    claims: tuple[Claim, ...]
    figures: tuple[dict[str, Any], ...]
    folder: Path
    population: Population | None = None
    tuning: Tuning | None = None

    def scale_names(self) -> tuple[str, ...]:
        """The scales this experiment can run at, in :data:`SCALES` order."""
        return tuple(s for s in SCALES if s not in DATA_SCALES or s in REQUIRED_SCALES or s in self.scales)

    def run(self, label: str) -> LabelledRun:
        for run in self.runs:
            if run.label == label:
                return run
        raise ValueError(f"experiment {self.name}: no run {label!r}; runs: {', '.join(r.label for r in self.runs)}")

    def overrides(self, label: str, scale: str) -> dict[str, Any]:
        """The flat ``--key=value`` overrides of run ``label`` at ``scale``."""
        if scale not in self.scale_names():
            raise ValueError(f"--scale {scale!r}: experiment {self.name} has the scales {', '.join(self.scale_names())}")
        data_scale = "smoke" if scale == "tiny" else scale
        run = self.run(label)
        layers = [self.base, self.scales.get(data_scale, {}), run.overrides, run.scales.get(data_scale, {})]
        if scale == "tiny":
            layers.append(TINY)
        return combine(*layers)

    def config(self, label: str, scale: str, seed: int = 0) -> dict[str, Any]:
        """The resolved, validated config of one run (raises ValueError naming the run and key)."""
        try:
            return load_config(None, {**self.overrides(label, scale), "seed": seed})
        except ValueError as exc:
            raise ValueError(f"experiment {self.name}, run {label}, scale {scale}: {exc}") from exc

    def sweep(self, label: str, scale: str, seeds: int, tuned: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """A W&B grid sweep (as a parsed YAML mapping) of run ``label`` over ``seeds`` seeds 0..seeds-1; ``tuned``:
        the values its tuning chose for its ``tune`` keys."""
        parameters: dict[str, Any] = {"seed": {"values": list(range(seeds))}}
        parameters.update({k: {"value": v} for k, v in combine(self.overrides(label, scale), tuned or {}).items()})
        return {
            "name": f"{self.name}-{scale}-{label}",
            "description": f"{self.name} ({scale} scale): {self.run(label).description}",
            "project": "identifiable-cl",
            "method": "grid",
            "metric": {"name": "r2_linear", "goal": "maximize"},
            "command": list(RUN_COMMAND),
            "parameters": parameters,
        }


    def tuning_metric(self, label: str) -> str:
        """The summary key the tuning of run ``label`` maximises."""
        return self.run(label).tune_metric or self.tuning.metric

    def tuning_sweep(self, label: str, scale: str) -> dict[str, Any]:
        """The W&B bayes sweep that tunes run ``label`` at ``scale`` (as a parsed YAML mapping): its ``tune`` keys
        searched, every other key as at the scale with ``tuning.overrides`` on top, the tuning seed, and the
        tuning steps of the scale (at ``tiny`` the tiny run's steps)."""
        run = self.run(label)
        if not run.tune or self.tuning is None:
            raise ValueError(f"experiment {self.name}: run {label!r} is not tuned (it has no tune entry)")
        fixed = combine(self.overrides(label, scale), self.tuning.overrides)
        steps = self.tuning.steps.get(scale)
        if steps is not None:
            fixed["train.steps"] = steps
            fixed.update({k: min(fixed.get(k, steps), steps) for k in ("train.eval_every", "train.checkpoint_every")})
        parameters: dict[str, Any] = {"seed": {"value": self.tuning.seed}}
        parameters.update({k: {"value": v} for k, v in fixed.items() if k not in run.tune})
        parameters.update(run.tune)
        return {
            "name": f"{self.name}-{scale}-{label}-tuning",
            "description": f"{self.name} ({scale} scale): tuning {', '.join(run.tune)} of {run.description}",
            "project": "identifiable-cl",
            "method": "bayes",
            "metric": {"name": self.tuning_metric(label), "goal": "maximize"},
            "run_cap": self.tuning.count(scale),
            "command": list(RUN_COMMAND),
            "parameters": parameters,
        }


def _text(where: str, raw: Mapping[str, Any], key: str, required: bool = True) -> str:
    value = raw.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}.{key}: required text")
    return value.strip()


def _figure(where: str, raw: Any, labels: set[str]) -> dict[str, Any]:
    if not isinstance(raw, Mapping) or raw.get("kind") not in FIGURE_KINDS or not isinstance(raw.get("name"), str):
        raise ValueError(f"{where}={raw!r} is invalid: a mapping with name and kind ({', '.join(FIGURE_KINDS)})")
    metrics = raw.get("metrics")
    if not isinstance(metrics, list) or not metrics or not all(isinstance(m, str) for m in metrics):
        raise ValueError(f"{where}.metrics: a non-empty list of summary keys")
    if raw["kind"] in ("curves", "bars", "atlas"):
        runs = raw.get("runs")
        if not isinstance(runs, list) or not runs or any(r not in labels for r in runs):
            raise ValueError(f"{where}.runs={runs!r}: a non-empty list of run labels of this experiment")
    else:
        series = raw.get("series")
        if not isinstance(series, list) or not series:
            raise ValueError(f"{where}.series: a non-empty list of {{label, x, runs}}")
        for i, s in enumerate(series):
            if (
                not isinstance(s, Mapping)
                or not isinstance(s.get("label"), str)
                or not isinstance(s.get("x"), str)
                or not isinstance(s.get("runs"), list)
                or any(r not in labels for r in s["runs"])
                or not isinstance(s.get("scale", 1.0), (int, float))
            ):
                raise ValueError(f"{where}.series[{i}]={s!r}: {{label: text, x: config key, runs: [run labels], scale: number (optional)}}")
    return dict(raw)


def parse_experiment(raw: Any, folder: Path, source: str) -> Experiment:
    """Check and parse the mapping of an ``experiment.yaml``; errors name ``source`` and the entry."""
    if not isinstance(raw, Mapping):
        raise ValueError(f"{source}: expected a mapping")
    check_entries(source, raw, {"name", "title", "paper", "reference_source", "notes", "base", "scales", "runs",
                                "metrics", "claims", "figures", "population", "tuning", "cells"})
    if "cells" in raw:
        from identifiable_cl.reproduce import atlas

        base, smoke = _overrides(f"{source}.base", raw.get("base")), _scaled(f"{source}.scales", raw.get("scales"))
        raw = atlas.expand(raw, source, lambda overrides: combine(base, smoke.get("smoke", {}), overrides))
    tuning = _tuning(f"{source}.tuning", raw.get("tuning"))
    runs_raw = raw.get("runs")
    if not isinstance(runs_raw, list) or not runs_raw:
        raise ValueError(f"{source}.runs: a non-empty list of runs")
    runs = []
    for i, r in enumerate(runs_raw):
        where = f"{source}.runs[{i}]"
        if not isinstance(r, Mapping) or not isinstance(r.get("label"), str):
            raise ValueError(f"{where}: a mapping with a label")
        extra = sorted(set(r) - {"label", "description", "overrides", "scales", "reference", "tune", "tune_metric"})
        if extra:
            raise ValueError(f"{where}: unknown entries {extra}")
        reference = r.get("reference") or {}
        if not isinstance(reference, Mapping):
            raise ValueError(f"{where}.reference: a mapping from metric to number or text")
        for metric, value in reference.items():
            if isinstance(value, Mapping) and (not value or any(k not in DATA_SCALES for k in value)):
                raise ValueError(
                    f"{where}.reference.{metric}={dict(value)!r} is invalid: a number or text, or a mapping "
                    f"from scales ({', '.join(DATA_SCALES)}) to numbers or text"
                )
        runs.append(
            LabelledRun(
                label=r["label"],
                description=_text(where, r, "description"),
                overrides=_overrides(f"{where}.overrides", r.get("overrides")),
                scales=_scaled(f"{where}.scales", r.get("scales")),
                reference=dict(reference),
                tune=_tune(f"{where}.tune", r.get("tune")),
                tune_metric=r.get("tune_metric"),
            )
        )
        if runs[-1].tune_metric is not None and (not isinstance(runs[-1].tune_metric, str) or not runs[-1].tune):
            raise ValueError(f"{where}.tune_metric={runs[-1].tune_metric!r} is invalid: a summary key, in a run with tune")
        if runs[-1].tune and tuning is None:
            raise ValueError(f"{where}.tune: a tuned run needs the experiment's tuning entry (runs, seed, metric, steps)")
    labels = [r.label for r in runs]
    if len(set(labels)) != len(labels):
        raise ValueError(f"{source}.runs: labels must be distinct: {labels}")
    metrics = raw.get("metrics")
    if not isinstance(metrics, list) or not metrics or not all(isinstance(m, str) for m in metrics):
        raise ValueError(f"{source}.metrics: a non-empty list of summary keys")
    claims = tuple(Claim.parse(f"{source}.claims[{i}]", c, SCALES) for i, c in enumerate(raw.get("claims") or []))
    for i, claim in enumerate(claims):
        bad = claim.runs() - set(labels)
        if bad:
            raise ValueError(f"{source}.claims[{i}]: unknown run(s) {sorted(bad)}; runs: {', '.join(labels)}")
    figures = tuple(_figure(f"{source}.figures[{i}]", f, set(labels)) for i, f in enumerate(raw.get("figures") or []))
    experiment = Experiment(
        name=_text(source, raw, "name"),
        title=_text(source, raw, "title"),
        paper=_text(source, raw, "paper"),
        reference_source=_text(source, raw, "reference_source"),
        notes=_text(source, raw, "notes", required=False),
        base=_overrides(f"{source}.base", raw.get("base")),
        scales=_scaled(f"{source}.scales", raw.get("scales")),
        runs=tuple(runs),
        metrics=tuple(metrics),
        claims=claims,
        figures=figures,
        folder=folder,
        population=_population(f"{source}.population", raw.get("population"), labels),
        tuning=tuning,
    )
    if experiment.population is not None:
        for scale in experiment.scale_names():
            configs = {label: merge_layer(DEFAULTS, experiment.overrides(label, scale), f"{source} ({scale})")
                       for label in experiment.population.labels()}
            check_population_runs(experiment.population, configs, f"{source}.population")
    return experiment


def experiment_names(root: Path = EXPERIMENTS_DIR) -> list[str]:
    """The experiments under ``root`` (folders holding an ``experiment.yaml``)."""
    return sorted(p.parent.name for p in Path(root).glob(f"*/{FILE}"))


def load_experiment(name: str | Path, root: Path = EXPERIMENTS_DIR) -> Experiment:
    """An experiment by the path of its folder or ``experiment.yaml``, or by name (a folder of ``root``): a folder
    without an ``experiment.yaml`` (an output folder named like the experiment) is no experiment."""
    path = Path(name)
    if (path / FILE).is_file():
        path = path / FILE
    elif not path.is_file():
        path = Path(root) / str(name) / FILE
    if not path.is_file():
        known = ", ".join(experiment_names(root)) or "none"
        raise ValueError(f"experiment {str(name)!r} not found (no {FILE}); experiments in {root}: {known}")
    return parse_experiment(dict(read_yaml_mapping(path, "experiment file")), path.parent, str(path))


WITH_TEMPERATURE = ("infonce", "hard_negative")
"""The losses the check scores: those with a temperature τ."""


def check_population_runs(spec: Population, configs: Mapping[str, Mapping[str, Any]], where: str) -> None:
    """That every run of the entry fits the check (module docstring), from the runs' configs at one scale
    (label → nested config, resolved but not built); a ValueError naming the series and the run otherwise."""
    for i, series in enumerate(spec.series):
        for label in series.runs:
            config = configs[label]
            if config["loss"]["name"] not in WITH_TEMPERATURE:
                raise ValueError(f"{where}.series[{i}]: run {label} has loss.name={config['loss']['name']!r}; the "
                                 f"population check scores losses with a temperature τ: {', '.join(WITH_TEMPERATURE)}")
            if series.tau == "optimal":
                _optimal_setting(config, f"{where}.series[{i}]", label)


def _optimal_setting(config: Mapping[str, Any], where: str, label: str) -> None:
    """The optimal temperature exists for the run ``config`` (vMF, sphere, uniform, cosine InfoNCE)."""
    dgp_config, loss = config["dgp"], config["loss"]
    problems = [f"dgp.{key}.name={dgp_config[key]['name']!r} (needs {wanted})"
                for key, wanted in (("space", "sphere"), ("conditional", "vmf"), ("marginal", "uniform"))
                if dgp_config[key]["name"] != wanted]
    if loss["name"] != "infonce" or loss.get("similarity", "cosine") != "cosine":
        problems.append(f"loss.name={loss['name']!r} with similarity {loss.get('similarity')!r} "
                        "(needs infonce with cosine)")
    if dgp_config["negatives"]["name"] not in ("none", "marginal", "tilted"):
        problems.append(f"dgp.negatives.name={dgp_config['negatives']['name']!r} (needs none, marginal or tilted)")
    if problems:
        raise ValueError(
            f"{where}.tau=optimal: run {label} has {'; '.join(problems)}; the optimal temperature 1/(κ − β r²) "
            "holds for vMF(κ) positives with negatives tilted by β from a uniform marginal on the sphere, scored "
            "by InfoNCE with a cosine critic; use tau: run for this series"
        )


def check_experiment(experiment: Experiment, scales: tuple[str, ...] | None = None) -> None:
    """Resolve every run's config at every scale (default: the experiment's own) and check every generated
    sweep (ValueError on the first problem)."""
    for scale in experiment.scale_names() if scales is None else scales:
        for run in experiment.runs:
            experiment.config(run.label, scale)
            parse_sweep(experiment.sweep(run.label, scale, 1), f"{experiment.name}/{run.label} ({scale})")
            if run.tune:
                sweep = experiment.tuning_sweep(run.label, scale)
                parse_sweep(sweep, f"{experiment.name}/{run.label} tuning ({scale})")
                try:
                    load_config(None, {k: p["value"] for k, p in sweep["parameters"].items() if "value" in p})
                except ValueError as exc:
                    raise ValueError(f"experiment {experiment.name}, tuning of run {run.label}, scale {scale} (the "
                                     f"run's keys with tuning.overrides): {exc}") from exc
