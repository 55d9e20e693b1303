"""The yao2024 experiment (Yao et al. 2024, partial observability): the paper scale is the official numerical
experiment and the claims read keys the runs write."""

from __future__ import annotations

import itertools

from identifiable_cl.reproduce.experiment import load_experiment

PAPER_VIEWS = [["z0", "z1", "z2", "z3", "z4"], ["z0", "z1", "z2", "z4", "z5"], ["z0", "z1", "z2", "z3", "z5"],
               ["z0", "z1", "z3", "z4", "z5"]]


def test_the_paper_scale_is_the_official_numerical_experiment():
    """main_numerical.py's defaults: 6 latents, the four views' latent sets, a 3-layer mixing per view with
    condition ratio 0.001, encoders 5·[10, 50, 50, 50, 50, 10], batch 4096, Adam 1e-4, 100,001 steps, every subset
    of two or more views, the code's UnifiedCLLoss (objective joint: LpSimCLRLoss with p = 2, τ = 1, the fresh
    negatives, log-mean-exp) but in the run that keeps the earlier pairwise objective, and its evaluation of the
    Gumbel selection over 10 batches of fresh noise; the dependent runs make all latents dependent through a
    Wishart covariance."""
    experiment = load_experiment("yao2024")
    selections, objectives = {}, {}
    for run in experiment.runs:
        config = experiment.config(run.label, "paper")
        assert config["dgp"]["dim"] == 6 and config["dgp"]["views"]["latents"] == PAPER_VIEWS
        assert config["dgp"]["views"]["contrast"] == "all" and config["dgp"]["conditional"]["name"] == "keep"
        assert config["dgp"]["mixing"]["layers"] == 3 and config["dgp"]["mixing"]["cond_ratio"] == 0.001
        assert config["encoder"]["widths"] == [5 * w for w in (10, 50, 50, 50, 50, 10)]
        assert config["encoder"]["shared"] is False
        assert config["encoder"]["output_dim"] == (44 if run.label == "concat" else 5)  # concat: 4 per subset
        assert config["train"]["batch_size"] == 4096 and config["optim"]["lr"] == 1e-4
        assert config["train"]["steps"] == 100001
        assert config["loss"]["similarity"] == "l2" and config["loss"]["tau"] == 1.0
        dependent = config["dgp"]["marginal"].get("dependent_dims", 0)
        assert dependent == (6 if run.label.endswith("_dependent") else 0)
        selections[run.label] = config["dgp"]["views"]["selection"]
        objectives[run.label] = config["dgp"]["views"]["objective"]
        assert config["loss"]["negatives"] == "independent" and config["loss"]["reduction"] == "logmeanexp"
        assert config["eval"]["gumbel_draws"] == 10  # the code's --num-eval-batches
    assert selections == {"ground_truth": "ground_truth", "ground_truth_pairs": "ground_truth",
                          "ground_truth_dependent": "ground_truth", "gumbel": "gumbel", "gumbel_dependent": "gumbel",
                          "concat": "concat"}
    assert objectives == {label: "pairs" if label == "ground_truth_pairs" else "joint" for label in selections}
    smoke = {run.label: experiment.config(run.label, "smoke")["train"] for run in experiment.runs}
    assert smoke["ground_truth"]["steps"] == 1000 and smoke["gumbel"]["steps"] == 1500
    assert all(train["threads"] == 1 for train in smoke.values())
    assert experiment.config("gumbel", "medium")["train"]["steps"] == 10000


def test_every_claim_reads_a_key_its_run_writes():
    """The keys of the runs' summaries: each subset's blocks from each view of it and their summary over subsets."""
    seen = [{int(name[1:]) for name in view} for view in PAPER_VIEWS]
    written = {"r2_nonlinear_shared_min", "r2_nonlinear_shared_mean", "r2_nonlinear_unshared_max",
               "r2_nonlinear_unshared_mean", "r2_linear_shared_min"}
    for r in (2, 3, 4):
        for subset in itertools.combinations(range(4), r):
            name = "_".join(str(v + 1) for v in subset)
            shared = set.intersection(*(seen[v] for v in subset))
            for v in subset:
                prefix = "" if v == 0 else f"view{v + 1}_"
                written.add(f"{prefix}r2_nonlinear_shared_{name}")
                if seen[v] - shared:
                    written.add(f"{prefix}r2_nonlinear_unshared_{name}")
    written |= {f"{key}_drawn" for key in written} | {"gumbel_mean_gap", "gumbel_mode_agreement"}  # Gumbel runs
    written |= {f"identity_{key}" for key in written}
    experiment = load_experiment("yao2024")
    labels = {run.label for run in experiment.runs}
    for claim in experiment.claims:
        for operand in (claim.left, claim.right):
            if operand.metric is not None:
                assert operand.run in labels and operand.metric in written, (claim.text, operand.metric)
    assert set(experiment.metrics) <= written
