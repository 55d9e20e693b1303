"""Plain-text tables the commands print."""

from __future__ import annotations

from typing import Any, Mapping

from identifiable_cl.evaluation.information import BOUND_KEYS
from identifiable_cl.plots import CURVES, IN_SAMPLE, REFERENCE_LABEL, metric_label, reference_key, view_blocks, view_key


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def results_table(summary: Mapping[str, Any]) -> str:
    """A short plain-text table: each metric for the trained encoder beside the identity baseline.

    A metric with a chance reference (block-aware MCC: the score of a random rotation of z on the
    encoder's own scoring latents) shows it in a "random rotation" column, which appears only then.
    """
    keys = list(CURVES) + [k for k in summary if k.startswith("r2_linear_") and not k.endswith(("per_dim", IN_SAMPLE))]
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
