"""results.md and the figures of a reproduced experiment, from the runs' own files.

Figures listed in ``experiment.yaml`` (``figures:``), each a PNG in ``OUT/figures``:

- ``kind: curves`` — ``runs: [labels]``, ``metrics: [keys]``: one panel per run, each
  metric of ``metrics.jsonl`` against the training step (mean over seeds, band ± one std),
  e.g. the linear R² of the high-Λ and low-Λ blocks for InfoNCE and AnInfoNCE.
- ``kind: against`` — ``series: [{label, x: config key, runs: [labels], scale: number}]``
  (``scale``, default 1, multiplies the x values, to put two series on one axis),
  ``metrics: [keys]``, optional ``vline: number`` and ``xlabel``: one panel per metric,
  each series' final summary metric (mean ± std over seeds) against the value of its
  config key ``x`` in each run, e.g. recovery against the hard-negative β.
- ``kind: bars`` — ``runs: [labels]``, ``metrics: [keys]``: one panel per metric, one bar per
  run (its final summary metric, mean ± std over seeds), e.g. recovery by loss on one process;
  each bar coloured by its loss's family (``plots.LOSS_FAMILIES``, legend under the panels),
  with a black dash at its identity baseline g(z) and the chance level the metric catalog states
  (R²: 0, dotted; MCC states none, so its panels show the identity baseline only).

The score panels (R², MCC, DCI, per block, view or control) of ``against`` and ``bars`` figures all
share one y-axis, ``plots.SCORE_LIMITS`` = [0, 1], so a bar at 0.02 looks small beside one at 0.9
in any panel; a score below 0 is written as a number at the axis floor instead of drawn.

A metric with a chance reference (``plots.REFERENCES``: block-aware MCC, whose reference is
the score of a random rotation of z on the same held-out latents) has it beside it in the
results table and as a black dashed line labelled "random rotation" in every kind of figure.

An experiment with a ``population`` entry gets a "Population check (no training)" section
(:func:`identifiable_cl.reproduce.population.section`) after the results table.
"""

from __future__ import annotations

import math
import platform
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from identifiable_cl import rundir
from identifiable_cl.plots import (
    FAMILY_COLOURS,
    REFERENCE_LABEL,
    REFERENCES,
    chance_level,
    loss_family,
    score_axis,
    score_metric,
)
from identifiable_cl.reproduce.claims import FAILS, HOLDS, Verdict, check, tally
from identifiable_cl.reproduce.experiment import Experiment
from identifiable_cl.reproduce.population import PopulationCheck, section as population_section
from identifiable_cl.aggregate import Run, RunSet, mean_std
from identifiable_cl.sweeps.local import RUN


@dataclass
class RunResults(RunSet):
    """The seeds of one labelled run: successful and failed runs, means and stds of every summary metric."""

    label: str
    runs: list[Run] = field(default_factory=list)

    def mean(self, metric: str) -> float | None:
        return self.stats(metric)[0]

    def std(self, metric: str) -> float | None:
        return self.stats(metric)[1]

    def means(self) -> dict[str, float]:
        keys = {k for r in self.succeeded for k in r.summary}
        return {k: m for k in keys if (m := self.mean(k)) is not None}

    def chance(self, metric: str) -> float | None:
        """The mean over seeds of ``metric``'s chance reference (``plots.REFERENCES``); None without one."""
        return self.mean(REFERENCES[metric]) if metric in REFERENCES else None

    def curves(self, metric: str) -> tuple[list[int], list[float], list[float]]:
        """Steps at which every successful seed evaluated ``metric``, with mean and std (0 for one seed)."""
        per_run = []
        for run in self.succeeded:
            records = rundir.read_metrics(run.path / RUN if (run.path / RUN).is_dir() else run.path)
            per_run.append({r["step"]: float(r[metric]) for r in records if isinstance(r.get(metric), (int, float))})
        if not per_run:
            return [], [], []
        steps = sorted(set.intersection(*(set(p) for p in per_run)))
        means = [statistics.fmean(p[s] for p in per_run) for s in steps]
        stds = [statistics.stdev(p[s] for p in per_run) if len(per_run) > 1 else 0.0 for s in steps]
        return steps, means, stds


def _cell(mean: float | None, std: float | None, n: int) -> str:
    if mean is None:
        return "—"
    text = f"{mean:.3f} ± {std:.3f}" if std is not None else f"{mean:.3f}"
    return f"{text} (n={n})"


def _reference(value: Any) -> str:
    if value is None:
        return "—"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def _with_chance(reference: Any, chance: float | None) -> str:
    """The reference cell of a metric, followed by its chance reference (mean over seeds) when it has one."""
    if chance is None:
        return _reference(reference)
    text = f"{REFERENCE_LABEL}: {chance:.3f}"
    return text if reference is None else f"{_reference(reference)}; {text}"


def table(experiment: Experiment, results: Mapping[str, RunResults], scale: str = "smoke") -> str:
    """| run | metric | ours | reference | identity g(z) | for every run and table metric present,
    with the reference numbers of ``scale``.

    The reference cell of a metric with a chance reference (block-aware MCC) also gives that
    reference's mean over seeds, and a note under the table says what it is.
    """
    lines = ["| run | metric | ours (mean ± std over seeds) | reference | identity g(z) |", "|---|---|---|---|---|"]
    chance_shown = set()
    for spec in experiment.runs:
        res = results[spec.label]
        for metric in experiment.metrics:
            if metric == "lambda_learned":
                continue
            n = len(res.metric_values(metric))
            reference = spec.reference_at(metric, scale)
            if n == 0 and reference is None:
                continue
            identity = res.mean(f"identity_{metric}")
            chance = res.chance(metric)
            if chance is not None:
                chance_shown.add(metric)
            lines.append(
                f"| {spec.label} | {metric} | {_cell(res.mean(metric), res.std(metric), n)} | "
                f"{_with_chance(reference, chance)} | {'—' if identity is None else f'{identity:.3f}'} |"
            )
        learned = [r.summary.get("lambda_learned") for r in res.succeeded if isinstance(r.summary.get("lambda_learned"), list)]
        if learned and "lambda_learned" in experiment.metrics:
            sorted_mean = [statistics.fmean(v) for v in zip(*(sorted(x) for x in learned))]
            truth = next((r.summary.get("lambda_true") for r in res.succeeded if r.summary.get("lambda_true")), None)
            lines.append(
                f"| {spec.label} | Λ̂ sorted (mean over seeds) | {', '.join(f'{v:.2f}' for v in sorted_mean)} | "
                f"{_reference(spec.reference_at('lambda_learned', scale))} | true Λ: "
                f"{', '.join(f'{v:g}' for v in sorted(truth)) if truth else '—'} |"
            )
    if chance_shown:
        names = ", ".join(sorted(chance_shown))
        lines += [
            "",
            f"{REFERENCE_LABEL} ({names}): the block-aware MCC of h = z R for Haar-random orthogonal R on the "
            "run's own held-out latents, mean over seeds. Block-aware MCC forgives any orthogonal map inside "
            "each Λ group, so this, not 0, is its chance level: a score means something only above it.",
        ]
    return "\n".join(lines)


def cell(text: Any) -> str:
    """``text`` as a Markdown table cell: its pipes (``|s|``) escaped, so that they do not split the row."""
    return str(text).replace("|", "\\|")


def verdict_table(verdicts: Sequence[Verdict]) -> str:
    rows = [f"| {cell(v.claim.text)} | **{v.state}** | {cell(v.detail)} |" for v in verdicts]
    return "\n".join(["| claim | verdict | numbers |", "|---|---|---|", *rows])


def machine() -> str:
    """Processor, core count, OS, Python and torch versions, and the GPU when one is used."""
    import os

    import torch

    gpu = f", GPU {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else ", no GPU"
    return (
        f"{platform.machine()} {platform.processor() or ''}".strip()
        + f", {os.cpu_count()} logical cores{gpu}; {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}, torch {torch.__version__}"
    )


def markdown(
    experiment: Experiment,
    scale: str,
    seeds: int,
    results: Mapping[str, RunResults],
    verdicts: Sequence[Verdict],
    figures: Mapping[str, Path],
    command: str,
    out: Path,
    wall_s: float,
    population: PopulationCheck | None = None,
    pending: Sequence[str] = (),
    tuned: str = "",
) -> str:
    """The text of results.md; ``population``: the experiment's population check, when it has one;
    ``pending``: the planned runs left out because they have not finished (``--report-only``); ``tuned``: one line
    saying where the tuned runs' values came from."""
    parts = [
        f"# {experiment.title}", "", f"Paper: {experiment.paper}", "",
        f"Scale **{scale}**, {'seed 0' if seeds == 1 else f'seeds 0–{seeds - 1}'}. Command: `{command}`", "",
        f"Machine: {machine()}. Wall time of this invocation: {wall_s:.0f} s.", "",
    ]
    if tuned:
        parts += [tuned, ""]
    if scale == "tiny":
        parts += ["**Scale tiny checks the plumbing only** (a few steps, small samples): the verdicts below say "
                  "nothing about the paper's claims; run `--scale smoke` or `--scale paper` for those.", ""]
    if experiment.notes:
        parts += [experiment.notes, ""]
    cells = any(spec["kind"] == "atlas" for spec in experiment.figures)
    if cells:  # the atlas: the cells that contradict their prediction first
        verdicts = sorted(verdicts, key=lambda v: v.state != FAILS)
    parts += [f"## Claims ({tally(verdicts)})", "", verdict_table(verdicts) if verdicts else "No claims at this scale.", ""]
    if cells:
        parts += ["## Cells", "", cells_table(experiment, results, scale), ""]
    parts += ["## Results", "", f"Reference numbers: {experiment.reference_source}", "",
              table(experiment, results, scale), ""]
    if pending:
        parts += [f"Not finished when this report was written, so left out: {', '.join(pending)}.", ""]
    failed = [r for res in results.values() for r in res.failed]
    if failed:
        parts += [f"{len(failed)} failed run(s):", ""] + [f"- {r.path}: {r.problem}" for r in failed] + [""]
    if population is not None:
        parts += [population_section(population)]
    if figures:
        parts += ["## Figures", ""]
        parts += [f"![{name}]({path.relative_to(out).as_posix()})" for name, path in figures.items()] + [""]
    parts += ["## Runs", "", "Each run's overrides at this scale (over the defaults of `identifiable_cl/config.py`):", ""]
    for spec in experiment.runs:
        overrides = " ".join(f"--{k}={v}" for k, v in experiment.overrides(spec.label, scale).items())
        parts.append(f"- **{spec.label}** — {spec.description}: `{overrides}`")
    parts.append("")
    return "\n".join(parts)


def _curves_figure(spec: Mapping[str, Any], results: Mapping[str, RunResults]):
    from matplotlib.figure import Figure

    runs = spec["runs"]
    fig = Figure(figsize=(4.5 * len(runs), 3.8), layout="constrained")
    axes = fig.subplots(1, len(runs), sharey=True, squeeze=False)[0]
    for ax, label in zip(axes, runs):
        for metric in spec["metrics"]:
            steps, means, stds = results[label].curves(metric)
            if not steps:
                continue
            line = ax.plot(steps, means, marker="o", ms=3, label=metric)[0]
            ax.fill_between(steps, [m - s for m, s in zip(means, stds)], [m + s for m, s in zip(means, stds)],
                            color=line.get_color(), alpha=0.2)
            chance = results[label].chance(metric)
            if chance is not None:
                ax.axhline(chance, color="black", ls="--", lw=1.0, label=f"{REFERENCE_LABEL} ({metric})")
        ax.set(title=label, xlabel="training step")
        if ax.has_data():
            ax.legend(fontsize=8)
    axes[0].set_ylabel(spec.get("ylabel", "held-out score"))
    if spec.get("title"):
        fig.suptitle(spec["title"])
    return fig


def _against_figure(spec: Mapping[str, Any], results: Mapping[str, RunResults], experiment: Experiment, scale: str):
    from matplotlib.figure import Figure

    metrics = spec["metrics"]
    fig = Figure(figsize=(4.5 * len(metrics), 3.8), layout="constrained")
    axes = fig.subplots(1, len(metrics), squeeze=False)[0]
    for ax, metric in zip(axes, metrics):
        drawn: list[tuple[float, float]] = []
        for series in spec["series"]:
            points = []
            for label in series["runs"]:
                x = experiment.overrides(label, scale).get(series["x"])
                mean, std = results[label].mean(metric), results[label].std(metric)
                if isinstance(x, (int, float)) and mean is not None:
                    points.append((float(x * series.get("scale", 1.0)), mean, std or 0.0))
            drawn += [(x, y) for x, y, _ in points]
            if points:
                xs, ys, es = zip(*sorted(points))
                bars = ax.errorbar(xs, ys, yerr=es, marker="o", capsize=3, label=series["label"])
                chances = [c for label in series["runs"] if (c := results[label].chance(metric)) is not None]
                if chances:
                    ax.axhline(statistics.fmean(chances), color=bars.lines[0].get_color(), ls="--", lw=1.0,
                               label=f"{series['label']}: {REFERENCE_LABEL}")
        if drawn and all(float(x).is_integer() for x, _ in drawn):  # layers, segments, ...: whole numbers
            from matplotlib.ticker import MaxNLocator

            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if isinstance(spec.get("vline"), (int, float)):
            ax.axvline(spec["vline"], color="black", ls="--", lw=0.8)
        if score_metric(metric) is not None:
            score_axis(ax, [x for x, _ in drawn], [y for _, y in drawn])
        ax.set(title=metric, xlabel=spec.get("xlabel", "x"))
        if ax.has_data():
            ax.legend(fontsize=8)
    if spec.get("title"):
        fig.suptitle(spec["title"])
    return fig


def _bars_figure(spec: Mapping[str, Any], results: Mapping[str, RunResults], losses: Mapping[str, str] | None = None):
    """One panel per metric, one bar per run (mean over seeds, grey whisker ± one std) coloured by the family of its loss
    (``losses``: run label -> ``loss.name``; a run without one is drawn as ``plots.OTHER_FAMILY``), a black dash
    across each bar at its identity baseline g(z) (``identity_<metric>``, mean over seeds), the chance level the
    metric catalog states as a dotted line (R²: 0; MCC states none, so its panels have no such line), and a
    measured chance reference (block-aware MCC's random rotation) as a dashed one. Score panels share
    ``plots.SCORE_LIMITS``."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    runs, metrics = spec["runs"], spec["metrics"]
    families = [loss_family((losses or {}).get(label, "")) for label in runs]
    fig = Figure(figsize=(max(4.5, 0.45 * len(runs) + 1.5) * len(metrics), 4.8), layout="constrained")
    axes = fig.subplots(1, len(metrics), squeeze=False)[0]
    xs = list(range(len(runs)))
    for ax, metric in zip(axes, metrics):
        means = [results[label].mean(metric) for label in runs]
        stds = [results[label].std(metric) or 0.0 for label in runs]
        ax.bar(xs, [math.nan if m is None else m for m in means], yerr=stds, error_kw={"ecolor": "0.35", "lw": 1},
               color=[FAMILY_COLOURS[f] for f in families])
        baselines = [results[label].mean(f"identity_{metric}") for label in runs]
        if any(b is not None for b in baselines):
            ax.plot(xs, [math.nan if b is None else b for b in baselines], ls="none", marker="_", ms=18, mew=2.5,
                    color="black", label="identity g(z)")
        stated = chance_level(metric)
        if stated is not None:
            ax.axhline(stated, color="black", ls=":", lw=1.2, label=f"chance ({stated:g})")
        chances = [c for label in runs if (c := results[label].chance(metric)) is not None]
        if chances:
            ax.axhline(statistics.fmean(chances), color="black", ls="--", lw=1.0, label=REFERENCE_LABEL)
        ax.set_xticks(xs, runs, rotation=60, ha="right", fontsize=8)
        if score_metric(metric) is not None:
            score_axis(ax, xs, means)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
        ax.set(title=metric)
    axes[0].set_ylabel(spec.get("ylabel", "held-out score"))
    shown = dict.fromkeys(families)
    fig.legend(handles=[Patch(color=FAMILY_COLOURS[f], label=f) for f in shown], loc="outside lower center",
               ncols=len(shown), fontsize=8, title="loss family", title_fontsize=8)
    if spec.get("title"):
        fig.suptitle(spec["title"])
    return fig


CELL_STATES = {HOLDS: "agrees", FAILS: "contradicts"}
"""How a cell's claim verdict reads in the atlas (any other: not measured)."""


def cell_verdicts(experiment: Experiment, results: Mapping[str, RunResults], scale: str) -> dict[str, tuple[str, Any]]:
    """Per atlas cell (run label): its verdict (agrees, contradicts, not measured, no theorem) and its claim (None
    without a prediction)."""
    means = {label: res.means() for label, res in results.items()}
    claims = {claim.left.run: claim for claim in experiment.claims}
    out = {}
    for spec in experiment.runs:
        claim = claims.get(spec.label)
        state = "no theorem" if claim is None else CELL_STATES.get(check(claim, means, scale).state, "not measured")
        out[spec.label] = (state, claim)
    return out


def cells_table(experiment: Experiment, results: Mapping[str, RunResults], scale: str) -> str:
    """The atlas per cell: loss, family, prediction and source, its metric's mean ± std over seeds, the identity
    baseline's, and the verdict; cells that contradict their prediction first, then agreeing, unmeasured and
    theorem-less ones."""
    from identifiable_cl.reproduce.atlas import HEADLINE, cell_of

    order = {"contradicts": 0, "agrees": 1, "not measured": 2, "no theorem": 3}
    rows = ["| loss | family | prediction | metric | measured | identity g(z) | verdict |", "|---|---|---|---|---|---|---|"]
    verdicts = cell_verdicts(experiment, results, scale)
    for label, (state, claim) in sorted(verdicts.items(), key=lambda item: (order[item[1][0]], item[0])):
        loss, family = cell_of(label)
        metric = claim.left.metric if claim is not None else HEADLINE[0]
        said = claim.text.split(": ", 1)[1] if claim is not None else "none known"
        res = results[label]
        identity = res.mean(f"identity_{metric}")
        rows.append(f"| {loss} | {family} | {cell(said)} | {metric} | {mean_std(res.mean(metric), res.std(metric))} | "
                    f"{'—' if identity is None else f'{identity:.3f}'} | {state} |")
    return "\n".join(rows)


def _atlas_figure(spec: Mapping[str, Any], results: Mapping[str, RunResults], experiment: Experiment, scale: str):
    """The atlas's matrix: a row per loss, a column per process family; each cell coloured by the mean of its
    prediction's metric (without a prediction: its linear R²), marked ✓ where the runs agree with the prediction,
    ✗ where they contradict it, – where no theorem is known, ? where nothing was measured; blank: no such cell."""
    import numpy as np
    from matplotlib.figure import Figure

    from identifiable_cl.reproduce.atlas import HEADLINE, cell_of

    verdicts = cell_verdicts(experiment, results, scale)
    losses = sorted({cell_of(label)[0] for label in spec["runs"]})
    families = list(dict.fromkeys(cell_of(label)[1] for label in spec["runs"]))
    values = np.full((len(losses), len(families)), np.nan)
    fig = Figure(figsize=(1.3 * len(families) + 3, 0.45 * len(losses) + 2), layout="constrained")
    ax = fig.subplots()
    marks = {"agrees": "✓", "contradicts": "✗", "no theorem": "–", "not measured": "?"}
    for label in spec["runs"]:
        loss, family = cell_of(label)
        i, j = losses.index(loss), families.index(family)
        state, claim = verdicts[label]
        mean = results[label].mean(claim.left.metric if claim is not None else HEADLINE[0])
        values[i, j] = math.nan if mean is None else mean
        ax.text(j, i, marks[state] if results[label].succeeded else "?", ha="center", va="center", fontsize=11,
                color="white" if mean is not None and mean < 0.5 else "black")
    image = ax.imshow(values, vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(families)), families, rotation=30, ha="right")
    ax.set_yticks(range(len(losses)), losses)
    fig.colorbar(image, ax=ax, label="the prediction's metric (linear R² without one)")
    ax.set_title(spec.get("title", f"{experiment.name}: ✓ agrees, ✗ contradicts, – no theorem, ? not measured"))
    return fig


def loss_names(experiment: Experiment, scale: str, labels: Sequence[str]) -> dict[str, str]:
    """Run label -> its ``loss.name`` at ``scale`` (what the bar figures colour by)."""
    return {label: experiment.config(label, scale)["loss"]["name"] for label in labels}


FIGURES = {"curves": lambda spec, results, experiment, scale: _curves_figure(spec, results),
           "against": _against_figure,
           "bars": lambda spec, results, experiment, scale: _bars_figure(
               spec, results, loss_names(experiment, scale, spec["runs"])),
           "atlas": _atlas_figure}
"""How each kind of figure is drawn."""


def draw(experiment: Experiment, scale: str, results: Mapping[str, RunResults], out: Path) -> dict[str, Path]:
    """Draw every figure of the experiment into ``out/figures`` whose runs have any result (a panel without one says
    so); ``{}`` without matplotlib."""
    try:
        import matplotlib  # noqa: F401
    except ModuleNotFoundError:
        return {}
    paths = {}
    for spec in experiment.figures:
        labels = spec.get("runs") or [label for series in spec.get("series", ()) for label in series["runs"]]
        if not any(results[label].succeeded for label in labels):  # none of its runs has finished: no empty frame
            continue
        fig = FIGURES[spec["kind"]](spec, results, experiment, scale)
        for ax in fig.axes:
            if not ax.has_data() and ax.get_title():
                ax.text(0.5, 0.5, "no finished run", ha="center", va="center", transform=ax.transAxes, color="0.4")
        path = Path(out) / "figures" / f"{spec['name']}.png"
        rundir.save_figure(path, fig)
        paths[spec["name"]] = path
    return paths
