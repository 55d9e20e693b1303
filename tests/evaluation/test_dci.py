import math

import numpy as np
import pytest
import torch
from scipy.stats import entropy

from identifiable_cl.evaluation.blocks import haar_orthogonal
from identifiable_cl.evaluation.dci import dci, dci_scores
from identifiable_cl.evaluation.records import DCIResult, DCIScores
from identifiable_cl.evaluation.regression import linear_r2

GBT = {"regressor": "gbt", "n_estimators": 20}
REGRESSORS = [pytest.param({}, id="lasso"), pytest.param(GBT, id="gbt")]


def split(z, h, n_fit=2000):
    return z[:n_fit], h[:n_fit], z[n_fit:], h[n_fit:]


@pytest.fixture
def latents(gaussian):
    return gaussian(3000, 5, 0)


def reference_scores(importance):
    """D, C and the per-dimension / per-factor parts, written out with scipy's entropy."""
    r = np.asarray(importance, dtype=np.float64)
    d, n = r.shape
    total = r.sum()
    d_parts, weights = [], []
    for row in r:
        if row.sum() == 0:
            d_parts.append(0.0)
            weights.append(0.0)
        else:
            d_parts.append(1.0 if n == 1 else 1.0 - entropy(row / row.sum(), base=n))
            weights.append(row.sum() / total)
    c_parts = []
    for col in r.T:
        if col.sum() == 0:
            c_parts.append(0.0)
        else:
            c_parts.append(1.0 if d == 1 else 1.0 - entropy(col / col.sum(), base=d))
    return sum(w * p for w, p in zip(weights, d_parts)), sum(c_parts) / n, d_parts, weights, c_parts


# ---------------------------------------------------------------- importance matrix -> D, C


HAND_MADE = [
    [[0.9, 0.1, 0.0], [0.2, 0.5, 0.3], [0.0, 0.0, 1.4], [0.05, 0.6, 0.1]],
    [[1.0, 2.0], [3.0, 0.5], [0.0, 0.0], [0.2, 0.0]],  # a dead dimension
    [[1.0, 0.0, 0.0], [0.5, 0.0, 0.25]],  # a latent nothing is important for
    [[0.3], [1.2], [0.0]],  # n = 1
    [[0.3, 1.2, 0.0, 4.0]],  # d = 1
]


@pytest.mark.parametrize("importance", HAND_MADE)
def test_dci_scores_match_a_plain_reference(importance):
    d_ref, c_ref, d_parts, weights, c_parts = reference_scores(importance)
    scores = dci_scores(importance)
    assert isinstance(scores, DCIScores)
    assert scores.disentanglement == pytest.approx(d_ref, abs=1e-12)
    assert scores.completeness == pytest.approx(c_ref, abs=1e-12)
    assert scores.disentanglement_per_dim == pytest.approx(d_parts, abs=1e-12)
    assert scores.dim_weights == pytest.approx(weights, abs=1e-12)
    assert scores.completeness_per_factor == pytest.approx(c_parts, abs=1e-12)


def test_dci_scores_of_a_small_matrix_by_hand():
    # row 0 = (1, 0) is pure: D_0 = 1; row 1 = (1/3, 2/3): D_1 = 1 - H_2(1/3, 2/3); weights 1/4, 3/4.
    # column 0 = (1/2, 1/2): C_0 = 1 - log 2 / log 2 = 0; column 1 = (0, 1) is pure: C_1 = 1.
    scores = dci_scores([[1.0, 0.0], [1.0, 2.0]])
    h = -(1 / 3 * math.log2(1 / 3) + 2 / 3 * math.log2(2 / 3))
    assert scores.disentanglement_per_dim == pytest.approx([1.0, 1.0 - h], abs=1e-12)
    assert scores.dim_weights == pytest.approx([0.25, 0.75], abs=1e-12)
    assert scores.disentanglement == pytest.approx(0.25 + 0.75 * (1.0 - h), abs=1e-12)
    assert scores.completeness_per_factor == pytest.approx([0.0, 1.0], abs=1e-12)
    assert scores.completeness == pytest.approx(0.5, abs=1e-12)


def test_dci_scores_perfect_and_uniform_matrices():
    perfect = dci_scores(np.diag([0.5, 2.0, 1.0])[[1, 2, 0]])
    assert (perfect.disentanglement, perfect.completeness) == (1.0, 1.0)
    uniform = dci_scores(np.ones((4, 4)))
    assert uniform.disentanglement == pytest.approx(0.0, abs=1e-12)
    assert uniform.completeness == pytest.approx(0.0, abs=1e-12)


def test_dci_scores_zero_rows_columns_and_all_zero():
    scores = dci_scores([[2.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    assert scores.disentanglement_per_dim == [1.0, 0.0, 1.0]
    assert scores.dim_weights == pytest.approx([2 / 3, 0.0, 1 / 3])
    assert scores.disentanglement == pytest.approx(1.0)
    assert scores.completeness_per_factor == [1.0, 1.0, 0.0]
    assert scores.completeness == pytest.approx(2 / 3)
    empty = dci_scores(np.zeros((3, 2)))
    assert (empty.disentanglement, empty.completeness) == (0.0, 0.0)
    assert empty.dim_weights == [0.0, 0.0, 0.0]


def test_dci_scores_single_dimension_or_latent():
    one_latent = dci_scores([[0.5], [0.5], [0.0]])
    assert one_latent.disentanglement_per_dim == [1.0, 1.0, 0.0]
    assert one_latent.disentanglement == 1.0
    # the one latent is spread evenly over 2 of the 3 dimensions: C = 1 - log 2 / log 3
    assert one_latent.completeness == pytest.approx(1.0 - math.log(2) / math.log(3), abs=1e-12)
    one_dim = dci_scores([[0.5, 0.0, 2.0]])
    assert one_dim.completeness_per_factor == [1.0, 0.0, 1.0]
    assert one_dim.disentanglement == pytest.approx(1.0 - entropy([0.2, 0.0, 0.8], base=3), abs=1e-12)


@pytest.mark.parametrize(
    "importance, message",
    [
        ([0.1, 0.2], r"importance has shape \(2,\): expected a non-empty 2-D array"),
        (np.zeros((0, 3)), r"importance has shape \(0, 3\)"),
        ([[0.1, -0.2]], "importance contains 1 negative entries"),
        ([[0.1, float("nan")]], "importance contains 1 NaN or infinite entries"),
        ([["a", 1.0]], "importance=.* is invalid"),
    ],
)
def test_dci_scores_rejects_bad_matrices(importance, message):
    with pytest.raises(ValueError, match=message):
        dci_scores(importance)


# ---------------------------------------------------------------- DCI of analytic representations


def test_identity_lasso_is_perfect(latents):
    result = dci(*split(latents, latents.clone()))
    assert isinstance(result, DCIResult) and result.regressor == "lasso"
    assert result.disentanglement == pytest.approx(1.0, abs=1e-6)
    assert result.completeness == pytest.approx(1.0, abs=1e-6)
    # standardised lasso shrinks the one coefficient to 1 - alpha: R² = 1 - alpha²
    assert result.informativeness == pytest.approx(1.0 - 0.01**2, abs=1e-5)
    np.testing.assert_allclose(result.importance, 0.99 * np.eye(5), rtol=0, atol=1e-6)


def test_identity_gbt_is_perfect(latents):
    result = dci(*split(latents, latents.clone()), **GBT)
    assert result.regressor == "gbt"
    assert result.disentanglement > 0.99
    assert result.completeness > 0.99
    assert result.informativeness > 0.97  # 20 boosting stages of rate 0.1 leave ~0.9**20 of each target unfitted


@pytest.mark.parametrize("options", REGRESSORS)
def test_rotation_lowers_disentanglement_and_completeness(latents, options):
    h = latents @ haar_orthogonal(5, torch.Generator().manual_seed(1))
    result = dci(*split(latents, h), **options)
    assert result.disentanglement < 0.6
    assert result.completeness < 0.6
    assert result.informativeness > (0.99 if not options else 0.7)


@pytest.mark.parametrize("options", REGRESSORS)
def test_permutation_with_scaling_is_perfect(latents, options):
    order = [3, 0, 4, 1, 2]
    h = latents[:, order] * torch.tensor([2.0, -0.5, 10.0, -3.0, 0.1], dtype=torch.float64) + 4.0
    result = dci(*split(latents, h), **options)
    assert result.disentanglement == pytest.approx(1.0, abs=1e-6)
    assert result.completeness == pytest.approx(1.0, abs=1e-6)
    importance = np.asarray(result.importance)
    assert importance.shape == (5, 5)
    assert [int(np.argmax(importance[i])) for i in range(5)] == order


@pytest.mark.parametrize("options", REGRESSORS)
def test_dead_dimensions_keep_completeness(latents, gaussian, options):
    constant = torch.full((3000, 1), 3.0, dtype=torch.float64)
    h = torch.cat([latents, gaussian(3000, 3, 2), constant], dim=1)
    result = dci(*split(latents, h), **options)
    assert len(result.disentanglement_per_dim) == 9 and len(result.completeness_per_factor) == 5
    assert result.disentanglement_per_dim[:5] == pytest.approx([1.0] * 5, abs=1e-6)
    assert result.dim_weights[8] == 0.0 and result.importance[8] == [0.0] * 5
    assert sum(result.dim_weights[5:]) < 0.01
    assert result.completeness > 0.98
    assert result.disentanglement > 0.99


def test_informativeness_with_a_tiny_alpha_is_linear_r2(gaussian):
    z = gaussian(3000, 3, 3)
    h = torch.tanh(z @ gaussian(3, 4, 4)) + 0.3 * gaussian(3000, 4, 5)
    data = split(z, h)
    result = dci(*data, alpha=1e-7)
    linear = linear_r2(*data)
    assert result.informativeness_per_factor == pytest.approx(linear.per_dim, abs=1e-4)
    assert result.informativeness == pytest.approx(linear.mean, abs=1e-4)


def test_in_sample_and_single_latent(gaussian):
    z = gaussian(1000, 1, 6)
    h = torch.cat([2.0 * z, gaussian(1000, 2, 7)], dim=1)
    result = dci(z, h, in_sample=True)
    assert result.disentanglement_per_dim[0] == 1.0
    assert result.completeness_per_factor == [pytest.approx(1.0, abs=1e-6)]
    assert result.informativeness > 0.99


def test_gbt_is_deterministic_given_the_seed(latents):
    h = latents @ haar_orthogonal(5, torch.Generator().manual_seed(8))
    data = split(latents[:1500], h[:1500], 1000)
    assert dci(*data, **GBT, random_state=3) == dci(*data, **GBT, random_state=3)


def test_independent_representation_is_uninformative(gaussian):
    z, h = gaussian(3000, 3, 9), gaussian(3000, 4, 10)
    result = dci(*split(z, h))
    assert all(-0.01 < r < 0.005 for r in result.informativeness_per_factor)


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("regressor", "forest", "regressor='forest' is invalid: allowed: 'lasso', 'gbt'"),
        ("alpha", 0.0, "alpha=0.0 is invalid: must be > 0"),
        ("n_estimators", 0, "n_estimators=0 is invalid"),
        ("max_depth", 1.5, "max_depth=1.5 is invalid"),
        ("random_state", -1, "random_state=-1 is invalid"),
    ],
)
def test_options_are_checked(latents, option, value, message):
    with pytest.raises(ValueError, match=message):
        dci(*split(latents, latents), **{option: value})


def test_bad_arrays_are_named(latents):
    with pytest.raises(ValueError, match="z_fit has 2000 samples but h_fit has 1999"):
        dci(latents[:2000], latents[:1999], latents[2000:], latents[2000:])
    with pytest.raises(ValueError, match="held-out scoring needs both z_test and h_test"):
        dci(latents, latents)
    with pytest.raises(ValueError, match="h_fit has 5 samples: at least 10 are needed"):
        dci(latents[:5], latents[:5], latents[2000:], latents[2000:])
