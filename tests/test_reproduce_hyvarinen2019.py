"""The hyvarinen2019 experiment (GCL beside InfoNCE on segment-modulated sources): both losses see one process with
one budget, and the failure run's sources do not depend on the segment."""

from __future__ import annotations

import torch

from dgp.process import Process
from identifiable_cl.reproduce.experiment import load_experiment


def test_gcl_and_infonce_see_the_same_process_with_the_same_budget_at_every_depth():
    experiment = load_experiment("hyvarinen2019")
    for layers in (1, 2, 3, 4):
        gcl = experiment.config(f"gcl_L{layers}", "smoke")
        infonce = experiment.config(f"infonce_L{layers}", "smoke")
        assert gcl["dgp"] == infonce["dgp"]
        assert gcl["dgp"]["mixing"]["layers"] == layers
        assert gcl["dgp"]["marginal"] == {"name": "segments", "law": "laplace", "segments": 20, "std_low": 0.0,
                                          "std_high": 1.0, "location": 0.0}
        assert gcl["dgp"]["conditional"] == {"name": "same_segment"}
        assert (gcl["train"], gcl["optim"], gcl["encoder"]) == (infonce["train"], infonce["optim"], infonce["encoder"])
        assert gcl["loss"] == {"name": "gcl", "basis": ["identity"], "segments": 20}
        assert infonce["loss"] == {"name": "infonce", "similarity": "dot", "tau": 1.0}
    tcl_experiment = load_experiment("hyvarinen2016")
    for layers in (1, 2, 3, 4):  # one process and one InfoNCE in both experiments: the same runs, seed for seed
        assert experiment.config(f"infonce_L{layers}", "smoke", seed=1) == tcl_experiment.config(
            f"infonce_L{layers}", "smoke", seed=1)
    paper = experiment.config("gcl_L3", "paper")
    assert paper["dgp"]["dim"] == 20 and paper["loss"]["segments"] == paper["dgp"]["marginal"]["segments"] == 40


def test_the_failure_run_draws_stationary_sources_and_only_gcl_runs_are_claimed():
    experiment = load_experiment("hyvarinen2019")
    config = experiment.config("gcl_stationary_L3", "smoke")
    process = Process(config["dgp"], seed=0)
    assert torch.equal(process.marginal.std, torch.ones_like(process.marginal.std)) and not process.marginal.loc.any()
    modulated = Process(experiment.config("gcl_L3", "smoke")["dgp"], seed=0)
    assert modulated.marginal.std.std() > 0.1  # σ varies over segments and coordinates
    claimed = {c.left.run for c in experiment.claims}
    assert "gcl_stationary_L3" in claimed and not any(label.startswith("infonce") for label in claimed)
    assert {c.left.metric for c in experiment.claims} == {"mcc_ica_abs_pearson"}
    assert all(experiment.config(run.label, "smoke")["eval"]["mcc_ica_abs_pearson"] is True  # the claims' metric is on
               for run in experiment.runs)

