"""The identifiability atlas: every registered loss against every process family, each cell a run, and each cell
whose loss predicts something there a claim that the run agrees.

An experiment whose ``experiment.yaml`` has ``cells`` (family -> the overrides of a process of that family,
:data:`identifiable_cl.predictions.FAMILIES`) gets its runs, claims, table metrics and matrix figure from the
registries here (:func:`expand`), not from a list written by hand: a loss plugin that declares a prediction
appears in it as installed. A cell is the loss on the family's process, with the options its prediction there
names (its critic, the process's conditional), the setting it was stated for and the ``eval.*`` key that turns its
metric on; a (loss, process)
pair the config check refuses is no cell. Labels are ``<loss>__<family>``.
"""

from __future__ import annotations

from typing import Any, Mapping

from identifiable_cl.predictions import FAMILIES, Prediction

SEPARATOR = "__"
HEADLINE = ("r2_linear", "mcc_pearson")
"""The metrics every cell's table shows, beside its prediction's."""


def label(loss: str, family: str) -> str:
    return f"{loss}{SEPARATOR}{family}"


def cell_of(run_label: str) -> tuple[str, str]:
    """(loss, family) of a cell's run label."""
    loss, _, family = run_label.rpartition(SEPARATOR)
    return loss, family


def _prediction(cls: Any, family: str) -> Prediction | None:
    from identifiable_cl.losses.contract import declared_predictions

    return next((p for p in declared_predictions(cls) if p.family == family), None)


def cell_overrides(loss: str, family: str, process: Mapping[str, Any], prediction: Prediction | None) -> dict[str, Any]:
    """The overrides of one cell: the family's process, the loss, and its prediction's options, setting and metric
    switch."""
    from identifiable_cl.evaluation.catalog import metric_switch

    overrides = {**process, "loss.name": loss}
    if prediction is not None:
        overrides.update({f"loss.{key}": values[0] for key, values in prediction.loss.items()})
        overrides.update({f"dgp.{key}": values[0] for key, values in prediction.process.items()})
        if "dgp.marginal.innovation" in overrides:  # an AR(1) process's two laws are one
            overrides["dgp.conditional.innovation"] = overrides["dgp.marginal.innovation"]
        overrides.update(prediction.setting)
        switch = metric_switch(prediction.metric)
        if switch is not None:
            overrides[switch] = True
    return overrides


def expand(raw: Mapping[str, Any], source: str, layers: Any) -> dict[str, Any]:
    """``raw`` (an experiment.yaml with ``cells``) with its runs, claims, metrics and the matrix figure generated.
    ``layers(overrides)`` gives the smoke-scale config layers of a run's overrides, to check that a cell trains."""
    from identifiable_cl.components import load_config
    from identifiable_cl.losses import LOSSES

    cells = raw.get("cells")
    if not isinstance(cells, Mapping) or not cells or any(f not in FAMILIES for f in cells):
        raise ValueError(f"{source}.cells={cells!r} is invalid: a mapping from process families "
                         f"({', '.join(FAMILIES)}) to the overrides of a process of each")
    if raw.get("runs") or raw.get("claims"):
        raise ValueError(f"{source}: an experiment with cells has its runs and claims made from the registries; "
                         "list neither")
    LOSSES.load_entry_points()
    runs, claims, metrics = [], [], list(HEADLINE)
    for loss in LOSSES.names():
        cls = LOSSES.get(loss)
        for family, process in cells.items():
            prediction = _prediction(cls, family)
            overrides = cell_overrides(loss, family, dict(process), prediction)
            try:
                load_config(None, layers(overrides))
            except ValueError:  # the loss cannot train on this process: no cell
                continue
            runs.append({"label": label(loss, family), "overrides": overrides,
                         "description": f"{loss} on {FAMILIES[family]}"})
            if prediction is None:
                continue
            metrics += [prediction.metric] if prediction.metric not in metrics else []
            claims.append({"claim": f"{loss} on {family}: {prediction.describe()}",
                           "left": {"run": label(loss, family), "metric": prediction.metric},
                           "op": ">=" if prediction.recovers else "<=", "right": dict(prediction.thresholds)})
    figure = {"name": "atlas", "kind": "atlas", "metrics": list(HEADLINE), "runs": [r["label"] for r in runs]}
    return {**raw, "runs": runs, "claims": claims, "metrics": metrics,
            "figures": [*(raw.get("figures") or []), figure]}
