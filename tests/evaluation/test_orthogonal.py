import numpy as np
import pytest
import torch
from scipy.linalg import orthogonal_procrustes
from sklearn.metrics import r2_score

from identifiable_cl.evaluation.blocks import haar_orthogonal
from identifiable_cl.evaluation.orthogonal import orthogonal_r2
from identifiable_cl.evaluation.records import OrthogonalR2Result
from identifiable_cl.evaluation.regression import linear_r2


def split(z, h, n_fit):
    return z[:n_fit], h[:n_fit], z[n_fit:], h[n_fit:]


def haar(dim, seed):
    return haar_orthogonal(dim, torch.Generator().manual_seed(seed))


def reference_scores(z_fit, h_fit, z_test, h_test):
    """Procrustes with a global scale by scipy on the centred fit pair, scored by sklearn (d = n)."""
    z_fit, h_fit, z_test, h_test = (np.asarray(a, dtype=np.float64) for a in (z_fit, h_fit, z_test, h_test))
    z_mean, h_mean = z_fit.mean(axis=0), h_fit.mean(axis=0)
    zc, hc = z_fit - z_mean, h_fit - h_mean
    rotation, singular_sum = orthogonal_procrustes(hc, zc)
    scale = singular_sum / np.sum(hc**2)
    prediction = scale * (h_test - h_mean) @ rotation + z_mean
    return r2_score(z_test, prediction, multioutput="raw_values"), scale


# ---------------------------------------------------------------- analytic cases


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_scaled_rotation_and_shift_gives_one(device, dtype, gaussian):
    z = gaussian(3000, 5, 0)
    h = 3.0 * z @ haar(5, 1) + torch.tensor([1.0, -2.0, 0.5, 7.0, 0.0], dtype=torch.float64)
    z, h = z.to(device=device, dtype=dtype), h.to(device=device, dtype=dtype)
    result = orthogonal_r2(*split(z, h, 1000))
    assert isinstance(result, OrthogonalR2Result)
    tolerance = 1e-10 if dtype == torch.float64 else 1e-5
    assert result.per_dim == pytest.approx([1.0] * 5, abs=tolerance)
    assert result.mean == pytest.approx(1.0, abs=tolerance)
    assert result.scale == pytest.approx(1.0 / 3.0, rel=tolerance)


def test_non_orthogonal_invertible_map_falls_below_one_where_linear_r2_is_one(gaussian):
    z = gaussian(3000, 5, 2)
    h = z @ torch.diag(torch.tensor([1.0, 4.0, 1.0, 1.0, 1.0], dtype=torch.float64))
    data = split(z, h, 1000)
    orthogonal = orthogonal_r2(*data)
    assert linear_r2(*data).mean == pytest.approx(1.0, abs=1e-10)
    assert orthogonal.mean < 0.7
    assert max(orthogonal.per_dim) < 0.75


def test_a_general_linear_map_falls_below_one(gaussian):
    z = gaussian(3000, 4, 3)
    a = gaussian(4, 4, 4) + 2.0 * torch.eye(4, dtype=torch.float64)
    data = split(z, z @ a, 1000)
    assert linear_r2(*data).mean == pytest.approx(1.0, abs=1e-10)
    assert orthogonal_r2(*data).mean < 0.95


def test_permutation_and_signs_give_one(gaussian):
    z = gaussian(2000, 4, 5)
    h = z[:, [2, 0, 3, 1]] * torch.tensor([-1.0, 1.0, -1.0, -1.0], dtype=torch.float64)
    result = orthogonal_r2(*split(z, h, 800))
    assert result.mean == pytest.approx(1.0, abs=1e-10)
    assert result.scale == pytest.approx(1.0, abs=1e-10)


def test_independent_representation_scores_about_zero(gaussian):
    z, h = gaussian(8000, 4, 6), gaussian(8000, 4, 7)
    result = orthogonal_r2(*split(z, h, 4000))
    assert all(-0.01 < r < 0.005 for r in result.per_dim)
    assert result.scale < 0.05


def test_in_sample_and_held_out_agree_without_noise(gaussian):
    z = gaussian(2000, 3, 8)
    h = 0.5 * z @ haar(3, 9) - 1.0
    z_fit, h_fit, z_test, h_test = split(z, h, 1000)
    held_out = orthogonal_r2(z_fit, h_fit, z_test, h_test)
    in_sample = orthogonal_r2(z_fit, h_fit, in_sample=True)
    assert held_out.per_dim == pytest.approx(in_sample.per_dim, abs=1e-12)
    assert in_sample.mean == pytest.approx(1.0, abs=1e-10)
    stretched = z @ torch.diag(torch.tensor([1.0, 3.0, 1.0], dtype=torch.float64))
    z_fit, h_fit, z_test, h_test = split(z, stretched, 1000)
    gap = orthogonal_r2(z_fit, h_fit, in_sample=True).mean - orthogonal_r2(z_fit, h_fit, z_test, h_test).mean
    assert abs(gap) < 0.03


@pytest.mark.parametrize("seed", [10, 11])
def test_matches_scipy_procrustes_reference(gaussian, seed):
    z = gaussian(1500, 4, seed)
    h = torch.tanh(z @ gaussian(4, 4, seed + 100)) + 0.3 * gaussian(1500, 4, seed + 200) + 2.0
    z_fit, h_fit, z_test, h_test = split(z, h, 600)
    expected, scale = reference_scores(z_fit, h_fit, z_test, h_test)
    result = orthogonal_r2(z_fit, h_fit, z_test, h_test)
    np.testing.assert_allclose(result.per_dim, expected, rtol=0, atol=1e-10)
    assert result.mean == pytest.approx(expected.mean(), abs=1e-10)
    assert result.scale == pytest.approx(scale, rel=1e-10)
    in_sample, _ = reference_scores(z_fit, h_fit, z_fit, h_fit)
    np.testing.assert_allclose(orthogonal_r2(z_fit, h_fit, in_sample=True).per_dim, in_sample, rtol=0, atol=1e-10)


def test_numpy_and_torch_inputs_agree(gaussian):
    z = gaussian(1000, 3, 12)
    h = z @ gaussian(3, 3, 13) + 0.2 * gaussian(1000, 3, 14)
    reference = orthogonal_r2(*split(z, h, 400))
    as_numpy = orthogonal_r2(*(a.numpy() for a in split(z, h, 400)))
    assert as_numpy == reference


# ---------------------------------------------------------------- d != n


def test_more_dimensions_isometric_embedding_gives_one(gaussian):
    z = gaussian(2000, 3, 15)
    embedding = haar(6, 16)[:3]  # (3, 6) with orthonormal rows
    h = 2.0 * z @ embedding + 1.0
    result = orthogonal_r2(*split(z, h, 800))
    assert result.mean == pytest.approx(1.0, abs=1e-10)
    assert result.scale == pytest.approx(0.5, rel=1e-10)


def test_more_dimensions_with_extra_noise_dimensions_scores_near_one(gaussian):
    z = gaussian(4000, 3, 17)
    h = torch.cat([z @ haar(3, 18), gaussian(4000, 3, 19)], dim=1)
    result = orthogonal_r2(*split(z, h, 2000))
    assert result.mean > 0.99


def test_fewer_dimensions_recover_only_the_kept_latents(gaussian):
    z = gaussian(6000, 4, 20)
    h = 4.0 * z[:, :2] @ haar(2, 21)
    result = orthogonal_r2(*split(z, h, 2000))
    assert result.per_dim[:2] == pytest.approx([1.0, 1.0], abs=1e-3)
    assert all(abs(r) < 0.01 for r in result.per_dim[2:])


def test_zero_representation_predicts_the_mean(gaussian):
    z = gaussian(500, 2, 22)
    h = torch.zeros(500, 3, dtype=torch.float64)
    result = orthogonal_r2(z, h, in_sample=True)
    assert result.scale == 0.0
    assert result.per_dim == pytest.approx([0.0, 0.0], abs=1e-12)


# ---------------------------------------------------------------- bad input


@pytest.fixture
def pair(gaussian):
    return gaussian(400, 3, 30), gaussian(400, 5, 31)


def test_mismatched_samples_and_dimensions(pair):
    z, h = pair
    with pytest.raises(ValueError, match="z_fit has 200 samples but h_fit has 199"):
        orthogonal_r2(z[:200], h[:199], z[200:], h[200:])
    with pytest.raises(ValueError, match="z_test has 200 samples but h_test has 150"):
        orthogonal_r2(z[:200], h[:200], z[200:], h[200:350])
    with pytest.raises(ValueError, match="h_test has 4 dimensions but h_fit has 5"):
        orthogonal_r2(z[:200], h[:200], z[200:], h[200:, :4])
    with pytest.raises(ValueError, match=r"z_fit has shape \(200,\): expected a 2-D array"):
        orthogonal_r2(z[:200, 0], h[:200], z[200:], h[200:])


def test_too_few_samples(pair):
    z, h = pair
    with pytest.raises(ValueError, match="h_fit has 4 samples: at least 7 are needed"):
        orthogonal_r2(z[:4], h[:4], z[200:], h[200:])
    with pytest.raises(ValueError, match="z_test has 1 samples: at least 2 are needed"):
        orthogonal_r2(z[:200], h[:200], z[200:201], h[200:201])


def test_non_finite_and_constant_inputs(pair):
    z, h = pair
    bad = h.clone()
    bad[3, 1] = float("nan")
    with pytest.raises(ValueError, match="h_fit contains 1 NaN or infinite"):
        orthogonal_r2(z[:200], bad[:200], z[200:], h[200:])
    constant = z[200:].clone()
    constant[:, 2] = 1.0
    with pytest.raises(ValueError, match=r"z_test is constant in dimension\(s\) \[2\]"):
        orthogonal_r2(z[:200], h[:200], constant, h[200:])


def test_test_data_or_explicit_in_sample_required(pair):
    z, h = pair
    with pytest.raises(ValueError, match="held-out scoring needs both z_test and h_test"):
        orthogonal_r2(z, h)
    with pytest.raises(ValueError, match="do not pass z_test or h_test"):
        orthogonal_r2(z, h, z, h, in_sample=True)
    with pytest.raises(ValueError, match="in_sample='yes' is invalid"):
        orthogonal_r2(z, h, in_sample="yes")
