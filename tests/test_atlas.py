"""The identifiability atlas: cells made from the registries (plugins included), each prediction a claim, the
table and matrix of the report, and the whole experiment at tiny scale."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from identifiable_cl.aggregate import Run
from identifiable_cl.losses import LOSSES
from identifiable_cl.predictions import Prediction
from identifiable_cl.reproduce.atlas import cell_of, cell_overrides
from identifiable_cl.reproduce.experiment import load_experiment
from identifiable_cl.reproduce.report import RunResults, cells_table, draw


def test_every_loss_has_its_cells_and_every_prediction_its_claim():
    atlas = load_experiment("atlas")
    labels = [run.label for run in atlas.runs]
    assert {cell_of(label)[0] for label in labels} == set(LOSSES.names())
    claimed = {claim.left.run for claim in atlas.claims}
    for name in LOSSES.names():
        for prediction in getattr(LOSSES.get(name), "predictions", ()):
            if f"{name}__{prediction.family}" in labels:
                assert f"{name}__{prediction.family}" in claimed
    assert "tcl__segments" in labels and "tcl__sphere_vmf" not in labels  # a loss reading segments needs them
    assert "infonce__views" in claimed and "tcl__views" not in labels  # Daunhawer et al.'s multi-view content


def test_a_cell_takes_its_predictions_options_and_the_switch_of_its_metric():
    prediction = Prediction("segments", "|s|", "a paper", "mcc_ica_abs_pearson", {"smoke": 0.5},
                            loss={"feature": ("abs",)}, process={"marginal.law": ("laplace",)})
    overrides = cell_overrides("tcl", "segments", {"dgp.marginal.name": "segments"}, prediction)
    assert overrides == {"dgp.marginal.name": "segments", "loss.name": "tcl", "loss.feature": "abs",
                         "dgp.marginal.law": "laplace", "eval.mcc_ica_abs_pearson": True}


class Planted(nn.Module):
    """A plugin loss that declares a prediction on the vMF family."""

    requires_negatives = False
    predictions = (Prediction("sphere_vmf", "an orthogonal map", "a plugin's own theorem", "r2_linear",
                              {"paper": 0.9, "smoke": 0.7}),)

    def __init__(self, *, dim: int):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(()))

    def forward(self, h, h_pos, h_neg=None):
        return self.scale * (h - h_pos).pow(2).sum(1).mean()


def test_a_plugin_loss_with_a_prediction_appears_without_editing_the_experiment():
    LOSSES.register("planted_plugin")(Planted)
    try:
        atlas = load_experiment("atlas")
    finally:
        LOSSES._entries.pop("planted_plugin")
    labels = [run.label for run in atlas.runs]
    assert "planted_plugin__sphere_vmf" in labels and "planted_plugin__box_lp" in labels
    (claim,) = [c for c in atlas.claims if c.left.run == "planted_plugin__sphere_vmf"]
    assert "a plugin's own theorem" in claim.text and claim.op == ">=" and claim.right.constant("smoke") == 0.7


def test_the_cells_table_lists_contradictions_first_and_the_matrix_is_drawn(tmp_path):
    atlas = load_experiment("atlas")
    scores = {"infonce__sphere_vmf": 0.95, "infonce__box_lp": 0.2, "margin__sphere_vmf": 0.6}
    results = {run.label: RunResults(run.label) for run in atlas.runs}
    for label, score in scores.items():
        summary = {"r2_linear": score, "mcc_pearson": score, "identity_r2_linear": 0.6, "identity_mcc_pearson": 0.45}
        results[label] = RunResults(label, [Run(Path(label), {}, (), summary)])
    rows = cells_table(atlas, results, "smoke").splitlines()[2:]
    assert rows[0].startswith("| infonce | box_lp |") and rows[0].endswith("| contradicts |")
    assert rows[1].startswith("| infonce | sphere_vmf |") and rows[1].endswith("| agrees |")
    assert any(r.startswith("| margin | sphere_vmf |") and r.endswith("| no theorem |") for r in rows)
    assert all(r.count(" | ") == 6 for r in rows)  # |s| in a prediction does not split its row
    assert list(draw(atlas, "smoke", results, tmp_path)) == ["atlas"]


@pytest.mark.integration
def test_the_atlas_runs_at_tiny_scale(tmp_path):
    """Every cell trains, the report names each verdict, and the matrix is drawn."""
    env = {**os.environ, "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "identifiable_cl.cli", "reproduce", "atlas", "--scale", "tiny",
                           "--workers", "2", "--out", str(tmp_path / "out")], capture_output=True, text=True,
                          env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    text = (tmp_path / "out" / "results.md").read_text()
    assert "## Cells" in text and ("| contradicts |" in text or "| agrees |" in text)
    assert (tmp_path / "out" / "figures" / "atlas.png").is_file()
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    assert len(data["claims"]) == len(load_experiment("atlas").claims)
