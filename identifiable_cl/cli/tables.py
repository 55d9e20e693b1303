"""Plain-text tables the commands print."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from identifiable_cl.losses.contract import BOUND_KEYS
from identifiable_cl.plots import (
    CURVES,
    IN_SAMPLE,
    REFERENCE_LABEL,
    SUBSET_KEY,
    SUBSET_SUMMARY_KEYS,
    metric_label,
    reference_key,
    subset_blocks,
    subset_key,
    view_blocks,
    view_key,
)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def results_table(summary: Mapping[str, Any]) -> str:
    """A short plain-text table: each metric for the trained encoder beside the identity baseline.

    A metric with a chance reference (block-aware MCC: the score of a random rotation of z on the
    encoder's own scoring latents) shows it in a "random rotation" column, which appears only then.
    """
    keys = list(CURVES) + [k for k in summary if k.startswith("r2_linear_") and not k.endswith(("per_dim", IN_SAMPLE))
                           and not SUBSET_KEY.match(k) and k not in SUBSET_SUMMARY_KEYS]
    keys += [k + IN_SAMPLE for k in keys if k + IN_SAMPLE in summary]
    rows = [(metric_label(k), k) for k in keys]
    chance = {k: summary[ref] for k in keys if (ref := reference_key(k)) is not None and _number(summary.get(ref))}
    lines = [f"{'metric':<28}{'encoder':>10}{'identity g(z)':>16}" + (f"{REFERENCE_LABEL:>17}" if chance else "")]
    for label, key in rows:
        if key in summary and _number(summary[key]):
            base = summary.get(f"identity_{key}")
            line = f"{label:<28}{summary[key]:>10.3f}" + (f"{base:>16.3f}" if _number(base) else f"{'':>16}")
            lines.append(line + (f"{chance[key]:>17.3f}" if key in chance else ""))
    lines += views_table(summary)
    lines += subset_table(summary)
    if "lambda_learned" in summary:
        lines.append("learned Λ̂: " + ", ".join(f"{v:.2f}" for v in summary["lambda_learned"]))
    if "lambda_true" in summary:
        lines.append("true Λ:    " + ", ".join(f"{v:.2f}" for v in summary["lambda_true"]))
    bound = next((summary[k] for k in BOUND_KEYS if _number(summary.get(k))), None)
    if bound is not None:
        truth = f"{summary['mi_true']:.2f}" if _number(summary.get("mi_true")) else "∞ or not available"
        lines.append(f"I(z; z+) = {truth} nats; the loss's bound on it {bound:.2f} "
                     f"(log K = {summary['log_k']:.2f}"
                     + (f"; InfoNCE with the true critic: {summary['mi_true_critic_bound']:.2f}"
                        if _number(summary.get("mi_true_critic_bound")) else "")
                     + ")")
    if isinstance(summary.get("prediction"), str):
        metric = summary.get("prediction_metric")
        measured = f"{summary[metric]:.3f}" if metric is not None and _number(summary.get(metric)) else "not measured"
        lines.append(f"theory: {summary['prediction']}" + (f"; this run: {metric} {measured}, "
                                                              f"{summary['prediction_verdict']}" if metric else "")
                     + (f" ({summary['prediction_outside']})" if summary.get("prediction_outside") else ""))
    if "steps" in summary:
        lines.append(f"{summary['steps']} steps in {summary['wall_s']:.1f} s ({summary['steps_per_s']:.1f} steps/s)")
    return "\n".join(lines)


def views_table(summary: Mapping[str, Any]) -> list[str]:
    """With views: R² of every block from every view's encoding (linear, nonlinear), and the permuted-content
    control's R² of the content (its observations carry another sample's content); no lines for one view."""
    blocks, views = view_blocks(summary)
    if not views:
        return []
    kinds = [k for k in ("r2_linear", "r2_nonlinear") if any(view_key(v, f"{k}_{b}") in summary for v in views for b in blocks)]
    header = "".join(f"{f'view {v} {k[3:]}':>18}" for v in views for k in kinds)
    rows = [(b, [f"{k}_{b}" for k in kinds]) for b in blocks] + [("content, permuted control", [f"permuted_{k}_content" for k in kinds])]
    lines = ["", f"{'R² of each block':<28}{header}"]
    for label, keys in rows:
        cells = [summary.get(view_key(v, key)) for v in views for key in keys]
        if any(_number(c) for c in cells):
            lines.append(f"{label:<28}" + "".join(f"{c:>18.3f}" if _number(c) else f"{'':>18}" for c in cells))
    return lines


SUBSET_KINDS = ("r2_nonlinear", "r2_linear")
"""The regressions of the subset tables, in the order they are printed."""
SUBSET_LABEL = 34
"""Width of the row labels of the subset tables (``nonlinear R² [unshared_1_2_3_4]``)."""


Row = tuple[str, list[str | None], list[int]]
"""A row of a subset table: its label, its cells (None: empty) and the views its columns stand for."""


def _subset_rows(keys: Sequence[str], kind: str, cell: Callable[[str], str | None]) -> list[Row]:
    """Per contrasted subset among ``keys`` (:func:`identifiable_cl.plots.subset_blocks`) and block (shared, then
    unshared): the row's label (``nonlinear R² [shared_1_2]``) and ``cell(key)`` for every view 1..V of the
    record, None where the view is not in the subset or ``cell`` has no value; with the views of the record."""
    blocks = subset_blocks(dict.fromkeys(keys))
    views = sorted({v for _, present in blocks for v in present})
    rows = []
    for name, present in blocks:
        for block in ("shared", "unshared"):
            cells = [cell(subset_key(v, kind, block, name)) if v in present else None for v in views]
            if any(c is not None for c in cells):
                rows.append((metric_label(f"{kind}_{block}_{name}"), cells, views))
    return rows


def subset_table(summary: Mapping[str, Any]) -> list[str]:
    """With contrasted subsets of views (Yao et al. 2024): per regression (nonlinear, then linear), a row per subset
    for its shared block and one for the other latents its views see, a column per view, each cell the encoder's
    held-out R² from that view's selected coordinates with the identity baseline's in brackets (empty where the view
    is not in the subset); then the least shared-block and the largest unshared R² over every subset and view. No
    lines without such scores."""

    def cell(key: str) -> str | None:
        if not _number(summary.get(key)):
            return None
        base = summary.get(f"identity_{key}")
        return f"{summary[key]:.3f}" + (f" [{base:.3f}]" if _number(base) else "")

    lines = []
    for kind in SUBSET_KINDS:
        rows = _subset_rows(list(summary), kind, cell)
        if not rows:
            continue
        header = "".join(f"{f'view {v}':>16}" for v in rows[0][2])
        lines += ["", f"{'each subset, from each view of it':<{SUBSET_LABEL}}{header}",
                  "(encoder [identity g(z)], held out)"]
        lines += [f"{label:<{SUBSET_LABEL}}" + "".join(f"{c or '':>16}" for c in cells) for label, cells, _ in rows]
        worst, leak = summary.get(f"{kind}_shared_min"), summary.get(f"{kind}_unshared_max")
        if _number(worst) and _number(leak):
            lines.append(f"{metric_label(kind)} over every subset and view: least shared {worst:.3f}, largest "
                         f"unshared {leak:.3f}")
    return lines


def subset_group_tables(groups: Sequence[Any]) -> str:
    """``icl results``' tables of contrasted subsets of views, one per group of runs (``groups``:
    :class:`identifiable_cl.aggregate.Group`) that scores them, laid out as :func:`subset_table` (markdown): per
    regression a row per subset and block, a column per view, each cell the mean ± std over the group's seeds with
    the identity baseline's mean in brackets (empty where the view is not in the subset). Empty without such
    scores."""
    from identifiable_cl.aggregate import mean_std

    out = []
    for group in groups:
        keys = list(dict.fromkeys(k for run in group.succeeded for k in (run.summary or {})))

        def cell(key: str, group: Any = group) -> str | None:
            mean, std, _ = group.stats(key)
            if mean is None:
                return None
            base = group.stats(f"identity_{key}")[0]
            return mean_std(mean, std) + ("" if base is None else f" [{base:.3f}]")

        title = ", ".join(f"{k}={v}" for k, v in zip(group.values, group.key)) or "all runs"
        for kind in SUBSET_KINDS:
            rows = _subset_rows(keys, kind, cell)
            seeds = f"{len(group.succeeded)} seed{'s' if len(group.succeeded) != 1 else ''}"
            if rows:
                out += ["", f"{title}: each subset, from each view of it ({seeds}; mean ± std, identity g(z) in "
                        "brackets)", "",
                        "| block | " + " | ".join(f"view {v}" for v in rows[0][2]) + " |",
                        "|---|" + "---|" * len(rows[0][2])]
                out += ["| " + label + " | " + " | ".join(c or "" for c in cells) + " |" for label, cells, _ in rows]
    return "\n".join(out)
