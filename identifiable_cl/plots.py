"""Figures of one run, drawn from its own files into ``RUN_DIR/figures/*.png`` (the ``plots`` extra).

- ``latents.png`` (from ``readout.npz``: true test latents ``z`` (N, n), their
  linear read-out ``z_hat`` (N, n) and ``r2_per_dim`` (n,)): one scatter of
  z_i against ẑ_i per dimension and a bar chart of the per-dimension R²; the R²
  values are the final evaluation's (``summary.json``, the printed table's) when
  it exists, else the read-out sample's, and the title says which.
- ``training.png`` (from ``metrics.jsonl``): the training loss, and the held-out
  R² and MCC over steps beside the identity baseline of ``summary.json``; with
  blocks (content/style, Λ groups) a third panel gives each block's R²; with a
  single evaluation the scores are bars, not one-point curves. Block-aware MCC
  comes with its chance level, the score of a random rotation of z (black dashed,
  "random rotation"), from ``summary.json`` or else the last evaluation.

Every figure is titled with the run (:func:`run_title`: name, loss, process, seed).
- ``views.png`` (a process with views): each block's R² from each view's encoding; ``subsets.png`` (views that
  contrast subsets, ``dgp.views.contrast``): each subset's shared block and unshared latents from each view of it.
- ``mi.png`` (when the run's loss bounds the mutual information, ``eval.mi``): the encoder's bound
  log K - L over training beside the true critic's bound, min(I, log K) and log K.
- ``lambda.png`` (when the DGP has a true Λ, from ``summary.json`` or the last
  evaluation record): sorted learned Λ̂ beside sorted true Λ, and each Λ̂_i over
  steps with the true values as dashed lines.

Figures are built with :class:`matplotlib.figure.Figure` and saved by its Agg
canvas, so no display and no global pyplot state is involved.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from identifiable_cl import rundir
from identifiable_cl.evaluation import catalog
from identifiable_cl.losses.contract import BOUND_KEYS

FIGURES = "figures"
LABELS = catalog.labels()
"""Readable names of the headline metrics and their references, in the order tables and legends list them
(from the metric catalog)."""
REFERENCES = catalog.references()
"""Metric -> key of its chance reference (block-aware MCC: the score of a Haar-random rotation of z on the
same held-out latents; it forgives an orthogonal map inside each Λ group, so it is well above 0)."""
REFERENCE_LABEL = "random rotation"
"""How tables and legends name the reference beside its metric."""
CURVES = tuple(k for k in LABELS if k not in REFERENCES.values())
BLOCK_PREFIXES = catalog.block_prefixes()
IN_SAMPLE = "_in_sample"
"""Suffix of the metrics scored on their own fit sample (``eval.in_sample_n``)."""
MAX_POINTS = 2000
"""Points drawn per scatter panel (an evenly spaced subset of the test sample)."""
CHANCES = {key: metric.chance for metric in catalog.ordered() if metric.headline
           for key in (metric.columns or {metric.key: metric.label})}
"""Headline metric key -> the chance level its catalog entry states (None where it states none, e.g. MCC)."""
SCORE_LIMITS = (0.0, 1.0)
"""The one y-axis of every score panel of an experiment figure (R², MCC, DCI: at most 1). A score below 0
(an R² worse than predicting the mean) is not drawn below the axis but written as a number at its floor, so
every panel of every figure reads on the same scale and a bar's height compares across panels."""
LOSS_FAMILIES: dict[str, tuple[str, ...]] = {
    "InfoNCE": ("infonce", "aninfonce", "hard_negative"),
    "NCE / NWJ": ("nce", "nwj"),
    "spectral (SCL)": ("scl",),
    "margin / triplet": ("margin", "triplet"),
    "ensemble": ("ensemble",),
    "nonlinear ICA (PCL, TCL, GCL)": ("pcl", "tcl", "gcl"),
}
"""Families of losses by ``loss.name``: the experiment figures colour each run by its loss's family (InfoNCE's
variants, decoupled and MoCo included, are options of ``infonce``)."""
OTHER_FAMILY = "other loss"
"""The family of a loss no family lists (a plugin's)."""
FAMILY_COLOURS = dict(zip((*LOSS_FAMILIES, OTHER_FAMILY), ("tab:blue", "tab:orange", "tab:purple", "tab:green",
                                                            "tab:red", "tab:brown", "tab:gray")))


def metric_label(key: str) -> str:
    """``r2_linear`` → ``linear R²``; a block metric ``r2_linear_content`` → ``linear R² [content]``;
    ``mcc_pearson_in_sample`` → ``MCC (Pearson), in sample``."""
    if key.endswith(IN_SAMPLE):
        return f"{metric_label(key[: -len(IN_SAMPLE)])}, in sample"
    if key in LABELS:
        return LABELS[key]
    for prefix in BLOCK_PREFIXES:
        if key.startswith(prefix):
            return f"{LABELS[prefix[:-1]]} [{key[len(prefix):]}]"
    return key.replace("_", " ")


def block_metrics(record: Mapping[str, Any]) -> list[str]:
    """The per-block R² keys of a record or summary (content/style, Λ groups), in their order."""
    return [k for k in record if k.startswith(BLOCK_PREFIXES) and not k.endswith(("per_dim", IN_SAMPLE))
            and _finite(record[k])]


def view_blocks(record: Mapping[str, Any]) -> tuple[list[str], list[int]]:
    """The blocks and views of a record of a process with views (:mod:`identifiable_cl.evaluation.views`): the
    block names of view 1's ``r2_linear_<block>`` keys (the scores of contrasted subsets excepted:
    :func:`subset_blocks`) and the views 1, 2 ... that have a ``view<v>_r2_linear``; ``([], [])`` for a run of
    one view."""
    views = [1] + sorted(int(k[4:-len("_r2_linear")]) for k in record
                         if k.startswith("view") and k.endswith("_r2_linear") and k[4:-len("_r2_linear")].isdigit())
    if len(views) == 1:
        return [], []
    prefix = "r2_linear_"
    blocks = [k[len(prefix):] for k in record if k.startswith(prefix) and not k.endswith(("per_dim", IN_SAMPLE))
              and not SUBSET_KEY.match(k) and k not in SUBSET_SUMMARY_KEYS]
    return blocks, views


SUBSET_KEY = re.compile(r"^(?:view(\d+)_)?(r2_linear|r2_nonlinear)_(un)?shared_(\d+(?:_\d+)*)(_drawn)?$")
"""A score of a contrasted subset of views (:func:`identifiable_cl.evaluation.views.shared_block_metrics`); its
groups: the view's number (None for view 1), the regression, ``un`` (None for the shared block), the subset, its
view numbers joined by ``_``, and ``_drawn`` for the mean over draws of the Gumbel selection's noise (else None)."""
SUBSET_SUMMARY_KEYS = tuple(f"{kind}_{part}{drawn}" for drawn in ("", "_drawn")
                            for kind in ("r2_linear", "r2_nonlinear")
                            for part in ("shared_min", "shared_mean", "unshared_max", "unshared_mean"))
"""The scores of contrasted subsets over every subset and view
(:func:`identifiable_cl.evaluation.views.shared_block_summary`), in the order tables list them: the selection's
mode's, then the means over draws of the Gumbel noise."""


def subset_blocks(record: Mapping[str, Any]) -> list[tuple[str, list[int]]]:
    """The contrasted subsets a record scores (:data:`SUBSET_KEY`), each as its name (``1_2``) and the views
    of it that have a score, in the order of the subsets' sizes, then of their views; ``[]`` for none."""
    subsets: dict[str, set[int]] = {}
    for key in record:
        match = SUBSET_KEY.match(key)
        if match is not None:
            subsets.setdefault(match.group(4), set()).add(int(match.group(1) or 1))
    order = sorted(subsets, key=lambda name: (name.count("_"), [int(v) for v in name.split("_")]))
    return [(name, sorted(subsets[name])) for name in order]


def subset_key(view: int, kind: str, block: str, subset: str) -> str:
    """The key of the R² (``kind``: r2_linear, r2_nonlinear) of subset ``subset``'s ``block`` (shared, unshared)
    from view ``view``'s selected coordinates: ``view3_r2_nonlinear_shared_1_3``."""
    return view_key(view, f"{kind}_{block}_{subset}")


def view_key(view: int, key: str) -> str:
    """The key of metric ``key`` for view ``view`` (1-based): ``key`` itself for view 1, ``view<v>_key`` else."""
    return key if view == 1 else f"view{view}_{key}"


def view_metrics(record: Mapping[str, Any]) -> list[str]:
    """The block table of a run with views as metric keys: each block's nonlinear R² (linear without the
    nonlinear regression) from each view, then the permuted-content control's R² of the content; with contrasted
    subsets the summary over every subset and view (:data:`SUBSET_SUMMARY_KEYS`: least and mean shared-block R²,
    largest and mean unshared R²); ``icl results`` (md, no ``--metrics``) follows its table with every subset's
    blocks from every view of it (:func:`identifiable_cl.cli.tables.subset_group_tables`)."""
    blocks, views = view_blocks(record)
    kind = "r2_nonlinear" if any(k.startswith("r2_nonlinear_") for k in record) else "r2_linear"
    keys = [view_key(v, f"{kind}_{b}") for b in blocks for v in views]
    keys += [view_key(v, f"permuted_{kind}_content") for v in views]
    keys += [k for k in SUBSET_SUMMARY_KEYS if k.startswith(kind + "_")]
    return [k for k in keys if k in record]


def loss_family(loss_name: str) -> str:
    """The family (:data:`LOSS_FAMILIES`) of the loss named ``loss_name``; :data:`OTHER_FAMILY` when none lists it."""
    return next((family for family, names in LOSS_FAMILIES.items() if loss_name in names), OTHER_FAMILY)


def score_metric(key: str) -> str | None:
    """The headline metric of the catalog behind summary key ``key`` when it is a recovery score: the key itself,
    or with its view (``view2_``), control (``permuted_``), block (``_content``) or in-sample part taken off;
    None for keys that are not scores (bounds in nats, log K ...)."""
    key = re.sub(r"^(view\d+_)?(permuted_)?", "", key.removesuffix(IN_SAMPLE))
    if key in CHANCES:
        return key
    return next((prefix[:-1] for prefix in BLOCK_PREFIXES if key.startswith(prefix)), None)


def chance_level(key: str) -> float | None:
    """The chance level the catalog states for the score ``key`` (:func:`score_metric`); None where it states
    none (MCC's depends on the sample size and the process) or ``key`` is no score."""
    metric = score_metric(key)
    return None if metric is None else CHANCES[metric]


def score_axis(ax, xs: Sequence[float], values: Sequence[float | None]) -> None:
    """Put ``ax`` on :data:`SCORE_LIMITS` and write each value below the floor (at ``xs``) as a number there."""
    ax.set_ylim(*SCORE_LIMITS)
    for x, value in zip(xs, values):
        if value is not None and value < SCORE_LIMITS[0]:
            ax.annotate(f"{value:.2f}", (x, SCORE_LIMITS[0]), xytext=(0, 2), textcoords="offset points",
                        ha="center", va="bottom", fontsize=7, rotation=90)


def reference_key(key: str) -> str | None:
    """The key of the chance reference of metric ``key`` (an in-sample metric shares its held-out one:
    the chance level depends on the latents only), or None."""
    return REFERENCES.get(key[: -len(IN_SAMPLE)] if key.endswith(IN_SAMPLE) else key)


def reference_value(key: str, *sources: Mapping[str, Any]) -> float | None:
    """The chance reference of metric ``key`` from the first source that has a finite one, else None."""
    ref = reference_key(key)
    return next((float(source[ref]) for source in sources if ref is not None and _finite(source.get(ref))), None)


def _reference_legend(key: str) -> str:
    return f"{REFERENCE_LABEL} ({metric_label(key)})"


def run_title(config: Mapping[str, Any], run_dir: Path) -> str:
    """One line naming the run: its name (or folder), loss, process and seed."""
    loss, dgp = config.get("loss", {}), config.get("dgp", {})
    settings = ", ".join(f"{k}={v}" for k, v in loss.items() if k != "name" and not isinstance(v, (list, dict)))
    space, conditional = dgp.get("space", {}).get("name", "?"), dgp.get("conditional", {})
    cond = ", ".join(f"{k}={v}" for k, v in conditional.items() if k != "name" and not isinstance(v, (list, dict)))
    name = (config.get("wandb") or {}).get("name") or Path(run_dir).name
    return (f"{name}: {loss.get('name', '?')}({settings}) on {space}/{conditional.get('name', '?')}({cond}), "
            f"seed {config.get('seed', '?')}")


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def latents_figure(z: np.ndarray, z_hat: np.ndarray, r2_per_dim: np.ndarray, title: str = "",
                   source: str = "read-out sample"):
    """Scatter of true z_i (x) against read-out ẑ_i (y) per dimension, and the R² of each dimension
    (``source`` says which evaluation the R² values come from)."""
    from matplotlib.figure import Figure

    n = z.shape[1]
    cols = min(n, 5)
    rows = math.ceil(n / cols)
    fig = Figure(figsize=(2.6 * cols, 2.6 * rows + 2.4), layout="constrained")
    grid = fig.add_gridspec(rows + 1, cols, height_ratios=[1.0] * rows + [0.9])
    keep = np.linspace(0, len(z) - 1, min(len(z), MAX_POINTS)).astype(int)
    for i in range(n):
        ax = fig.add_subplot(grid[i // cols, i % cols])
        ax.scatter(z[keep, i], z_hat[keep, i], s=2, alpha=0.4, rasterized=True)
        low, high = float(min(z[:, i].min(), z_hat[:, i].min())), float(max(z[:, i].max(), z_hat[:, i].max()))
        ax.plot([low, high], [low, high], color="black", lw=0.8, ls="--")
        ax.set_title(f"z{i}   R² = {r2_per_dim[i]:.3f}", fontsize=9)
        ax.tick_params(labelsize=7)
        if i % cols == 0:
            ax.set_ylabel("linear read-out ẑ", fontsize=8)
        if i // cols == rows - 1:
            ax.set_xlabel("true z", fontsize=8)
    bars = fig.add_subplot(grid[rows, :])
    bars.bar(np.arange(n), r2_per_dim, color="tab:blue")
    bars.set_xticks(np.arange(n), [f"z{i}" for i in range(n)])
    bars.set_ylim(min(0.0, float(np.min(r2_per_dim))), 1.0)
    bars.set_ylabel("held-out R²")
    bars.set_title(f"linear R² per dimension (mean {float(np.mean(r2_per_dim)):.3f}, {source}; "
                   f"points: {len(keep)} read-out test samples)", fontsize=10)
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def training_figure(records: Sequence[Mapping[str, Any]], summary: Mapping[str, Any] | None = None,
                    title: str = ""):
    """Training loss, and held-out R²/MCC (and, with blocks, each block's R²) against the step, with
    the identity baseline g(z) of the summary (``identity_<metric>``) as dashed lines. With a single
    evaluation the scores are bars beside the baseline instead of one-point curves. A metric with a
    chance reference (:data:`REFERENCES`: block-aware MCC) gets it as a black dashed line labelled
    "random rotation", taken from the summary or else the last evaluation."""
    from matplotlib.figure import Figure

    summary = summary or {}
    evaluated = [r for r in records if any(_finite(r.get(k)) for k in CURVES)]
    blocks = block_metrics(evaluated[-1]) if evaluated else []
    panels = 2 + (len(evaluated) > 1 and bool(blocks))
    fig = Figure(figsize=(5.5 * panels, 4), layout="constrained")
    loss_ax, metric_ax, *block_ax = fig.subplots(1, panels)
    losses = [(r["step"], r["loss"]) for r in records if _finite(r.get("loss"))]
    if losses:
        loss_ax.plot(*zip(*losses), color="tab:gray", marker="o" if len(losses) < 3 else None)
    loss_ax.set(xlabel="step", ylabel="loss", title="training loss")
    if len(evaluated) == 1:
        _score_bars(metric_ax, evaluated[0], summary, [k for k in (*CURVES, *blocks) if _finite(evaluated[0].get(k))])
        metric_ax.set_title(f"held-out recovery at step {evaluated[0]['step']} (grey: identity baseline g(z))")
    else:
        _curves(metric_ax, records, summary, CURVES)
        metric_ax.set(xlabel="step", ylabel="score", title="held-out recovery (dashed: identity baseline g(z))")
        if block_ax:
            _curves(block_ax[0], records, summary, blocks)
            block_ax[0].set(xlabel="step", ylabel="R²", title="R² of each block (dashed: identity baseline)")
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def views_figure(summary: Mapping[str, Any], title: str = ""):
    """Bars of each block's R² predicted from each view's encoding (nonlinear where measured, else linear), the
    permuted-content control's R² of the content beside them: the block table of a run with views."""
    from matplotlib.figure import Figure

    blocks, views = view_blocks(summary)
    kind = "r2_nonlinear" if any(k.startswith("r2_nonlinear_") for k in summary) else "r2_linear"
    rows = [(b, f"{kind}_{b}") for b in blocks] + [("content\n(permuted control)", f"permuted_{kind}_content")]
    fig = Figure(figsize=(1.2 * len(rows) + 3, 4), layout="constrained")
    ax = fig.subplots()
    x, width = np.arange(len(rows)), 0.8 / len(views)
    for i, v in enumerate(views):
        values = [summary.get(view_key(v, key)) for _, key in rows]
        ax.bar(x - 0.4 + width * (i + 0.5), [float(a) if _finite(a) else 0.0 for a in values], width=width,
               label=f"from view {v}'s encoding")
    ax.set_xticks(x, [label for label, _ in rows], fontsize=8)
    ax.set(ylabel=metric_label(kind), title=f"{metric_label(kind)} of each block, held out")
    ax.axhline(0.0, color="black", lw=0.6)
    ax.legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def subsets_figure(summary: Mapping[str, Any], title: str = ""):
    """Bars of each contrasted subset's R² (nonlinear where measured, else linear) from each view of it, on the
    score axis (:data:`SCORE_LIMITS`): the shared block above (the theorem: near 1 from every view of the subset),
    the other latents the view sees below (near 0 for independent latents); a bar per view of the subset, coloured
    by view, with the identity baseline's R² as a black tick on it."""
    from matplotlib.figure import Figure

    subsets = subset_blocks(summary)
    kind = "r2_nonlinear" if any(SUBSET_KEY.match(k) and "r2_nonlinear_" in k for k in summary) else "r2_linear"
    views = sorted({v for _, present in subsets for v in present})
    colours = {v: f"C{i}" for i, v in enumerate(views)}
    fig = Figure(figsize=(0.55 * sum(len(p) for _, p in subsets) + 3, 6.5), layout="constrained")
    most = max(len(present) for _, present in subsets)
    width = 0.8 / most
    for ax, block in zip(fig.subplots(2, 1, sharex=True), ("shared", "unshared")):
        xs, values, ticks, labelled = [], [], [], set()
        for i, (name, present) in enumerate(subsets):
            for j, v in enumerate(present):
                x = i + width * (j - (len(present) - 1) / 2)
                value, base = (summary.get(prefix + subset_key(v, kind, block, name)) for prefix in ("", "identity_"))
                if not _finite(value):
                    continue
                ax.bar(x, max(float(value), 0.0), width=width, color=colours[v],
                       label=None if v in labelled else f"from view {v}'s selected coordinates")
                labelled.add(v)
                xs.append(x)
                values.append(float(value))
                if _finite(base):
                    ticks.append((x, float(base)))
        if ticks:
            ax.hlines([b for _, b in ticks], [x - width / 2 for x, _ in ticks], [x + width / 2 for x, _ in ticks],
                      colors="black", lw=1.2, label="identity g(z)")
        score_axis(ax, xs, values)
        what = "shared block" if block == "shared" else "other latents the view sees (unshared)"
        ax.set(ylabel=metric_label(kind), title=f"{metric_label(kind)} of each subset's {what}, held out")
        if ax.has_data():
            ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_xticks(range(len(subsets)), [f"views {n.replace('_', ',')}" for n, _ in subsets], rotation=30, ha="right",
                  fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def _curves(ax, records: Sequence[Mapping[str, Any]], summary: Mapping[str, Any], keys: Sequence[str]) -> None:
    for key in keys:
        points = [(r["step"], r[key]) for r in records if _finite(r.get(key))]
        if points:
            line = ax.plot(*zip(*points), marker="o", ms=3, label=metric_label(key))[0]
            if _finite(summary.get(f"identity_{key}")):
                ax.axhline(summary[f"identity_{key}"], color=line.get_color(), ls="--", lw=0.8)
            chance = reference_value(key, summary, *reversed(records))
            if chance is not None:
                ax.axhline(chance, color="black", ls="--", lw=1.0, label=_reference_legend(key))
    if ax.has_data():
        ax.legend(fontsize=8)


def _score_bars(ax, record: Mapping[str, Any], summary: Mapping[str, Any], keys: Sequence[str]) -> None:
    x = np.arange(len(keys))
    ax.bar(x - 0.2, [record[k] for k in keys], width=0.4, color="tab:blue", label="encoder")
    base = [summary.get(f"identity_{k}") for k in keys]
    if any(_finite(b) for b in base):
        ax.bar(x + 0.2, [b if _finite(b) else 0.0 for b in base], width=0.4, color="tab:gray", label="identity g(z)")
    for i, key in enumerate(keys):
        chance = reference_value(key, summary, record)
        if chance is not None:
            ax.hlines(chance, i - 0.45, i + 0.45, colors="black", linestyles="--", lw=1.0, label=_reference_legend(key))
    ax.set_xticks(x, [metric_label(k) for k in keys], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("score")
    ax.legend(fontsize=8)


def _lambda_history(records: Sequence[Mapping[str, Any]]) -> tuple[list[int], np.ndarray | None]:
    steps, values = [], []
    for r in records:
        learned = r.get("lambda_learned", r.get("lambda_hat"))
        if isinstance(learned, list) and learned and all(_finite(v) for v in learned):
            steps.append(r["step"])
            values.append(learned)
    if not values or len({len(v) for v in values}) != 1:
        return [], None
    return steps, np.asarray(values, dtype=float)


def lambda_figure(learned: Sequence[float], true: Sequence[float], steps: Sequence[int], history: np.ndarray | None,
                  title: str = ""):
    """Sorted learned Λ̂ beside sorted true Λ (the order of latents is identified only up to permutation),
    and Λ̂ per dimension over steps."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4), layout="constrained")
    compare, over_time = fig.subplots(1, 2)
    n = len(true)
    x = np.arange(n)
    compare.bar(x - 0.2, np.sort(true), width=0.4, label=r"true $\Lambda$", color="tab:orange")
    if len(learned) == n:
        compare.bar(x + 0.2, np.sort(learned), width=0.4, label=r"learned $\hat\Lambda$", color="tab:blue")
    compare.set_xticks(x, [str(i + 1) for i in x])
    compare.set(xlabel="rank", ylabel=r"$\Lambda$", title=r"learned $\hat\Lambda$ vs true $\Lambda$ (sorted)")
    compare.legend(fontsize=8)
    if history is not None:
        for i in range(history.shape[1]):
            over_time.plot(steps, history[:, i], lw=1)
    for level in sorted(set(float(v) for v in true)):
        over_time.axhline(level, color="black", ls="--", lw=0.8)
    over_time.set(xlabel="step", ylabel=r"$\hat\Lambda_i$", title=r"learned $\hat\Lambda$ over training (dashed: true values)")
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def mi_figure(records: Sequence[Mapping[str, Any]], title: str = ""):
    """The encoder's bound on I(z; z+) over training (records with one of ``BOUND_KEYS``: log K - L, or NWJ's -L)
    beside what bounds it: the true critic's bound at the same K, min(I, log K) and log K (dashed lines), in nats."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.5, 4), layout="constrained")
    ax = fig.subplots()
    points = [(r["step"], r[k]) for r in records for k in BOUND_KEYS if _finite(r.get(k))]
    ax.plot(*zip(*points), marker="o", ms=3, label="encoder: the loss's bound (held-out batch)")
    last = records[-1]
    log_k, truth = last.get("log_k"), last.get("mi_true")
    levels = [("true critic log p(z⁺|z): log K − L", last.get("mi_true_critic_bound"), "tab:green"),
              ("log K", log_k, "black"),
              ("min(I, log K)", min(truth, log_k) if _finite(truth) and _finite(log_k) else None, "tab:red")]
    for (label, level, colour), style in zip(levels, ("--", "--", ":")):
        if _finite(level):
            ax.axhline(level, color=colour, ls=style, lw=1.0 if style == "--" else 2.0, label=f"{label} = {level:.2f}")
    if _finite(truth):
        ax.set_title(f"I(z; z⁺) = {truth:.2f} nats", fontsize=9)
    ax.set(xlabel="step", ylabel="nats")
    ax.legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def draw_figures_if_possible(run_dir: Path) -> dict[str, Path]:
    """The run's figures as PNG files (:func:`draw_figures`), or none when matplotlib (the ``plots`` extra) is
    missing."""
    try:
        return draw_figures(run_dir)
    except ModuleNotFoundError:
        return {}


def draw_figures(run_dir: str | Path) -> dict[str, Path]:
    """Draw every figure the run's files allow; returns ``{name: path of the PNG}``.

    Raises ValueError when the directory holds nothing to draw, ModuleNotFoundError without matplotlib.
    """
    try:
        import matplotlib  # noqa: F401
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError("drawing figures needs matplotlib: pip install 'identifiable-cl[plots]'") from exc
    run_dir = Path(run_dir)
    out = run_dir / FIGURES
    records = rundir.read_metrics(run_dir)
    summary = rundir.read_json(run_dir / rundir.SUMMARY, missing_ok=True) or {}
    config = dict(rundir.read_config(run_dir)) if (run_dir / rundir.CONFIG).exists() else {}
    title = run_title(config, run_dir)
    figures = {}
    readout = run_dir / rundir.READOUT
    if readout.exists():
        data = rundir.read_readout(readout)
        final = summary.get("r2_linear_per_dim")
        if isinstance(final, list) and len(final) == data["z"].shape[1]:
            e = config.get("eval", {})
            source = f"final evaluation, {e.get('final_n_fit', '?')} fit / {e.get('final_n_test', '?')} test samples"
            figures["latents"] = latents_figure(data["z"], data["z_hat"], np.asarray(final), title, source)
        else:
            figures["latents"] = latents_figure(data["z"], data["z_hat"], data["r2_per_dim"], title)
    if records:
        figures["training"] = training_figure(records, summary, title)
    if view_blocks(summary)[1]:
        figures["views"] = views_figure(summary, title)
    if subset_blocks(summary):
        figures["subsets"] = subsets_figure(summary, title)
    bounded = [r for r in records if any(_finite(r.get(k)) for k in BOUND_KEYS)]
    if bounded:
        figures["mi"] = mi_figure(bounded, title)
    evaluated = [r for r in records if "lambda_true" in r]
    true = summary.get("lambda_true", evaluated[-1]["lambda_true"] if evaluated else None)
    if true:
        learned = summary.get("lambda_learned", evaluated[-1].get("lambda_learned", []) if evaluated else [])
        figures["lambda"] = lambda_figure(learned, true, *_lambda_history(records), title)
    if not figures:
        raise ValueError(f"{str(run_dir)!r}: nothing to plot (no {rundir.METRICS} or {rundir.READOUT})")
    out.mkdir(parents=True, exist_ok=True)
    paths = {name: out / f"{name}.png" for name in figures}
    for name, fig in figures.items():
        rundir.save_figure(paths[name], fig)
    return paths
