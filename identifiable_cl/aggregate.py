"""``icl results``: tables of mean ± std over seeds, read from the runs' own files.

A run is either a sweep run folder written by ``icl sweep run`` / ``submit``
(``status.json``, ``params.yaml``, and the ``icl train`` run directory in
``run/``) or a bare ``icl train`` run directory (``config.yaml``). A run
succeeded when its ``summary.json`` exists and, for sweep runs, its exit code
is 0; every other run counts as failed and is listed, never dropped.

Runs are grouped by the swept parameters (the keys of ``params.yaml``; for
bare run directories, the config keys whose values differ between runs),
leaving out ``seed``; each group reports every metric's mean, sample standard
deviation (ddof = 1) and the number of successful runs.
"""

from __future__ import annotations

import csv
import difflib
import io
import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from identifiable_cl.config import flat_keys
from identifiable_cl.yamlfiles import read_yaml_mapping
from identifiable_cl.evaluation.catalog import labels
from identifiable_cl.plots import view_metrics
from identifiable_cl.rundir import CONFIG, DGP, STOPPED, SUMMARY, is_run_dir, read_json
from identifiable_cl.sweeps.local import LOG, RUN, STATUS, RunFolder, lost, read_status, stopped_by_signal

DEFAULT_METRICS = tuple(labels())
"""Columns of a table without ``--metrics``, those present in some run's summary: the metric catalog's
headline metrics, each followed by its chance reference (block-aware MCC: the block-aware MCC of a random
rotation of z on the same held-out latents)."""
FORMATS = ("md", "csv", "json", "latex")
SEED = "seed"


@dataclass
class Run:
    """One run found on disk: where, its parameters, whether it succeeded, and its summary."""

    path: Path
    params: dict[str, Any]
    swept: tuple[str, ...]
    summary: dict[str, Any] | None
    problem: str | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None


class RunSet:
    """Methods shared by collections of runs with a ``runs`` list (seeds of one configuration)."""

    runs: list[Run]

    @property
    def succeeded(self) -> list[Run]:
        return [r for r in self.runs if r.ok]

    @property
    def failed(self) -> list[Run]:
        return [r for r in self.runs if not r.ok]

    def metric_values(self, metric: str) -> list[float]:
        """The finite numeric values of ``metric`` over the successful runs."""
        values = [run.summary.get(metric) for run in self.succeeded]
        return [float(v) for v in values
                if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]

    def stats(self, metric: str) -> tuple[float | None, float | None, int]:
        """:func:`stats` of a metric over the successful runs."""
        return stats(self.metric_values(metric))


def stats(values: Sequence[float]) -> tuple[float | None, float | None, int]:
    """Mean, sample std (None below two values) and count of ``values`` (None, None, 0 without any)."""
    if not values:
        return None, None, 0
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else None, len(values)


@dataclass
class Group(RunSet):
    """Runs sharing the values of the grouping keys (``key``: their text, ``values``: as read)."""

    key: tuple[str, ...]
    values: dict[str, Any]
    runs: list[Run] = field(default_factory=list)


def _read_yaml(path: Path) -> dict[str, Any]:
    """The YAML mapping in ``path``, empty when it is missing; a ValueError naming it when damaged."""
    return dict(read_yaml_mapping(path, "file")) if path.exists() else {}


def _damaged(folder: Path, exc: ValueError) -> Run:
    """A run whose files cannot be read: listed as failed with the reason, never dropped."""
    return Run(folder, {}, (), None, f"unreadable: {exc}")


def _stopped(run_dir: Path) -> str:
    """Why a diverged run stopped (from its ``stopped.json``), or empty."""
    stopped = read_json(run_dir / STOPPED, missing_ok=True)
    return f"; {stopped.get('reason')}" if stopped else ""


def sweep_run(folder: Path) -> Run:
    """A run folder of ``icl sweep run``."""
    record = RunFolder.read(folder)
    status, params, summary, run_dir = record.status or {}, record.params or {}, record.summary, record.run_dir
    try:
        if record.damaged:
            raise ValueError(record.damaged)
        config = flat_keys(_read_yaml(run_dir / CONFIG))
        stopped = _stopped(run_dir)
    except ValueError as exc:
        return _damaged(folder, exc)
    code = status.get("exit_code")
    if status.get("state") == "stopped":
        problem = f"stopped early by {status.get('stopped_by', 'the sweep')}, log {folder / LOG}"
    elif lost(status):
        problem = (f"lost: its runner stopped reporting (last heartbeat {status['heartbeat']}); running the sweep "
                   f"again continues it, log {folder / LOG}")
    elif code is None:
        problem = f"{status.get('state', 'not started')} (no exit code), log {folder / LOG}"
    elif stopped_by_signal(status.get("state"), code):
        problem = f"interrupted (exit {code}; running the sweep again continues it), log {folder / LOG}"
    elif code != 0:
        problem = f"exit {code}{stopped}, log {folder / LOG}"
    elif summary is None:
        problem = f"exit 0 but no {SUMMARY} in {run_dir}"
    else:
        problem = None
    return Run(folder, {**config, **params}, tuple(params), summary, problem)


def train_run(run_dir: Path) -> Run:
    """A bare ``icl train`` run directory."""
    try:
        summary = read_json(run_dir / SUMMARY, missing_ok=True)
        config = flat_keys(_read_yaml(run_dir / CONFIG))
        stopped = _stopped(run_dir)
    except ValueError as exc:
        return _damaged(run_dir, exc)
    problem = None if summary is not None else f"no {SUMMARY} (failed or unfinished){stopped}"
    return Run(run_dir, config, (), summary, problem)


def _plan_order(folder: Path) -> tuple[str, int]:
    """Sweep runs by sweep folder, then in the order the sweep planned them."""
    index = (read_status(folder) or {}).get("index")
    return str(folder.parent), index if isinstance(index, int) else -1


def find_runs(paths: Iterable[str | Path]) -> list[Run]:
    """Every run under the given folders (each path may itself be a run): sweep runs in plan order,
    then bare run directories (``config.yaml`` beside ``dgp.pt``) in path order."""
    runs: list[Run] = []
    seen: set[Path] = set()
    for root in paths:
        root = Path(root)
        if not root.exists():
            raise ValueError(f"{str(root)!r} does not exist")
        sweep_folders = sorted({p.parent.resolve() for p in root.rglob(STATUS)} - seen, key=_plan_order)
        for folder in sweep_folders:
            seen.update({folder, (folder / RUN).resolve()})
            runs.append(sweep_run(folder))
        for folder in sorted({p.parent.resolve() for p in root.rglob(DGP)} - seen):
            if is_run_dir(folder):
                seen.add(folder)
                runs.append(train_run(folder))
    return runs


def default_group_keys(runs: Sequence[Run]) -> list[str]:
    """The swept keys (or, without any, the config keys that vary), without ``seed``, where values differ."""
    swept = list(dict.fromkeys(k for r in runs for k in r.swept))
    candidates = swept or list(dict.fromkeys(k for r in runs for k in r.params))
    return [k for k in candidates if k != SEED and len({_text(r.params.get(k)) for r in runs}) > 1]


def _text(value: Any) -> str:
    if value is None:
        return "—"
    return json.dumps(value) if isinstance(value, (list, dict)) else str(value)


def group_runs(runs: Sequence[Run], keys: Sequence[str]) -> list[Group]:
    groups: dict[tuple[str, ...], Group] = {}
    for run in runs:
        key = tuple(_text(run.params.get(k)) for k in keys)
        groups.setdefault(key, Group(key, {k: run.params.get(k) for k in keys})).runs.append(run)
    return list(groups.values())


IDENTITY = "identity_"
"""The prefix of a summary's identity-baseline metrics: the same measure of the observations x = g(z) themselves."""


def default_metrics(runs: Sequence[Run]) -> list[str]:
    """The catalog's headline metrics present in some run's summary, each followed by its identity baseline where
    a summary holds it (``identity_<metric>``: how far the observations themselves go, the bar an encoder has to
    clear), then (runs with views) the block table of each such run (:func:`identifiable_cl.plots.view_metrics`)."""
    present = {k for r in runs if r.summary for k in r.summary}
    metrics = [key for m in DEFAULT_METRICS if m in present for key in (m, IDENTITY + m) if key in present]
    for run in runs:
        metrics += [k for k in view_metrics(run.summary or {}) if k not in metrics]
    return metrics


def mean_std(mean: float | None, std: float | None, missing: str = "—", pm: str = "±") -> str:
    """``mean ± std`` to three decimals (``mean`` alone without a std, ``missing`` without a mean)."""
    if mean is None:
        return missing
    return f"{mean:.3f} {pm} {std:.3f}" if std is not None else f"{mean:.3f}"


def format_md(groups: Sequence[Group], keys: Sequence[str], metrics: Sequence[str]) -> str:
    header = [*keys, *metrics, "n", "failed"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for g in groups:
        cells = [*g.key, *(mean_std(*g.stats(m)[:2]) for m in metrics), str(len(g.succeeded)), str(len(g.failed))]
        lines.append("| " + " | ".join(cells) + " |")
    failed = [r for g in groups for r in g.failed]
    if failed:
        lines += ["", f"{len(failed)} failed run(s):"]
        lines += [f"- {r.path}: {r.problem}" for r in failed]
    return "\n".join(lines)


def format_csv(groups: Sequence[Group], keys: Sequence[str], metrics: Sequence[str]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([*keys, *(f"{m}_{s}" for m in metrics for s in ("mean", "std")), "n", "failed"])
    for g in groups:
        values = []
        for m in metrics:
            mean, std, _ = g.stats(m)
            values += ["" if mean is None else repr(mean), "" if std is None else repr(std)]
        writer.writerow([*g.key, *values, len(g.succeeded), len(g.failed)])
    return buffer.getvalue().rstrip("\n")


def format_json(groups: Sequence[Group], keys: Sequence[str], metrics: Sequence[str]) -> str:
    rows = [
        {
            "group": g.values,
            "metrics": {m: dict(zip(("mean", "std", "n"), g.stats(m))) for m in metrics},
            "n": len(g.succeeded),
            "failed": len(g.failed),
            "failed_runs": [{"path": str(r.path), "problem": r.problem} for r in g.failed],
            "seeds": [r.params.get(SEED) for r in g.succeeded],
        }
        for g in groups
    ]
    return json.dumps(rows, indent=2)


LATEX_SPECIAL = {
    "\\": r"\textbackslash{}", "_": r"\_", "%": r"\%", "&": r"\&", "#": r"\#", "$": r"\$",
    "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "—": "---",
}
"""Characters that LaTeX reads as commands, and how each is written as text."""


def latex_escape(text: str) -> str:
    """``text`` as LaTeX text: ``_ % & # $ { } ~ ^ \\`` escaped (and ``—``, a missing value, as ``---``)."""
    return "".join(LATEX_SPECIAL.get(char, char) for char in str(text))


def format_latex(groups: Sequence[Group], keys: Sequence[str], metrics: Sequence[str]) -> str:
    """A booktabs ``tabular`` (needs ``\\usepackage{booktabs}``): one row per group, ``mean $\\pm$ std`` cells;
    failed runs are listed after it as LaTeX comments."""
    header = [*keys, *metrics, "n", "failed"]
    lines = [
        "\\begin{tabular}{" + "l" * len(keys) + "r" * (len(metrics) + 2) + "}",
        "\\toprule",
        " & ".join(latex_escape(h) for h in header) + " \\\\",
        "\\midrule",
    ]
    for g in groups:
        cells = [*(latex_escape(k) for k in g.key), *(mean_std(*g.stats(m)[:2], "---", "$\\pm$") for m in metrics),
                 str(len(g.succeeded)), str(len(g.failed))]
        lines.append(" & ".join(cells) + " \\\\")
    lines += ["\\bottomrule", "\\end{tabular}"]
    failed = [r for g in groups for r in g.failed]
    if failed:
        lines.append(f"% {len(failed)} failed run(s):")
        lines += [" ".join(f"% - {r.path}: {r.problem}".split()) for r in failed]
    return "\n".join(lines)


FORMATTERS = {"md": format_md, "csv": format_csv, "json": format_json, "latex": format_latex}


def results(
    paths: Sequence[str | Path],
    *,
    group_by: Sequence[str] | None = None,
    metrics: Sequence[str] | None = None,
    fmt: str = "md",
) -> str:
    """The aggregated table of all runs under ``paths`` in format ``fmt`` (one of :data:`FORMATS`)."""
    if fmt not in FORMATTERS:
        raise ValueError(f"--format {fmt!r}: allowed: {', '.join(FORMATS)}")
    return table(*grouped(paths, group_by), metrics=metrics, fmt=fmt)


def grouped(paths: Sequence[str | Path],
            group_by: Sequence[str] | None = None) -> tuple[list[Run], list[str], list[Group]]:
    """Every run under ``paths`` (:func:`find_runs`), the keys they are grouped by (``group_by``, else
    :func:`default_group_keys`) and their groups (:func:`group_runs`); a ValueError for no runs or a key no run has."""
    runs = find_runs(paths)
    if not runs:
        raise ValueError(f"no runs found under {', '.join(map(str, paths))} (no status.json or config.yaml)")
    keys = list(group_by) if group_by is not None else default_group_keys(runs)
    known = {k for r in runs for k in r.params}
    unknown = [k for k in keys if k not in known]
    if unknown:
        close = difflib.get_close_matches(unknown[0], sorted(known), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else f"; the runs' parameters: {', '.join(sorted(known))}"
        raise ValueError(f"--group-by {','.join(unknown)}: not a parameter of any run found{hint}")
    return runs, keys, group_runs(runs, keys)


def refuse_unknown_metrics(metrics: Sequence[str] | None, runs: Sequence[Run]) -> None:
    """A ValueError naming each of ``metrics`` that no finished run's summary holds, with the closest ones they do."""
    held = sorted({key for run in runs if run.summary for key in run.summary})
    unknown = [m for m in metrics or () if m not in held]
    if unknown and held:
        hints = [f"{m!r}" + (f" (did you mean {', '.join(close)}?)" if (close := difflib.get_close_matches(m, held, n=3))
                             else "") for m in unknown]
        raise ValueError(f"--metrics: no finished run records {', '.join(hints)}; icl results --metrics KEYS takes "
                         "keys of the runs' summary.json")


def table(runs: Sequence[Run], keys: Sequence[str], groups: Sequence[Group], *, metrics: Sequence[str] | None = None,
          fmt: str = "md") -> str:
    """:func:`grouped`'s runs as the table of format ``fmt``: ``metrics`` (default: :func:`default_metrics`) per
    group."""
    metrics = list(metrics) if metrics is not None else default_metrics(runs)
    return FORMATTERS[fmt](groups, keys, metrics)
