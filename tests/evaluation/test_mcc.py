import numpy as np
import pytest
import torch
from scipy.stats import rankdata, spearmanr

from identifiable_cl.evaluation import correlation_matrix, mcc
from identifiable_cl.evaluation.mcc import rank_columns


@pytest.mark.parametrize("method", ["pearson", "spearman"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_identity_gives_mcc_one(device, method, dtype, gaussian):
    z = gaussian(2000, 5, 0).to(device=device, dtype=dtype)
    result = mcc(z, z.clone(), method=method)
    assert result.mean == pytest.approx(1.0, abs=1e-6)
    assert result.matching == [(i, i) for i in range(5)]


@pytest.mark.parametrize("method", ["pearson", "spearman"])
def test_signed_permutation_with_scaling_gives_mcc_one(device, method, gaussian):
    z = gaussian(2000, 5, 1).to(device)
    perm = [3, 0, 4, 1, 2]
    scale = torch.tensor([2.0, -0.5, 7.0, -3.0, 0.1], dtype=torch.float64, device=device)
    h = z[:, perm] * scale + 1.0
    result = mcc(z, h, method=method)
    assert result.mean == pytest.approx(1.0, abs=1e-9)
    assert result.per_dim == pytest.approx([1.0] * 5, abs=1e-9)
    assert sorted(result.matching) == sorted((p, j) for j, p in enumerate(perm))


def test_monotone_elementwise_map_spearman_one_pearson_below(gaussian):
    z = gaussian(3000, 3, 2)
    h = torch.exp(2.0 * z[:, [2, 0, 1]])
    assert mcc(z, h, method="spearman").mean == pytest.approx(1.0, abs=1e-12)
    assert mcc(z, h, method="pearson").mean < 0.8


def test_rotation_mcc_below_one(gaussian, make_rotation):
    z = gaussian(4000, 5, 3)
    assert mcc(z, z @ make_rotation(5, 4)).mean < 0.9


@pytest.mark.parametrize("method", ["pearson", "spearman"])
def test_independent_noise_mcc_small(method, gaussian):
    result = mcc(gaussian(20000, 5, 5), gaussian(20000, 5, 6), method=method)
    assert result.mean < 0.03


def test_pearson_matrix_matches_numpy(gaussian):
    z, h = gaussian(500, 3, 7), gaussian(500, 4, 8) + gaussian(500, 4, 9)[:, :1]
    expected = np.corrcoef(z.numpy().T, h.numpy().T)[:3, 3:]
    np.testing.assert_allclose(correlation_matrix(z, h).numpy(), expected, atol=1e-12)


def test_spearman_matrix_matches_scipy_with_ties():
    rng = np.random.default_rng(0)
    z = rng.integers(0, 6, size=(300, 3)).astype(float)
    h = np.hstack([z[:, :1] + rng.integers(0, 3, size=(300, 1)), rng.normal(size=(300, 2)).round(1)])
    expected = spearmanr(z, h).statistic[:3, 3:]
    np.testing.assert_allclose(correlation_matrix(z, h, method="spearman").numpy(), expected, atol=1e-12)


def test_rank_columns_matches_scipy_rankdata():
    rng = np.random.default_rng(1)
    x = rng.integers(0, 10, size=(200, 4)).astype(float)
    np.testing.assert_allclose(rank_columns(torch.tensor(x)).numpy(), rankdata(x, axis=0), atol=0)


def test_more_representation_dimensions_than_latents(gaussian):
    z = gaussian(2000, 3, 10)
    h = torch.cat([gaussian(2000, 2, 11), z[:, [1, 2, 0]], gaussian(2000, 2, 12)], dim=1)
    result = mcc(z, h)
    assert result.mean == pytest.approx(1.0, abs=1e-12)
    assert sorted(result.matching) == [(0, 4), (1, 2), (2, 3)]


def test_fewer_representation_dimensions_than_latents(gaussian):
    z = gaussian(2000, 4, 13)
    result = mcc(z, z[:, [2, 0]])
    assert result.per_dim[0] == pytest.approx(1.0) and result.per_dim[2] == pytest.approx(1.0)
    assert result.per_dim[1] == 0.0 and result.per_dim[3] == 0.0
    assert result.mean == pytest.approx(0.5)
    assert sorted(result.matching) == [(0, 1), (2, 0)]


def test_constant_representation_column_correlates_zero(gaussian):
    z = gaussian(500, 2, 14)
    h = torch.cat([z[:, :1], torch.full((500, 1), 3.0, dtype=torch.float64)], dim=1)
    corr = correlation_matrix(z, h)
    assert torch.isfinite(corr).all()
    assert corr[:, 1].tolist() == [0.0, 0.0]
    assert mcc(z, h, method="spearman").per_dim[1] < 0.1


def test_numpy_input(gaussian):
    z = gaussian(300, 3, 15)
    assert mcc(z.numpy(), z.numpy()[:, ::-1].copy()).mean == pytest.approx(1.0)


def test_bad_input(gaussian):
    z, h = gaussian(100, 3, 16), gaussian(100, 3, 17)
    with pytest.raises(ValueError, match="z has 100 samples but h has 99"):
        mcc(z, h[:99])
    bad = h.clone()
    bad[0, 0] = float("nan")
    with pytest.raises(ValueError, match="h contains 1 NaN or infinite"):
        mcc(z, bad)
    with pytest.raises(ValueError, match="z has 5 samples: at least 6 are needed"):
        mcc(z[:5], gaussian(5, 5, 18))
    with pytest.raises(ValueError, match="method='kendall' is invalid"):
        mcc(z, h, method="kendall")
    constant = z.clone()
    constant[:, 2] = 1.0
    with pytest.raises(ValueError, match=r"z is constant in dimension\(s\) \[2\]"):
        mcc(constant, h)
