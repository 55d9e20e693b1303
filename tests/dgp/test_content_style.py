import numpy as np
import pytest
import torch

from dgp.content_style import ContentStyleConditional, ContentStyleMarginal
from dgp import CONDITIONALS, MARGINALS
from dgp.spaces import Box, Euclidean, Sphere

N_DIM = 10


def rng(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def space(n: int = N_DIM) -> Euclidean:
    return Euclidean(n)


def whitened_deviation(cov: np.ndarray, sigma: np.ndarray) -> float:
    """max |L⁻¹ cov L⁻ᵀ - I| for sigma = L Lᵀ: 0 when cov equals sigma, scale-free."""
    chol_inv = np.linalg.inv(np.linalg.cholesky(sigma))
    return float(np.abs(chol_inv @ cov @ chol_inv.T - np.eye(len(sigma))).max())


def many_batches(marginal: ContentStyleMarginal, batches: int, size: int, seed: int) -> np.ndarray:
    g = rng(seed)
    return torch.cat([marginal.sample(size, g) for _ in range(batches)]).numpy()


# ---------------------------------------------------------------- conditional


@pytest.mark.parametrize("dependence", [False, True])
def test_content_is_kept_bit_for_bit(dependence):
    cond = ContentStyleConditional(space(), rng(0), content_dim=4, dependence=dependence)
    z = torch.randn(1000, N_DIM, generator=rng(1), dtype=torch.float64)
    z_pos = cond.sample(z, rng(2))
    assert torch.equal(z_pos[:, :4], z[:, :4])
    assert (z_pos[:, 4:] != z[:, 4:]).all()


def test_change_rate_matches_p_change():
    p, size = 0.75, 8000
    cond = ContentStyleConditional(space(), rng(0), content_dim=5, p_change=p)
    z = torch.randn(size, N_DIM, generator=rng(1), dtype=torch.float64)
    changed = (cond.sample(z, rng(2))[:, 5:] != z[:, 5:]).numpy()
    tol = 5 * np.sqrt(p * (1 - p) / changed.size)
    assert abs(changed.mean() - p) < tol
    per_dim_tol = 5 * np.sqrt(p * (1 - p) / size)
    assert np.all(np.abs(changed.mean(axis=0) - p) < per_dim_tol)
    both = (changed[:, 0] & changed[:, 1]).mean()
    assert abs(both - p * p) < 5 * np.sqrt(p * p * (1 - p * p) / size)


def test_p_change_zero_and_one():
    z = torch.randn(2000, N_DIM, generator=rng(1), dtype=torch.float64)
    never = ContentStyleConditional(space(), rng(0), p_change=0.0)
    assert torch.equal(never.sample(z, rng(2)), z)
    always = ContentStyleConditional(space(), rng(0), p_change=1.0)
    assert (always.sample(z, rng(2))[:, 5:] != z[:, 5:]).all()


def test_increment_variance_is_sigma_squared():
    sigma, size = 0.5, 20000
    cond = ContentStyleConditional(space(), rng(0), sigma=sigma)
    z = torch.randn(size, N_DIM, generator=rng(1), dtype=torch.float64)
    inc = (cond.sample(z, rng(2)) - z)[:, 5:].numpy()
    ratio = inc.var(axis=0) / sigma**2
    assert np.all(np.abs(ratio - 1) < 5 * np.sqrt(2 / size))
    assert np.abs(np.corrcoef(inc.T) - np.eye(5)).max() < 5 / np.sqrt(size)


def test_dependent_increments_have_covariance_sigma_a():
    size = 40000
    cond = ContentStyleConditional(space(), rng(3), dependence=True)
    sigma_a = cond.sigma_change.numpy()
    z = torch.randn(size, N_DIM, generator=rng(1), dtype=torch.float64)
    inc = (cond.sample(z, rng(2)) - z)[:, 5:].numpy()
    cov = inc.T @ inc / size
    assert whitened_deviation(cov, sigma_a) < 5 * np.sqrt(2 / size)
    assert whitened_deviation(cov, np.eye(5)) > 0.5
    np.testing.assert_allclose(cond.chol_change.numpy() @ cond.chol_change.numpy().T, sigma_a, atol=1e-12)


def test_conditional_blocks():
    cond = ContentStyleConditional(space(7), rng(0), content_dim=3)
    assert cond.blocks() == {"content": [0, 1, 2], "style": [3, 4, 5, 6]}
    assert ContentStyleConditional(space(), rng(0)).content_dim == 5


def test_conditional_follows_float32():
    cond = ContentStyleConditional(space(), rng(0), dependence=True).to(torch.float32)
    z = torch.randn(64, N_DIM, generator=rng(1))
    z_pos = cond.sample(z, rng(2))
    assert z_pos.dtype == torch.float32
    assert torch.equal(z_pos[:, :5], z[:, :5])


# ---------------------------------------------------------------- marginal


def test_independent_marginal_is_standard_normal():
    size = 20000
    z = ContentStyleMarginal(space(), rng(0)).sample(size, rng(1)).numpy()
    assert whitened_deviation(z.T @ z / size, np.eye(N_DIM)) < 5 * np.sqrt(2 / size)
    assert np.abs(z.mean(axis=0)).max() < 5 / np.sqrt(size)


def test_content_uses_sigma_c_and_style_uses_sigma_s():
    """Regression for a defect of a reference code: late-bound closures made content sample with the style covariance."""
    marginal = ContentStyleMarginal(space(), rng(5), dependence=True)
    sigma_c, sigma_s = marginal.sigma_content.numpy(), marginal.sigma_style.numpy()
    assert whitened_deviation(sigma_s, sigma_c) > 0.5
    z = many_batches(marginal, 10, 4000, seed=6)
    c, s = z[:, :5], z[:, 5:]
    size = len(z)
    tol = 5 * np.sqrt(2 / size)
    assert whitened_deviation(c.T @ c / size, sigma_c) < tol
    assert whitened_deviation(s.T @ s / size, sigma_s) < tol
    assert whitened_deviation(c.T @ c / size, sigma_s) > 0.5
    cross = np.corrcoef(c.T, s.T)[:5, 5:]
    assert np.abs(cross).max() < 5 / np.sqrt(size)


def test_covariances_are_drawn_once_for_all_batches():
    """Regression for a defect of a reference code: Σ re-drawn per batch averages to E[Σ] = k·I, erasing the dependence."""
    marginal = ContentStyleMarginal(space(), rng(7), dependence=True)
    sigma_c = marginal.sigma_content.clone()
    z = many_batches(marginal, 40, 1000, seed=8)
    size = len(z)
    assert torch.equal(marginal.sigma_content, sigma_c)
    c = z[:, :5]
    assert whitened_deviation(c.T @ c / size, sigma_c.numpy()) < 5 * np.sqrt(2 / size)
    assert whitened_deviation(sigma_c.numpy(), 5 * np.eye(5)) > 0.5


def test_content_dependent_style_uses_fixed_b_and_a():
    marginal = ContentStyleMarginal(space(), rng(9), dependence=True, content_dependent_style=True)
    b, a = marginal.style_weight.numpy(), marginal.style_offset.numpy()
    assert b.shape == (5, 5) and a.shape == (5,)
    z = many_batches(marginal, 40, 1000, seed=10)
    c, s = z[:, :5], z[:, 5:]
    design = np.hstack([c, np.ones((len(z), 1))])
    coef, *_ = np.linalg.lstsq(design, s, rcond=None)
    np.testing.assert_allclose(coef[:5].T, b, atol=0.1)
    np.testing.assert_allclose(coef[5], a, atol=0.1)
    residual = s - design @ coef
    size = len(z)
    sigma_s = marginal.sigma_style.numpy()
    assert whitened_deviation(residual.T @ residual / size, sigma_s) < 6 * np.sqrt(2 / size)


def test_without_content_dependence_no_b_and_a():
    marginal = ContentStyleMarginal(space(), rng(0))
    assert "style_weight" not in marginal.state_dict()
    assert marginal.style_weight is None


def test_marginal_parameters_reproducible_and_round_trip():
    a = ContentStyleMarginal(space(), rng(1), dependence=True, content_dependent_style=True)
    b = ContentStyleMarginal(space(), rng(1), dependence=True, content_dependent_style=True)
    other = ContentStyleMarginal(space(), rng(2), dependence=True, content_dependent_style=True)
    for key, value in a.state_dict().items():
        assert torch.equal(value, b.state_dict()[key])
    assert not torch.allclose(a.sigma_content, other.sigma_content)
    other.load_state_dict(a.state_dict())
    assert torch.equal(a.sample(50, rng(3)), other.sample(50, rng(3)))


def test_marginal_blocks_and_dtype():
    marginal = ContentStyleMarginal(space(6), rng(0), content_dim=2).to(torch.float32)
    assert marginal.blocks() == {"content": [0, 1], "style": [2, 3, 4, 5]}
    assert marginal.sample(10, rng(1)).dtype == torch.float32


def test_registry_builds_both():
    m = MARGINALS.build({"name": "content_style", "dependence": True}, space(), rng(0), key="dgp.marginal")
    spec = {"name": "content_style", "p_change": 0.75}
    c = CONDITIONALS.build(spec, space(), rng(0), key="dgp.conditional")
    assert isinstance(m, ContentStyleMarginal) and isinstance(c, ContentStyleConditional)


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "options, key",
    [
        ({"p_change": -0.1}, "dgp.conditional.p_change"),
        ({"p_change": 1.5}, "dgp.conditional.p_change"),
        ({"content_dim": 0}, "dgp.conditional.content_dim"),
        ({"content_dim": N_DIM}, "dgp.conditional.content_dim"),
        ({"sigma": 0.0}, "dgp.conditional.sigma"),
        ({"sigma": 2.0, "dependence": True}, "dgp.conditional.sigma"),
        ({"dependence": "yes"}, "dgp.conditional.dependence"),
    ],
)
def test_bad_conditional_options(options, key):
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        ContentStyleConditional(space(), rng(0), **options)


@pytest.mark.parametrize(
    "options, key",
    [
        ({"content_dim": 0}, "dgp.marginal.content_dim"),
        ({"content_dim": N_DIM}, "dgp.marginal.content_dim"),
        ({"dependence": 1}, "dgp.marginal.dependence"),
        ({"content_dependent_style": None}, "dgp.marginal.content_dependent_style"),
    ],
)
def test_bad_marginal_options(options, key):
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        ContentStyleMarginal(space(), rng(0), **options)


@pytest.mark.parametrize("other", [Sphere(N_DIM), Box(N_DIM)])
def test_non_euclidean_space_rejected(other):
    with pytest.raises(ValueError, match=r"dgp\.space"):
        ContentStyleMarginal(other, rng(0))
    with pytest.raises(ValueError, match=r"dgp\.space"):
        ContentStyleConditional(other, rng(0))
