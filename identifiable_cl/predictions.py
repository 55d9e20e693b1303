"""What identifiability theory predicts for a loss on a process, and whether a run agrees.

A loss declares its predictions (its ``predictions``, part of the loss contract :mod:`identifiable_cl.losses.contract`):
for a family of processes (:func:`family`), and where it matters for some of the loss's own options (its critic)
and the process's (its conditional), the class of maps the latents are identified up to, the source (paper,
theorem), the metric that measures it and the score that counts as recovered at each scale; or that theory
predicts a failure there (``recovers=False``: the score stays at or below it). A run's summary says which
prediction applies and whether the run agrees (:func:`verdict`); a loss without one for the run's process says
``no theorem``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from dgp.checks import dotted

FAMILIES = {
    "sphere_vmf": "latents on a sphere, von Mises-Fisher positives",
    "sphere_anisotropic": "latents on a sphere, anisotropic Gaussian positives (Λ)",
    "box_lp": "latents in a box, Laplace, Normal or generalised normal positives",
    "content_style": "content and style latents, the style changed by an augmentation",
    "segments": "sources whose scales change from segment to segment",
    "ar1": "stationary AR(1) sources, positives the next time step",
    "views": "several views, each of a part of the latents",
    "other": "any other process",
}
"""The families of processes a prediction is made for (:func:`family`)."""
SCALE = "smoke"
"""The scale whose threshold a single run's verdict uses (the atlas has each scale's)."""


def family(dgp: Mapping[str, Any]) -> str:
    """The family (:data:`FAMILIES`) of a process, from its resolved ``dgp`` config."""
    space, marginal, conditional = (dotted(dgp, f"{part}.name") for part in ("space", "marginal", "conditional"))
    if dotted(dgp, "views.name") not in (None, "single"):
        return "views"
    if marginal in ("segments", "ar1", "content_style"):
        return marginal
    if space == "sphere" and conditional in ("vmf", "anisotropic"):
        return "sphere_vmf" if conditional == "vmf" else "sphere_anisotropic"
    if space == "box" and conditional in ("laplace", "normal", "gennorm"):
        return "box_lp"
    return "other"


@dataclass(frozen=True)
class Prediction:
    """What theory predicts for a loss on processes of ``family`` (where the loss's options and the process's
    config match ``loss`` and ``process``: dotted key -> the values that apply).

    ``setting``: the run settings the theorem ties together or its thresholds were measured at (full dotted config
    keys -> values; Zimmermann et al.'s vMF theorem needs a critic matched to the positives, τ = 1/κ). The atlas
    trains the prediction's cell with them; a run outside them that misses the threshold is ``outside its
    setting``, not a contradiction of the theorem."""

    family: str
    up_to: str
    source: str
    metric: str
    thresholds: Mapping[str, float]
    recovers: bool = True
    loss: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    process: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    setting: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"prediction family {self.family!r} is not one of {', '.join(FAMILIES)}")
        if not self.thresholds or SCALE not in self.thresholds:
            raise ValueError(f"a prediction states its threshold at each scale, {SCALE} among them")

    def applies(self, loss: Any, dgp: Mapping[str, Any]) -> bool:
        """Whether it is the prediction for ``loss`` (its attributes) on the process of config ``dgp``."""
        return (family(dgp) == self.family
                and all(getattr(loss, key, None) in values for key, values in self.loss.items())
                and all(dotted(dgp, key) in values for key, values in self.process.items()))

    def describe(self) -> str:
        """One line: what is predicted, from where, and what counts (in which setting)."""
        bound = "≥" if self.recovers else "≤"
        what = f"identified up to {self.up_to}" if self.recovers else f"not recovered: {self.up_to}"
        values = [f"{key}={value:g}" if isinstance(value, float) else f"{key}={value}" for key, value in self.setting.items()]
        where = f" with {', '.join(values)}" if values else ""
        return f"{what} ({self.source}); {self.metric} {bound} {self.thresholds[SCALE]:g} at {SCALE} scale{where}"

    def outside(self, config: Mapping[str, Any]) -> list[str]:
        """The keys of :attr:`setting` on which the run config ``config`` differs, each as ``key=value (its
        setting: value)``."""
        return [f"{key}={dotted(config, key)!r} (its setting: {value!r})" for key, value in self.setting.items()
                if dotted(config, key) != value]


def prediction_for(predictions: tuple[Prediction, ...], loss: Any, dgp: Mapping[str, Any]) -> Prediction | None:
    """The first of ``predictions`` that applies to ``loss`` on the process of config ``dgp``; None."""
    return next((p for p in predictions if p.applies(loss, dgp)), None)


def verdict(prediction: Prediction | None, summary: Mapping[str, Any], switch: str | None = None,
            config: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The summary's keys for a run's prediction: ``prediction`` (:meth:`Prediction.describe`, or ``no theorem``),
    and with one ``prediction_metric``, ``prediction_threshold`` and ``prediction_verdict`` (agrees, contradicts,
    or not measured when the run's summary lacks the metric: then naming ``switch``, the ``eval.*`` key that turns
    the metric on, where it has one). A run whose ``config`` lies outside the prediction's setting
    (:meth:`Prediction.outside`) and misses its threshold is ``outside its setting``, the keys named in
    ``prediction_outside``."""
    if prediction is None:
        return {"prediction": "no theorem", "prediction_verdict": "no theorem"}
    value, threshold = summary.get(prediction.metric), prediction.thresholds[SCALE]
    outside = prediction.outside(config) if config is not None else []
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        said = "not measured" + (f" (turn on {switch})" if switch else "")
    elif (value >= threshold) == prediction.recovers:
        said = "agrees"
    else:
        said = "outside its setting" if outside else "contradicts"
    return {"prediction": prediction.describe(), "prediction_metric": prediction.metric,
            "prediction_threshold": threshold, "prediction_verdict": said,
            **({"prediction_outside": "; ".join(outside)} if outside else {})}
