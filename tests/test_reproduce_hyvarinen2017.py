"""The hyvarinen2017 experiment (PCL beside InfoNCE on AR(1) sources): both losses see one
process with one budget, and the failure runs are the theorem's excluded case."""

from __future__ import annotations

from identifiable_cl.reproduce.experiment import load_experiment


def test_pcl_and_infonce_see_the_same_process_with_the_same_budget_at_every_depth():
    experiment = load_experiment("hyvarinen2017")
    for layers in (1, 2, 3, 4):
        pcl = experiment.config(f"pcl_L{layers}", "smoke")
        infonce = experiment.config(f"infonce_L{layers}", "smoke")
        assert pcl["dgp"] == infonce["dgp"]
        assert pcl["dgp"]["mixing"]["layers"] == layers
        assert pcl["dgp"]["marginal"] == {"name": "ar1", "rho": 0.7, "innovation": "laplace", "scale": 1.0}
        assert pcl["dgp"]["conditional"] == {**pcl["dgp"]["marginal"], "name": "ar1"}
        assert (pcl["train"], pcl["optim"], pcl["encoder"]) == (infonce["train"], infonce["optim"], infonce["encoder"])
        assert pcl["loss"] == {"name": "pcl"}
        assert infonce["loss"] == {"name": "infonce", "similarity": "l1", "tau": 1.0}


def test_the_failure_runs_have_gaussian_innovations_on_both_sides_and_the_matching_critic():
    experiment = load_experiment("hyvarinen2017")
    for label in ("pcl_normal_L3", "infonce_normal_L3"):
        dgp = experiment.config(label, "smoke")["dgp"]
        assert dgp["marginal"]["innovation"] == dgp["conditional"]["innovation"] == "normal"
    assert experiment.config("infonce_normal_L3", "smoke")["loss"] == {"name": "infonce", "similarity": "l2", "tau": 2.0}
    assert experiment.config("pcl_L3", "paper")["dgp"]["dim"] == 20  # the paper's (the port's) 20 components
    claimed = {c.left.run for c in experiment.claims}
    assert "pcl_normal_L3" in claimed and not any(label.startswith("infonce") for label in claimed)
