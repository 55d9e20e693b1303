"""Mutual information at an evaluation: the critic bounds against plain references, their order around the
truth, and the K each loss's bound has."""

import math

import pytest
import torch

import dgp
from identifiable_cl.evaluation.information import loo_upper_bound, true_critic_bound, truth
from identifiable_cl.losses import LOSSES


def sphere(kappa, dim=3, seed=0):
    return dgp.build_process({"dim": dim, "space": "sphere", "marginal": "uniform",
                              "conditional": {"name": "vmf", "kappa": kappa}, "mixing": "identity",
                              "dtype": "float64"}, seed)


def draws(process, k, seed=0):
    g = process.make_generator(seed)
    z = process.sample_latents(k, g)
    return z, process.conditional.sample(z, g), process.sample_latents(k - 1, g)


def test_the_critic_bounds_are_their_equations_written_out(monkeypatch):
    from identifiable_cl.evaluation import information

    process = sphere(4.0)
    z, z_pos, negatives = draws(process, 12)
    logp = process.conditional.log_density
    lower = math.log(12) + sum(
        float(logp(z_pos[i], z[i]) - torch.logsumexp(torch.stack([logp(z_pos[i], z[i])] + [logp(c, z[i]) for c in negatives]), 0))
        for i in range(12)) / 12
    upper = sum(float(logp(z_pos[i], z[i]) - torch.logsumexp(torch.stack([logp(z_pos[i], z[j]) for j in range(12) if j != i]), 0)
                      + math.log(11)) for i in range(12)) / 12
    for block in (1 << 22, 7):  # one block, and blocks of a few anchors
        monkeypatch.setattr(information, "BLOCK_ELEMENTS", block)
        assert true_critic_bound(logp, z, z_pos, negatives) == pytest.approx(lower, abs=1e-12)
        assert loo_upper_bound(logp, z, z_pos) == pytest.approx(upper, abs=1e-12)


@pytest.mark.parametrize("kappa, dim", [(1.0, 10), (10.0, 3), (100.0, 10)])
def test_the_truth_lies_between_the_critic_bounds_and_log_k_caps_the_lower_one(kappa, dim):
    process = sphere(kappa, dim)
    out = truth(process, 1024, process.make_generator(1))
    info = out["mi_true"]
    assert out["log_k"] == math.log(1024)
    assert out["mi_true_critic_bound"] <= min(info, out["log_k"]) + 0.05
    assert out["mi_loo_upper"] >= info - 0.05
    if info < 0.5 * out["log_k"]:  # far below log K the true critic's bound reaches the truth
        assert out["mi_true_critic_bound"] == pytest.approx(info, abs=0.05)
    else:  # above it, the bound is capped by log K: no encoder reaches the truth at this K
        assert info > out["log_k"] and out["mi_true_critic_bound"] < out["log_k"]


def test_without_a_log_density_the_critic_bounds_are_null():
    process = dgp.build_process({"space": "sphere", "conditional": {"name": "laplace", "scale": 0.1}}, 0)
    out = truth(process, 64, process.make_generator(0))
    assert out["log_k"] == math.log(64) and out["mi_true_critic_bound"] is None and out["mi_loo_upper"] is None


@pytest.mark.parametrize("negatives, separate, k", [("symmetric", None, 15), ("r24", None, 15), ("one_sided", None, 8),
                                                    ("first_view_others", None, 8), ("independent", 5, 6),
                                                    ("first_view", None, None)])
def test_each_negative_set_has_its_number_of_candidates(negatives, separate, k):
    loss = LOSSES.build({"name": "infonce", "negatives": negatives}, key="loss", dim=3)
    bound = loss.mi_bound(1.0, 8, separate)
    assert (bound and bound[0]) == k


def test_a_log_mean_loss_gives_the_same_bound_as_its_log_sum_form_and_decoupled_ones_none():
    g = torch.Generator().manual_seed(0)
    h, h_pos = torch.randn(8, 3, generator=g), torch.randn(8, 3, generator=g)
    values = {}
    for reduction in ("logsumexp", "logmeanexp"):
        loss = LOSSES.build({"name": "infonce", "similarity": "l2", "reduction": reduction}, key="loss", dim=3)
        values[reduction] = loss.mi_bound(float(loss(h, h_pos)), 8, None)
    assert values["logsumexp"][0] == values["logmeanexp"][0] == 15
    assert values["logsumexp"][1] == pytest.approx(values["logmeanexp"][1], abs=1e-6)
    decoupled = LOSSES.build({"name": "infonce", "reduction": "decoupled_logsumexp"}, key="loss", dim=3)
    assert decoupled.mi_bound(1.0, 8, None) is None
    tilted = LOSSES.build({"name": "hard_negative", "beta": 1.0}, key="loss", dim=3)
    plain = LOSSES.build({"name": "hard_negative", "beta": 0.0}, key="loss", dim=3)
    assert tilted.mi_bound(1.0, 8, None) is None and plain.mi_bound(1.0, 8, None) == (15, math.log(15) - 1.0)
