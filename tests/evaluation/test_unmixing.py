"""MCC after a FastICA unmixing (TCL's and PCL's evaluation): known transforms of known mixtures, by hand."""

import math

import pytest
import torch

from identifiable_cl.evaluation import linear_r2, metrics
from identifiable_cl.evaluation.catalog import Scoring, compute, ordered, switches
from identifiable_cl.evaluation.unmixing import fit_unmixing, unmixed_mcc

SWITCHES = ("eval.mcc_ica_pearson", "eval.mcc_ica_spearman", "eval.mcc_ica_abs_pearson", "eval.mcc_ica_abs_spearman")
ALL_ON = dict.fromkeys(SWITCHES, True)


def laplace(n: int, dim: int, seed: int) -> torch.Tensor:
    """Standard Laplace samples (float64): the difference of two unit exponentials."""
    g = torch.Generator().manual_seed(seed)
    u = torch.rand(2, n, dim, generator=g, dtype=torch.float64)
    return torch.log(u[0]) - torch.log(u[1])


def mixing(dim: int, seed: int) -> torch.Tensor:
    """A well-conditioned random mixing matrix (float64)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(dim, dim, generator=g, dtype=torch.float64) + 2.0 * torch.eye(dim, dtype=torch.float64)


def split(z, h, fit=6000):
    return z[:fit], h[:fit], z[fit:], h[fit:]


def test_a_linear_mixture_of_the_sources_is_unmixed_to_mcc_one_where_plain_mcc_is_not():
    s = laplace(12000, 4, 0)
    h = s @ mixing(4, 1) + 3.0
    plain = metrics(*split(s, h), nonlinear=False)["mcc_pearson"]
    unmixed = unmixed_mcc(*split(s, h))
    assert unmixed.mean > 0.99 and plain < 0.9
    assert sorted(i for i, _ in unmixed.matching) == [0, 1, 2, 3] and unmixed.converged


def test_tcl_features_a_mixture_of_abs_sources_score_one_against_abs_and_not_against_the_sources():
    s = laplace(12000, 4, 2)
    h = s.abs() @ mixing(4, 3)
    assert unmixed_mcc(*split(s, h), target="abs").mean > 0.99
    assert unmixed_mcc(*split(s, h), target="abs", method="spearman").mean > 0.99
    assert unmixed_mcc(*split(s, h), target="sources").mean < 0.1  # |s| is uncorrelated with the symmetric s


def test_spearman_sees_through_a_monotone_transform_that_pearson_penalises():
    s = laplace(12000, 4, 4)
    h = torch.tanh(2.0 * s) @ mixing(4, 5)
    pearson = unmixed_mcc(*split(s, h), method="pearson").mean
    spearman = unmixed_mcc(*split(s, h), method="spearman").mean
    assert spearman > 0.99 and pearson < 0.9


def test_squares_match_abs_by_rank_only():
    s = laplace(12000, 3, 6)
    h = s.square() @ mixing(3, 7)
    # s² is monotone in |s|; its heavy tail leaves FastICA a little estimation error at 6,000 samples
    assert unmixed_mcc(*split(s, h), target="abs", method="spearman").mean > 0.97
    pearson = unmixed_mcc(*split(s, h), target="abs", method="pearson").mean
    # Pearson corr(|s|, s²) of a unit Laplace: Cov = E|s|³ − E|s| E s² = 6 − 2, Var |s| = 1, Var s² = 24 − 4.
    assert pearson == pytest.approx(4.0 / math.sqrt(20.0), abs=0.03)


def test_an_unrelated_representation_scores_low():
    s, noise = laplace(12000, 4, 8), laplace(12000, 4, 9)
    h = noise @ mixing(4, 10)
    for target in ("sources", "abs"):
        for method in ("pearson", "spearman"):
            assert unmixed_mcc(*split(s, h), target=target, method=method).mean < 0.05


def test_gaussian_sources_stay_rotated_as_the_theorems_say():
    z = torch.randn(12000, 4, generator=torch.Generator().manual_seed(11), dtype=torch.float64)
    q, _ = torch.linalg.qr(torch.randn(4, 4, generator=torch.Generator().manual_seed(12), dtype=torch.float64))
    h = z @ q
    assert linear_r2(*split(z, h)).mean == pytest.approx(1.0, abs=1e-9)
    assert unmixed_mcc(*split(z, h)).mean < 0.9  # no non-Gaussianity for FastICA to find


def test_coordinates_gaussianized_one_by_one_defeat_the_unmixing_but_not_the_plain_mcc():
    s = laplace(12000, 4, 23)
    uniform = 0.5 + 0.5 * torch.sign(s) * (1.0 - torch.exp(-s.abs()))  # the Laplace CDF of each coordinate
    h = torch.special.ndtri(uniform.clamp(1e-12, 1.0 - 1e-12))  # each h_i a monotone map of s_i, and Gaussian
    assert metrics(*split(s, h), nonlinear=False)["mcc_spearman"] == pytest.approx(1.0, abs=1e-9)
    assert unmixed_mcc(*split(s, h), method="spearman").mean < 0.9


def test_null_and_duplicated_directions_are_dropped_before_unmixing():
    s = laplace(12000, 3, 13)
    mixed = s @ mixing(3, 14)
    h = torch.cat([mixed, mixed[:, :1], torch.zeros(12000, 1, dtype=torch.float64)], dim=1)  # d = 5, rank 3
    unmixing = fit_unmixing(h[:6000])
    assert unmixing.matrix.shape == (3, 5)
    assert unmixed_mcc(*split(s, h), unmixing=unmixing).mean > 0.99
    constant = torch.ones(12000, 2, dtype=torch.float64)
    result = unmixed_mcc(*split(s, constant))
    assert result.mean == 0.0 and result.per_dim == [0.0, 0.0, 0.0] and result.matching == []


def test_in_sample_fits_and_scores_the_fit_pair_and_the_seed_fixes_the_score():
    s = laplace(4000, 3, 15)
    h = torch.tanh(s) @ mixing(3, 16)
    first = unmixed_mcc(s, h, in_sample=True, seed=3)
    assert first == unmixed_mcc(s, h, in_sample=True, seed=3)
    assert first.mean > 0.85
    with pytest.raises(ValueError, match="z_test and h_test are missing"):
        unmixed_mcc(s, h)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"target": "square"}, r"target='square' is invalid: allowed 'sources', 'abs'"),
        ({"method": "kendall"}, r"method='kendall' is invalid: allowed 'pearson', 'spearman'"),
        ({"seed": -1}, r"seed=-1 is invalid: expected an integer >= 0"),
    ],
)
def test_bad_options_name_the_option_and_what_is_allowed(kwargs, message):
    s = laplace(200, 2, 17)
    with pytest.raises(ValueError, match=message):
        unmixed_mcc(s, s, in_sample=True, **kwargs)


def test_mismatched_pairs_are_refused():
    s = laplace(300, 2, 18)
    with pytest.raises(ValueError, match="h_test has 3 dimensions but h_fit has 2"):
        unmixed_mcc(s, s, s, torch.cat([s, s[:, :1]], dim=1))
    with pytest.raises(ValueError, match="z_fit has 300 samples but h_fit has 299"):
        unmixed_mcc(s, s[:299], s, s)


def test_the_catalog_metrics_are_off_by_default_and_each_has_its_switch():
    s = laplace(6000, 3, 19)
    h = s.abs() @ mixing(3, 20)
    scoring = Scoring(*split(s, h, fit=3000))
    assert not any(k.startswith("mcc_ica") for k in compute(scoring, {}))
    assert {k: switches()[k][0] for k in SWITCHES} == dict.fromkeys(SWITCHES, False)
    catalog = {m.key: m for m in ordered()}
    for key, switch in zip(("mcc_ica_pearson", "mcc_ica_spearman", "mcc_ica_abs_pearson", "mcc_ica_abs_spearman"),
                           SWITCHES):
        assert catalog[key].enabled_by == switch and catalog[key].tests
        out = compute(scoring, {switch: True})
        assert [k for k in out if k.startswith("mcc_ica")] == [key, f"{key}_per_dim"]
    out = compute(scoring, ALL_ON)
    assert out["mcc_ica_abs_pearson"] > 0.99 and out["mcc_ica_abs_spearman"] > 0.99
    assert out["mcc_ica_pearson"] < 0.1


def test_switching_them_on_leaves_every_other_metric_and_the_generator_as_they_were():
    s = laplace(3000, 3, 21)
    h = torch.tanh(s) @ mixing(3, 22)
    runs = []
    for enabled in ({}, ALL_ON):
        g = torch.Generator().manual_seed(5)
        runs.append((metrics(*split(s, h, fit=1500), generator=g, n_centres=50, enabled=enabled), g.get_state()))
    (plain, state), (more, state_more) = runs
    assert torch.equal(state, state_more)
    assert {k: v for k, v in more.items() if not k.startswith("mcc_ica")} == plain
    g = torch.Generator().manual_seed(5)
    assert metrics(*split(s, h, fit=1500), generator=g, n_centres=50, enabled=ALL_ON) == more  # reproducible


def test_the_config_accepts_the_switches():
    from identifiable_cl import check, load_config

    config = load_config(overrides={"eval.mcc_ica_abs_spearman": True})
    assert config["eval"]["mcc_ica_abs_spearman"] is True
    check(config)
    with pytest.raises(ValueError, match=r"eval.mcc_ica_pearson=1 is invalid: expected bool"):
        check(load_config(overrides={"eval.mcc_ica_pearson": 1}))
