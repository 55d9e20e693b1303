import numpy as np
import pytest
import torch
from sklearn.linear_model import LinearRegression
from sklearn.metrics import r2_score

from identifiable_cl.evaluation import linear_r2, nonlinear_r2
from identifiable_cl.evaluation.regression import r2_scores


def split(z, h, n_fit):
    return z[:n_fit], h[:n_fit], z[n_fit:], h[n_fit:]


# ---------------------------------------------------------------- linear R²


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_identity_gives_linear_r2_one(device, dtype, gaussian):
    z = gaussian(3000, 5, 0).to(device=device, dtype=dtype)
    result = linear_r2(*split(z, z.clone(), 1000))
    assert result.per_dim == pytest.approx([1.0] * 5, abs=1e-9)
    assert result.mean == pytest.approx(1.0, abs=1e-9)


def test_rotation_and_scaling_give_linear_r2_one(device, gaussian, make_rotation):
    z = gaussian(3000, 6, 1).to(device)
    h = (z @ make_rotation(6, 2).to(device)) * torch.arange(1, 7, device=device) + 3.0
    assert linear_r2(*split(z, h, 1000)).mean == pytest.approx(1.0, abs=1e-9)


def test_independent_noise_gives_linear_r2_near_zero(gaussian):
    z, h = gaussian(8000, 4, 3), gaussian(8000, 6, 4)
    result = linear_r2(*split(z, h, 4000))
    assert all(abs(r) < 0.01 for r in result.per_dim)


def test_linear_r2_matches_sklearn(gaussian):
    z = gaussian(1500, 4, 5)
    a = gaussian(4, 7, 6)
    h = torch.tanh(z @ a) + 0.3 * gaussian(1500, 7, 7) + 5.0
    z_fit, h_fit, z_test, h_test = split(z, h, 500)
    model = LinearRegression().fit(h_fit.numpy(), z_fit.numpy())
    expected = r2_score(z_test.numpy(), model.predict(h_test.numpy()), multioutput="raw_values")
    result = linear_r2(z_fit, h_fit, z_test, h_test)
    np.testing.assert_allclose(result.per_dim, expected, rtol=0, atol=1e-9)
    assert result.mean == pytest.approx(expected.mean(), abs=1e-9)
    in_sample = r2_score(z_fit.numpy(), model.predict(h_fit.numpy()), multioutput="raw_values")
    np.testing.assert_allclose(linear_r2(z_fit, h_fit, in_sample=True).per_dim, in_sample, rtol=0, atol=1e-9)


def test_r2_scores_matches_sklearn_definition(gaussian):
    z, z_hat = gaussian(50, 3, 8), gaussian(50, 3, 9)
    np.testing.assert_allclose(
        r2_scores(z, z_hat).numpy(), r2_score(z.numpy(), z_hat.numpy(), multioutput="raw_values"), atol=1e-12
    )


def test_in_sample_scoring_is_optimistic(gaussian):
    """Regression: the reference codes fitted and scored R² on the same samples."""
    z, h = gaussian(200, 3, 10), gaussian(200, 40, 11)
    z_fit, h_fit, z_test, h_test = split(z, h, 60)
    assert linear_r2(z_fit, h_fit, in_sample=True).mean > 0.4
    assert linear_r2(z_fit, h_fit, z_test, h_test).mean < 0.1


def test_float32_and_numpy_inputs_agree_with_float64(gaussian):
    z = gaussian(2000, 3, 12)
    h = z @ gaussian(3, 5, 13) + 0.5 * gaussian(2000, 5, 14)
    reference = linear_r2(*split(z, h, 800))
    as_float32 = linear_r2(*(a.float() for a in split(z, h, 800)))
    as_numpy = linear_r2(*(a.numpy() for a in split(z, h, 800)))
    assert as_float32.per_dim == pytest.approx(reference.per_dim, abs=1e-5)
    assert as_numpy.per_dim == pytest.approx(reference.per_dim, abs=1e-12)


def test_representation_with_fewer_or_more_dimensions(gaussian):
    z = gaussian(6000, 4, 15)
    fewer = linear_r2(*split(z, z[:, :2], 2000))
    assert fewer.per_dim[:2] == pytest.approx([1.0, 1.0], abs=1e-9)
    assert all(abs(r) < 0.03 for r in fewer.per_dim[2:])
    more = linear_r2(*split(z, torch.cat([z, gaussian(6000, 6, 16)], dim=1), 2000))
    assert more.mean == pytest.approx(1.0, abs=1e-9)


def test_constant_and_duplicated_columns_carry_no_weight(gaussian):
    z = gaussian(1000, 3, 17)
    h = torch.cat([z, z, torch.full((1000, 1), 2.5, dtype=torch.float64)], dim=1)
    result = linear_r2(*split(z, h, 400))
    assert result.mean == pytest.approx(1.0, abs=1e-9)


# ---------------------------------------------------------------- bad input


@pytest.fixture
def pair(gaussian):
    return gaussian(400, 3, 20), gaussian(400, 5, 21)


@pytest.mark.parametrize("fn", [linear_r2, nonlinear_r2])
def test_mismatched_sample_counts(fn, pair):
    z, h = pair
    with pytest.raises(ValueError, match="z_fit has 200 samples but h_fit has 199"):
        fn(z[:200], h[:199], z[200:], h[200:])
    with pytest.raises(ValueError, match="z_test has 200 samples but h_test has 150"):
        fn(z[:200], h[:200], z[200:], h[200:350])


@pytest.mark.parametrize("fn", [linear_r2, nonlinear_r2])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_representation(fn, pair, bad):
    z, h = pair
    h = h.clone()
    h[3, 1] = bad
    with pytest.raises(ValueError, match="h_fit contains 1 NaN or infinite"):
        fn(z[:200], h[:200], z[200:], h[200:])
    with pytest.raises(ValueError, match="h_test contains 1 NaN or infinite"):
        fn(z[200:], h[200:], z[:200], h[:200])


@pytest.mark.parametrize("fn", [linear_r2, nonlinear_r2])
def test_fewer_samples_than_dimensions(fn, gaussian):
    z, h = gaussian(100, 3, 22), gaussian(100, 20, 23)
    with pytest.raises(ValueError, match="h_fit has 8 samples: at least 22 are needed"):
        fn(z[:8], h[:8], z[50:], h[50:])


@pytest.mark.parametrize("fn", [linear_r2, nonlinear_r2])
def test_test_data_or_explicit_in_sample_required(fn, pair):
    z, h = pair
    with pytest.raises(ValueError, match="held-out scoring needs both z_test and h_test"):
        fn(z, h)
    with pytest.raises(ValueError, match="held-out scoring needs both"):
        fn(z, h, z_test=z)
    with pytest.raises(ValueError, match="do not pass z_test or h_test"):
        fn(z, h, z, h, in_sample=True)
    with pytest.raises(ValueError, match="in_sample=1 is invalid"):
        fn(z, h, in_sample=1)


def test_other_shape_errors(pair):
    z, h = pair
    with pytest.raises(ValueError, match="h_test has 4 dimensions but h_fit has 5"):
        linear_r2(z[:200], h[:200], z[200:], h[200:, :4])
    with pytest.raises(ValueError, match=r"z_fit has shape \(200,\): expected a 2-D array"):
        linear_r2(z[:200, 0], h[:200], z[200:], h[200:])
    constant = z[200:].clone()
    constant[:, 1] = 4.0
    with pytest.raises(ValueError, match=r"z_test is constant in dimension\(s\) \[1\]"):
        linear_r2(z[:200], h[:200], constant, h[200:])


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("n_centres", 0, "n_centres=0 is invalid"),
        ("bandwidth_factors", [], "bandwidth_factors=.* is invalid"),
        ("ridges", [1e-3, -1.0], "ridges=.* is invalid"),
        ("validation_fraction", 1.0, "validation_fraction=1.0 is invalid"),
    ],
)
def test_nonlinear_options_are_checked(pair, option, value, message):
    z, h = pair
    with pytest.raises(ValueError, match=message):
        nonlinear_r2(z[:200], h[:200], z[200:], h[200:], **{option: value})


# ---------------------------------------------------------------- nonlinear R²


def test_elementwise_nonlinear_map_nonlinear_r2_one_linear_below():
    z = 4.0 * torch.rand(3000, 3, generator=torch.Generator().manual_seed(30), dtype=torch.float64) - 2.0
    h = torch.exp(z)
    data = split(z, h, 800)
    nonlinear = nonlinear_r2(*data, generator=torch.Generator().manual_seed(0))
    linear = linear_r2(*data)
    assert nonlinear.mean > 0.99
    assert linear.mean < 0.85


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_identity_gives_nonlinear_r2_one(device, dtype, gaussian):
    z = gaussian(1600, 4, 31).to(device=device, dtype=dtype)
    assert nonlinear_r2(*split(z, z.clone(), 600)).mean > 0.999


def test_independent_noise_gives_nonlinear_r2_near_zero(gaussian):
    z, h = gaussian(5000, 3, 32), gaussian(5000, 3, 33)
    result = nonlinear_r2(*split(z, h, 2000), n_centres=200)
    assert all(abs(r) < 0.02 for r in result.per_dim)


def test_nonlinear_r2_is_deterministic_given_the_generator(gaussian):
    z = gaussian(1200, 3, 34)
    h = torch.tanh(z @ gaussian(3, 3, 35))
    data = split(z, h, 600)
    first = nonlinear_r2(*data, generator=torch.Generator().manual_seed(7))
    again = nonlinear_r2(*data, generator=torch.Generator().manual_seed(7))
    assert first == again
    assert len(first.bandwidth) == len(first.ridge) == len(first.linear_part) == 3


def test_nonlinear_r2_in_sample_is_at_least_held_out(gaussian):
    z = gaussian(1200, 3, 36)
    h = torch.tanh(z @ gaussian(3, 4, 37)) + 0.1 * gaussian(1200, 4, 38)
    data = split(z, h, 600)
    assert nonlinear_r2(*data[:2], in_sample=True).mean > nonlinear_r2(*data).mean
