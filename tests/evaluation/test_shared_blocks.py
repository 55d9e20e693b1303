"""Every contrasted subset's shared block scored from each of its views' selected coordinates (Yao et al. 2024),
on cases whose R² is known in closed form."""

import math

import pytest
import torch

from identifiable_cl.evaluation.views import GUMBEL_STD, evaluate_views, shared_block_metrics, shared_block_summary
from tests.dgp.test_partial import PAPER_VIEWS, partial


def paper(selection="ground_truth", contrast="all", **changes):
    views = {"name": "subsets", "latents": PAPER_VIEWS, "contrast": contrast, "selection": selection}
    return partial(views=views, mixing="identity", **changes)


def test_the_true_coordinates_hold_the_shared_block_and_nothing_else():
    """With identity mixings the observation x_v is z[S_v] itself and the ground-truth coordinates are exactly the
    shared latents: R² 1 for the shared block from every view of every subset, 0 (up to sampling) for the rest."""
    process = paper()
    out = shared_block_metrics([lambda x: x] * 4, process, process.make_generator(0), n_fit=3000, n_test=3000,
                               nonlinear=False)
    subsets = [s for s, _ in process.views.contrasted]
    assert len(out) == 2 * sum(len(s) for s in subsets) == 56
    for subset in subsets:
        name = "shared_" + "_".join(str(v + 1) for v in subset)
        for v in subset:
            prefix = "" if v == 0 else f"view{v + 1}_"
            assert out[f"{prefix}r2_linear_{name}"] == pytest.approx(1.0, abs=1e-9)
            assert out[f"{prefix}r2_linear_un{name}"] == pytest.approx(0.0, abs=0.01)


def test_a_dependent_latent_is_read_through_its_dependence():
    """(z0, z1) dependent with correlation ρ (the Wishart draw), z2 independent; views seeing (z0, z1) and (z0, z2)
    share z0, which predicts view 1's other latent z1 with linear R² ρ² and view 2's, z2, not at all."""
    process = partial(marginal={"name": "gaussian_blocks", "dependent_dims": 2}, mixing="identity", seed=4,
                      views={"name": "subsets", "latents": [["z0", "z1"], ["z0", "z2"]], "contrast": "all"})
    sigma = process.marginal.sigma
    rho2 = float(sigma[0, 1] ** 2 / (sigma[0, 0] * sigma[1, 1]))
    out = shared_block_metrics([lambda x: x] * 2, process, process.make_generator(1), n_fit=20000, n_test=20000,
                               nonlinear=False)
    assert out["r2_linear_shared_1_2"] == pytest.approx(1.0, abs=1e-9)
    assert out["r2_linear_unshared_1_2"] == pytest.approx(rho2, abs=0.02)
    assert out["view2_r2_linear_unshared_1_2"] == pytest.approx(0.0, abs=0.01)


def test_a_selection_too_wide_for_the_encodings_scores_nothing():
    process = paper("concat")
    assert shared_block_metrics([lambda x: x] * 4, process, process.make_generator(0), n_fit=100, n_test=100,
                                nonlinear=False) == {}
    wide = [lambda x: torch.cat([x, x, x], dim=1)] * 4
    out = shared_block_metrics(wide, process, process.make_generator(0), n_fit=100, n_test=100, nonlinear=False)
    assert len(out) == 56


def test_evaluate_views_adds_them_after_its_own_draws():
    """The other metrics of a process whose views contrast subsets are those of the same views without them: the
    shared blocks are drawn after everything else."""
    options = {"n_fit": 200, "n_test": 200, "nonlinear": False, "rotation_reference": False}
    plain = partial(mixing="identity")
    contrasting = paper()
    a = evaluate_views([lambda x: x] * 4, plain, plain.make_generator(3), **options)
    b = evaluate_views([lambda x: x] * 4, contrasting, contrasting.make_generator(3), **options)
    assert {k: v for k, v in b.items() if "shared" not in k} == a
    assert b["view4_r2_linear_shared_1_2_3_4"] == pytest.approx(1.0, abs=1e-9)
    assert b["view2_r2_linear_z3"] == pytest.approx(0.0, abs=0.1) and b["r2_linear_z3"] == pytest.approx(1.0)


def test_the_gumbel_mode_scores_views_of_different_widths():
    """The identity baseline of views that see 2 and 3 latents: the selection's mode on each view's own width."""
    process = partial(mixing="identity", views={"name": "subsets", "latents": [["z0", "z1"], ["z0", "z2", "z3"]],
                                                "contrast": "all", "selection": "gumbel"})
    out = shared_block_metrics([lambda x: x] * 2, process, process.make_generator(0), n_fit=500, n_test=500,
                               nonlinear=False)
    assert set(out) == {"r2_linear_shared_1_2", "r2_linear_unshared_1_2", "view2_r2_linear_shared_1_2",
                        "view2_r2_linear_unshared_1_2"}


def test_the_summary_over_subsets_is_the_least_shared_and_the_largest_unshared_score():
    """Identity mixings: every shared block read exactly (least R² 1), the unshared latents not at all (largest R²
    near 0); the summary keys are the min, max and means of the 56 scores, and evaluate_views adds them."""
    from identifiable_cl.evaluation.views import shared_block_summary

    process = paper()
    out = shared_block_metrics([lambda x: x] * 4, process, process.make_generator(0), n_fit=2000, n_test=2000,
                               nonlinear=False)
    summary = shared_block_summary(out)
    shared = [v for k, v in out.items() if "_unshared_" not in k]
    unshared = [v for k, v in out.items() if "_unshared_" in k]
    assert set(summary) == {"r2_linear_shared_min", "r2_linear_shared_mean", "r2_linear_unshared_max",
                            "r2_linear_unshared_mean"}
    assert summary["r2_linear_shared_min"] == min(shared) == pytest.approx(1.0, abs=1e-9)
    assert summary["r2_linear_unshared_max"] == max(unshared) < 0.01
    assert summary["r2_linear_unshared_mean"] == pytest.approx(sum(unshared) / 28)
    assert shared_block_summary({"r2_linear_shared_1_2": 0.5, "view2_r2_nonlinear_unshared_1_2": 0.2}) == {
        "r2_linear_shared_min": 0.5, "r2_linear_shared_mean": 0.5, "r2_nonlinear_unshared_max": 0.2,
        "r2_nonlinear_unshared_mean": 0.2}
    assert shared_block_summary({}) == {}
    options = {"n_fit": 200, "n_test": 200, "nonlinear": False, "rotation_reference": False}
    scored = evaluate_views([lambda x: x] * 4, process, process.make_generator(3), **options)
    assert scored["r2_linear_shared_min"] == pytest.approx(1.0, abs=1e-9)


def test_the_gumbel_selection_is_also_scored_over_draws_of_its_noise():
    """Identity mixings, encoders x + shift: shifts 10 apart (≫ the noise's π/√6) make every draw pick the mode's
    coordinates, so each drawn score is the mode's, the agreement 1 and the gap the shifts' own; without a shift
    the means are all near 0 and the draws disagree with the mode. The mode's scores stay those of D = 0."""
    process = paper("gumbel")
    shift = torch.tensor([40.0, 30.0, 20.0, 10.0, 0.0])
    options = {"n_fit": 400, "n_test": 400, "nonlinear": False}
    mode = shared_block_metrics([lambda x: x + shift] * 4, process, process.make_generator(0), **options)
    out = shared_block_metrics([lambda x: x + shift] * 4, process, process.make_generator(0), gumbel_draws=3, **options)
    assert {k: v for k, v in out.items() if not k.endswith("_drawn") and not k.startswith("gumbel_")} == mode
    assert {k: v for k, v in out.items() if k.endswith("_drawn")} == pytest.approx({k + "_drawn": v for k, v in
                                                                                    mode.items()}, rel=1e-12)
    assert out["gumbel_mode_agreement"] == 1.0
    # k = 2, 3, 4: the mean of the top k shifts less that of the rest is 35 − 10 = 30 − 5 = 25 − 0 = 25
    assert out["gumbel_mean_gap"] == pytest.approx(25 / GUMBEL_STD, abs=0.1)
    assert GUMBEL_STD == pytest.approx(math.pi / 6**0.5)
    summary = shared_block_summary(out)
    assert summary["r2_linear_shared_min_drawn"] == pytest.approx(summary["r2_linear_shared_min"], rel=1e-12)
    assert set(summary) == {f"r2_linear_{part}{suffix}" for part in ("shared_min", "shared_mean", "unshared_max",
                                                                      "unshared_mean") for suffix in ("", "_drawn")}
    plain = shared_block_metrics([lambda x: x] * 4, process, process.make_generator(0), gumbel_draws=8, **options)
    assert plain["gumbel_mode_agreement"] < 0.9 and abs(plain["gumbel_mean_gap"]) < 0.1
    assert not any(k.endswith("_drawn") or k.startswith("gumbel_") for k in
                   shared_block_metrics([lambda x: x] * 4, paper(), process.make_generator(0), gumbel_draws=3,
                                        **options))


def test_evaluate_views_draws_the_noise_only_when_asked():
    process = paper("gumbel")
    options = {"n_fit": 200, "n_test": 200, "nonlinear": False, "rotation_reference": False}
    assert not any(k.endswith("_drawn") for k in evaluate_views([lambda x: x] * 4, process, process.make_generator(3),
                                                                **options))
    drawn = evaluate_views([lambda x: x] * 4, process, process.make_generator(3), gumbel_draws=2, **options)
    assert "view4_r2_linear_shared_1_2_3_4_drawn" in drawn and "r2_linear_shared_min_drawn" in drawn
