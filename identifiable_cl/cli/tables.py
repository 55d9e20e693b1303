"""Plain-text tables the commands print."""

from __future__ import annotations

from typing import Any, Mapping

from identifiable_cl.plots import IN_SAMPLE, LABELS, metric_label



def results_table(summary: Mapping[str, Any]) -> str:
    """A short plain-text table: each metric for the trained encoder beside the identity baseline."""
    keys = list(LABELS) + [k for k in summary if k.startswith("r2_linear_") and not k.endswith(("per_dim", IN_SAMPLE))]
    keys += [k + IN_SAMPLE for k in keys if k + IN_SAMPLE in summary]
    rows = [(metric_label(k), k) for k in keys]
    lines = [f"{'metric':<28}{'encoder':>10}{'identity g(z)':>16}"]
    for label, key in rows:
        if key in summary and isinstance(summary[key], (int, float)):
            base = summary.get(f"identity_{key}")
            lines.append(f"{label:<28}{summary[key]:>10.3f}{base:>16.3f}" if isinstance(base, (int, float)) else f"{label:<28}{summary[key]:>10.3f}{'':>16}")
    if "lambda_learned" in summary:
        lines.append("learned Λ̂: " + ", ".join(f"{v:.2f}" for v in summary["lambda_learned"]))
    if "lambda_true" in summary:
        lines.append("true Λ:    " + ", ".join(f"{v:.2f}" for v in summary["lambda_true"]))
    if "steps" in summary:
        lines.append(f"{summary['steps']} steps in {summary['wall_s']:.1f} s ({summary['steps_per_s']:.1f} steps/s)")
    return "\n".join(lines)
