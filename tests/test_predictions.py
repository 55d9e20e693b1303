"""Predictions: the process families, the choice of a loss's prediction, the verdict, and every declared prediction
measured by the metric it names in a run of its own family."""

from __future__ import annotations

import pytest
from torch import nn

from identifiable_cl.components import build, load_config
from identifiable_cl.evaluation.catalog import metric_switch
from identifiable_cl.losses import LOSSES
from identifiable_cl.losses.contract import traits
from identifiable_cl.predictions import FAMILIES, Prediction, family, prediction_for, verdict
from identifiable_cl.training import Trainer
from tests.tiny import TINY

EUCLIDEAN = {"dgp.space.name": "euclidean", "dgp.negatives.name": "none"}
PROCESSES = {
    "sphere_vmf": {"dgp.space.name": "sphere", "dgp.marginal.name": "uniform", "dgp.conditional.name": "vmf"},
    "sphere_anisotropic": {"dgp.space.name": "sphere", "dgp.marginal.name": "uniform",
                           "dgp.conditional.name": "anisotropic"},
    "box_lp": {"dgp.conditional.name": "laplace"},
    "content_style": {"dgp.space.name": "euclidean", "dgp.marginal.name": "content_style",
                      "dgp.marginal.content_dim": 5, "dgp.conditional.name": "content_style",
                      "dgp.conditional.content_dim": 5, "dgp.negatives.name": "none"},
    "segments": {**EUCLIDEAN, "dgp.marginal.name": "segments", "dgp.conditional.name": "same_segment"},
    "ar1": {**EUCLIDEAN, "dgp.marginal.name": "ar1", "dgp.conditional.name": "ar1"},
    "views": {"dgp.dim": 8, "dgp.space.name": "euclidean", "dgp.marginal.name": "content_style",
              "dgp.marginal.content_dim": 2, "dgp.marginal.modality_dim": 2, "dgp.conditional.name": "content_style",
              "dgp.conditional.content_dim": 2, "dgp.conditional.modality_dim": 2, "dgp.negatives.name": "none",
              "dgp.views.name": "subsets", "dgp.views.latents": [["content", "style", "m1"], ["content", "style", "m2"]],
              "dgp.views.shared_mixing": True, "encoder.output_dim": 2},
}
"""A process of each family, over the tiny preset."""


def resolved_dgp(overrides):
    return build(load_config(None, {**TINY, **overrides})).process.config


@pytest.mark.parametrize("name", list(PROCESSES))
def test_every_family_is_told_from_the_process(name):
    assert family(resolved_dgp(PROCESSES[name])) == name


def test_a_process_of_no_family_is_other():
    assert family(resolved_dgp({**EUCLIDEAN, "dgp.marginal.name": "normal", "dgp.conditional.name": "normal"})) == \
        "other"


def test_the_verdict_reads_the_metric_against_the_threshold_either_way():
    recovers = Prediction("box_lp", "signs", "a paper", "mcc_pearson", {"paper": 0.95, "smoke": 0.8})
    fails = Prediction("box_lp", "lost", "a paper", "mcc_pearson", {"smoke": 0.5}, recovers=False)
    assert verdict(recovers, {"mcc_pearson": 0.81})["prediction_verdict"] == "agrees"
    assert verdict(recovers, {"mcc_pearson": 0.79})["prediction_verdict"] == "contradicts"
    assert verdict(fails, {"mcc_pearson": 0.3})["prediction_verdict"] == "agrees"
    assert verdict(fails, {"mcc_pearson": 0.7})["prediction_verdict"] == "contradicts"
    assert verdict(recovers, {})["prediction_verdict"] == "not measured"
    assert verdict(recovers, {}, "eval.mcc_x")["prediction_verdict"] == "not measured (turn on eval.mcc_x)"
    assert verdict(None, {"mcc_pearson": 1.0}) == {"prediction": "no theorem", "prediction_verdict": "no theorem"}
    assert verdict(recovers, {"mcc_pearson": 0.9})["prediction"] == (
        "identified up to signs (a paper); mcc_pearson ≥ 0.8 at smoke scale")


def test_a_run_outside_the_setting_that_misses_is_outside_it_not_a_contradiction():
    matched = Prediction("sphere_vmf", "an orthogonal map", "a theorem", "r2_linear", {"smoke": 0.9},
                         setting={"loss.tau": 0.1, "dgp.conditional.kappa": 10.0})
    inside = {"loss": {"tau": 0.1}, "dgp": {"conditional": {"kappa": 10.0}}}
    outside = {"loss": {"tau": 0.1}, "dgp": {"conditional": {"kappa": 1.0}}}
    assert verdict(matched, {"r2_linear": 0.6}, config=inside)["prediction_verdict"] == "contradicts"
    missed = verdict(matched, {"r2_linear": 0.6}, config=outside)
    assert (missed["prediction_verdict"], missed["prediction_outside"]) == (
        "outside its setting", "dgp.conditional.kappa=1.0 (its setting: 10.0)")
    assert verdict(matched, {"r2_linear": 0.95}, config=outside)["prediction_verdict"] == "agrees"
    assert matched.describe().endswith("at smoke scale with loss.tau=0.1, dgp.conditional.kappa=10")


def test_the_atlas_trains_a_cell_in_its_prediction_s_setting():
    from identifiable_cl.losses.infonce import InfoNCE
    from identifiable_cl.reproduce.atlas import cell_overrides

    (vmf,) = [p for p in InfoNCE.predictions if p.family == "sphere_vmf"]
    overrides = cell_overrides("infonce", "sphere_vmf", PROCESSES["sphere_vmf"], vmf)
    assert (overrides["loss.tau"], overrides["dgp.conditional.kappa"]) == (0.1, 10.0)
    config = load_config(None, {**TINY, **overrides})
    assert vmf.outside(config) == []


def test_a_prediction_applies_where_its_loss_options_and_process_match():
    loss = LOSSES.build({"name": "infonce", "similarity": "l1"}, key="loss", dim=10)
    declared = traits(loss).predictions
    laplace = resolved_dgp({"dgp.conditional.name": "laplace"})
    normal = resolved_dgp({"dgp.conditional.name": "normal"})
    assert prediction_for(declared, loss, laplace).metric == "mcc_pearson"
    assert prediction_for(declared, loss, normal) is None  # an L1 critic on Normal positives: no theorem here


def test_a_prediction_states_its_family_and_smoke_threshold():
    with pytest.raises(ValueError, match="family 'torus' is not one of"):
        Prediction("torus", "x", "y", "r2_linear", {"smoke": 0.9})
    with pytest.raises(ValueError, match="threshold at each scale, smoke among them"):
        Prediction("box_lp", "x", "y", "r2_linear", {"paper": 0.9})


def test_a_plugin_declares_its_predictions_as_built_in_losses_do():
    class Plugin(nn.Module):
        predictions = (Prediction("sphere_vmf", "an orthogonal map", "a plugin's paper", "r2_linear", {"smoke": 0.5}),)

    class Broken(nn.Module):
        predictions = [{"family": "sphere_vmf"}]

    dgp = resolved_dgp(PROCESSES["sphere_vmf"])
    assert prediction_for(traits(Plugin()).predictions, Plugin(), dgp).source == "a plugin's paper"
    with pytest.raises(ValueError, match="loss 'Broken': predictions=.* is invalid: expected a tuple of"):
        traits(Broken())


def declared_cases() -> list[tuple[str, int]]:
    return [(name, i) for name in LOSSES.names() for i, _ in enumerate(getattr(LOSSES.get(name), "predictions", ()))]


LOSS_OPTIONS = {"similarity": "loss.similarity"}
PROCESS_OPTIONS = {"conditional.name": "dgp.conditional.name", "conditional.lambdas": "dgp.conditional.lambdas",
                   "marginal.innovation": "dgp.marginal.innovation"}


@pytest.mark.integration
@pytest.mark.parametrize("name,index", declared_cases())
def test_every_declared_prediction_is_measured_by_its_metric_in_a_run_of_its_family(name, index, tmp_path):
    """Two steps of a tiny run where the prediction applies, in its setting: its summary names the prediction and
    holds the metric (no prediction names a metric no run of its family reports)."""
    prediction = LOSSES.get(name).predictions[index]
    overrides = {**TINY, "train.steps": 2, "train.eval_every": 2, "train.checkpoint_every": 2,
                 **PROCESSES[prediction.family], "loss.name": name}
    overrides.update({LOSS_OPTIONS[key]: values[0] for key, values in prediction.loss.items()})
    overrides.update({PROCESS_OPTIONS[key]: values[0] for key, values in prediction.process.items()})
    if prediction.family == "ar1":
        overrides["dgp.conditional.innovation"] = overrides["dgp.marginal.innovation"]
    overrides.update(prediction.setting)  # in its setting, a run that misses contradicts it
    switch = metric_switch(prediction.metric)  # e.g. FastICA's MCCs are off unless asked for, as hyvarinen2016 does
    if switch is not None:
        overrides[switch] = True
    summary = Trainer.create(load_config(None, overrides), tmp_path / "run", progress=False).run()
    assert summary["prediction"] == prediction.describe() and summary["prediction_metric"] == prediction.metric
    assert summary["prediction_verdict"] in ("agrees", "contradicts"), summary.get(prediction.metric)


def test_a_run_says_what_theory_predicts_for_it(tmp_path):
    """The default process and loss (box, Laplace positives, L1 InfoNCE): Z21's prediction, in the summary."""
    summary = Trainer.create(load_config(None, {**TINY, "train.steps": 2}), tmp_path / "run", progress=False).run()
    assert summary["prediction_metric"] == "mcc_pearson" and "Zimmermann et al. 2021" in summary["prediction"]
    assert summary["prediction_verdict"] in ("agrees", "contradicts") and set(FAMILIES) >= {"box_lp"}


def test_a_metric_off_by_default_is_named_by_the_key_that_turns_it_on():
    assert metric_switch("mcc_ica_abs_pearson") == "eval.mcc_ica_abs_pearson"
    assert metric_switch("r2_linear") is None and metric_switch("r2_nonlinear_content") == "eval.nonlinear"
