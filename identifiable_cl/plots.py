"""Figures of one run, drawn from its own files into ``RUN_DIR/figures/*.png`` (the ``plots`` extra).

- ``latents.png`` (from ``readout.npz``: true test latents ``z`` (N, n), their
  linear read-out ``z_hat`` (N, n) and ``r2_per_dim`` (n,)): one scatter of
  z_i against ẑ_i per dimension and a bar chart of the per-dimension R².
- ``training.png`` (from ``metrics.jsonl``): the training loss, and the held-out
  R² and MCC over steps beside the identity baseline of ``summary.json``.
- ``lambda.png`` (when the DGP has a true Λ, from ``summary.json`` or the last
  evaluation record): sorted learned Λ̂ beside sorted true Λ, and each Λ̂_i over
  steps with the true values as dashed lines.

Figures are built with :class:`matplotlib.figure.Figure` and saved by its Agg
canvas, so no display and no global pyplot state is involved.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from identifiable_cl import rundir

FIGURES = "figures"
CURVES = ("r2_linear", "r2_nonlinear", "mcc_pearson", "mcc_spearman", "mcc_block_aware")
MAX_POINTS = 2000
"""Points drawn per scatter panel (an evenly spaced subset of the test sample)."""


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def latents_figure(z: np.ndarray, z_hat: np.ndarray, r2_per_dim: np.ndarray):
    """Scatter of true z_i (x) against read-out ẑ_i (y) per dimension, and the R² of each dimension."""
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
    bars.set_title(f"linear R² per dimension (mean {float(np.mean(r2_per_dim)):.3f})", fontsize=10)
    return fig


def training_figure(records: Sequence[Mapping[str, Any]], summary: Mapping[str, Any] | None = None):
    """Training loss, and held-out R²/MCC against the step, with the identity baseline g(z) of the
    summary (``identity_<metric>``) as dashed lines."""
    from matplotlib.figure import Figure

    summary = summary or {}
    fig = Figure(figsize=(11, 4), layout="constrained")
    loss_ax, metric_ax = fig.subplots(1, 2)
    losses = [(r["step"], r["loss"]) for r in records if _finite(r.get("loss"))]
    if losses:
        loss_ax.plot(*zip(*losses), color="tab:gray")
    loss_ax.set(xlabel="step", ylabel="loss", title="training loss")
    for key in CURVES:
        points = [(r["step"], r[key]) for r in records if _finite(r.get(key))]
        if points:
            line = metric_ax.plot(*zip(*points), marker="o", ms=3, label=key)[0]
            if _finite(summary.get(f"identity_{key}")):
                metric_ax.axhline(summary[f"identity_{key}"], color=line.get_color(), ls="--", lw=0.8)
    metric_ax.set(xlabel="step", ylabel="score", title="held-out recovery (dashed: identity baseline g(z))")
    if metric_ax.has_data():
        metric_ax.legend(fontsize=8)
    return fig


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


def lambda_figure(learned: Sequence[float], true: Sequence[float], steps: Sequence[int], history: np.ndarray | None):
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
    return fig


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
    summary_path = run_dir / rundir.SUMMARY
    summary = rundir.read_json(summary_path) if summary_path.exists() else {}
    figures = {}
    readout = run_dir / rundir.READOUT
    if readout.exists():
        data = rundir.load_npz(readout, ("z", "z_hat", "r2_per_dim"))
        figures["latents"] = latents_figure(data["z"], data["z_hat"], data["r2_per_dim"])
    if records:
        figures["training"] = training_figure(records, summary)
    evaluated = [r for r in records if "lambda_true" in r]
    true = summary.get("lambda_true", evaluated[-1]["lambda_true"] if evaluated else None)
    if true:
        learned = summary.get("lambda_learned", evaluated[-1].get("lambda_learned", []) if evaluated else [])
        figures["lambda"] = lambda_figure(learned, true, *_lambda_history(records))
    if not figures:
        raise ValueError(f"{str(run_dir)!r}: nothing to plot (no {rundir.METRICS} or {rundir.READOUT})")
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, fig in figures.items():
        paths[name] = out / f"{name}.png"
        fig.savefig(paths[name], dpi=110)
    return paths
