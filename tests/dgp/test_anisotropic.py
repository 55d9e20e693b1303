import numpy as np
import pytest
import torch
from scipy import stats

from dgp.conditionals.anisotropic import Anisotropic
from dgp import CONDITIONALS
from dgp.spaces import Box, Euclidean, Sphere

BIMODAL_10 = [25.0] * 5 + [5.0] * 5


def rng(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------- profiles and blocks


def test_bimodal_profile_exact():
    cond = Anisotropic(Sphere(10), lambdas="bimodal")
    assert cond.lambda_true().tolist() == BIMODAL_10
    assert Anisotropic(Sphere(7), lambdas="bimodal").lambda_true().tolist() == [25.0] * 3 + [5.0] * 4


def test_linear_profile_exact():
    lam = Anisotropic(Sphere(10), lambdas="linear").lambda_true().numpy()
    np.testing.assert_allclose(lam, np.linspace(5, 25, 10), rtol=0, atol=1e-12)
    assert lam[0] == 5.0 and lam[-1] == 25.0


def test_explicit_lambdas_and_default():
    lam = [1, 2.5, 3, 4]
    assert Anisotropic(Euclidean(4), lambdas=lam).lambda_true().tolist() == [1.0, 2.5, 3.0, 4.0]
    assert Anisotropic(Sphere(10)).lambda_true().tolist() == BIMODAL_10


def test_blocks():
    assert Anisotropic(Sphere(10), lambdas="bimodal").blocks() == {
        "lambda_25": [0, 1, 2, 3, 4],
        "lambda_5": [5, 6, 7, 8, 9],
    }
    assert Anisotropic(Sphere(10), lambdas="linear").blocks() == {}
    repeated = Anisotropic(Euclidean(4), lambdas=[2.5, 1, 2.5, 1])
    assert repeated.blocks() == {"lambda_2.5": [0, 2], "lambda_1": [1, 3]}


def test_lambda_is_a_buffer():
    cond = Anisotropic(Sphere(10), lambdas="linear")
    assert "lam" in cond.state_dict()
    assert cond.to(torch.float32).lambda_true().dtype == torch.float32


# ---------------------------------------------------------------- R^n


def test_euclidean_variance_is_inverse_lambda():
    lam = np.array([0.5, 1.0, 4.0, 9.0, 25.0, 100.0])
    size = 40000
    cond = Anisotropic(Euclidean(6), lambdas=lam.tolist())
    z = torch.randn(size, 6, generator=rng(0), dtype=torch.float64) * 3
    delta = (cond.sample(z, rng(1)) - z).numpy()
    ratio = delta.var(axis=0) * lam
    assert np.all(np.abs(ratio - 1) < 5 * np.sqrt(2 / size))
    assert np.all(np.abs(delta.mean(axis=0)) * np.sqrt(lam) < 5 / np.sqrt(size))
    assert np.abs(np.corrcoef(delta.T) - np.eye(6)).max() < 5 / np.sqrt(size)
    assert cond.acceptance_rate == 1.0


# ---------------------------------------------------------------- sphere


@pytest.mark.parametrize("radius", [1.0, 2.0])
@pytest.mark.parametrize("shell", [None, 0.1])
def test_sphere_support(radius, shell):
    space = Sphere(10, radius=radius)
    cond = Anisotropic(space, lambdas="bimodal", shell=shell)
    z = space.uniform(2000, rng(0), torch.float64)
    z_pos = cond.sample(z, rng(1))
    assert z_pos.shape == z.shape
    np.testing.assert_allclose(z_pos.norm(dim=-1).numpy(), radius, rtol=1e-12)
    assert space.contains(z_pos).all()


@pytest.mark.parametrize("radius", [1.0, 2.0])
def test_sphere_formula(radius):
    """z+ = r (z/r + δ)/‖z/r + δ‖ with δ = Λ^{-1/2} ε, ε the generator's next standard normals."""
    space = Sphere(10, radius=radius)
    cond = Anisotropic(space, lambdas="linear")
    z = space.uniform(500, rng(0), torch.float64)
    eps = torch.randn(z.shape, generator=rng(1), dtype=torch.float64).numpy()
    w = z.numpy() / radius + eps / np.sqrt(np.linspace(5, 25, 10))
    expected = radius * w / np.linalg.norm(w, axis=1, keepdims=True)
    np.testing.assert_allclose(cond.sample(z, rng(1)).numpy(), expected, rtol=1e-12, atol=1e-12)


def test_sphere_tangent_variance_follows_lambda():
    """At z = e_0 the tangent coordinates of z+ move with variance ≈ 1/Λ_i (small noise)."""
    lam = np.array([400.0, 400.0, 100.0, 400.0, 1600.0])
    size = 40000
    cond = Anisotropic(Sphere(5), lambdas=lam.tolist())
    z = torch.zeros(size, 5, dtype=torch.float64)
    z[:, 0] = 1.0
    z_pos = cond.sample(z, rng(3)).numpy()
    ratio = z_pos[:, 1:].var(axis=0) * lam[1:]
    assert np.all(np.abs(ratio - 1) < 0.05)


@pytest.mark.parametrize("radius", [1.0, 2.0])
def test_shell_every_sample_inside(radius):
    space = Sphere(10, radius=radius)
    cond = Anisotropic(space, lambdas="bimodal", shell=0.1)
    z = space.uniform(3000, rng(0), torch.float64)
    w = cond.displaced(z, rng(1))
    assert ((1 - w.norm(dim=-1)).abs() < 0.1).all()
    assert 0.0 < cond.acceptance_rate < 1.0
    plain = Anisotropic(space, lambdas="bimodal").displaced(z, rng(1))
    assert ((1 - plain.norm(dim=-1)).abs() >= 0.1).float().mean() > 0.5


def test_shell_matches_naive_rejection():
    """Bulk rejection vs. a plain filter of one long stream of candidates around one fixed anchor."""
    lam = torch.tensor(BIMODAL_10, dtype=torch.float64)
    u = torch.zeros(10, dtype=torch.float64)
    u[0] = 0.6
    u[7] = 0.8
    cond = Anisotropic(Sphere(10), lambdas=BIMODAL_10, shell=0.1)
    ours = cond.displaced(u.expand(20000, 10), rng(0)).numpy()
    cand = u + torch.randn(300000, 10, generator=rng(1), dtype=torch.float64) / lam.sqrt()
    keep = (1 - cand.norm(dim=-1)).abs() < 0.1
    naive = cand[keep].numpy()
    rate = keep.double().mean().item()
    assert abs(cond.acceptance_rate - rate) < 0.01
    for j in (0, 1, 7, 9):
        assert stats.ks_2samp(ours[:, j], naive[:, j]).pvalue > 1e-3
    norms_ours, norms_naive = np.linalg.norm(ours, axis=1), np.linalg.norm(naive, axis=1)
    assert stats.ks_2samp(norms_ours, norms_naive).pvalue > 1e-3
    se = np.sqrt(ours.var(axis=0) / len(ours) + naive.var(axis=0) / len(naive))
    assert np.all(np.abs(ours.mean(axis=0) - naive.mean(axis=0)) < 5 * se)


def test_shell_acceptance_in_reported_range():
    """R24 setting (n = 10, threshold 0.1): roughly 10-15 % of the candidates are accepted."""
    space = Sphere(10)
    for profile in ("bimodal", "linear"):
        cond = Anisotropic(space, lambdas=profile, shell=0.1)
        cond.sample(space.uniform(6144, rng(0), torch.float32), rng(1))
        assert 0.07 < cond.acceptance_rate < 0.2


def test_float32_and_reproducible():
    space = Sphere(10)
    cond = Anisotropic(space, lambdas="bimodal", shell=0.1).to(torch.float32)
    z = space.uniform(500, rng(0), torch.float32)
    a, b = cond.sample(z, rng(5)), cond.sample(z, rng(5))
    assert a.dtype == torch.float32
    assert torch.equal(a, b)


# ---------------------------------------------------------------- box


def test_box_samples_inside_and_truncated_normal():
    space = Box(3, low=0.0, high=1.0)
    lam = [4.0, 100.0, 1.0]
    cond = Anisotropic(space, lambdas=lam)
    size = 5000
    z = torch.tensor([[0.9, 0.5, 0.05]], dtype=torch.float64).expand(size, 3)
    z_pos = cond.sample(z, rng(2))
    assert space.contains(z_pos, atol=0).all()
    for j in range(3):
        loc, scale = z[0, j].item(), 1 / np.sqrt(lam[j])
        law = stats.truncnorm((0 - loc) / scale, (1 - loc) / scale, loc=loc, scale=scale)
        assert stats.kstest(z_pos[:, j].numpy(), law.cdf).pvalue > 1e-3


# ---------------------------------------------------------------- registry and bad input


def test_registry_build():
    cond = CONDITIONALS.build({"name": "anisotropic", "lambdas": "linear", "shell": 0.1}, Sphere(10), rng(0),
                              key="dgp.conditional")
    assert isinstance(cond, Anisotropic)
    assert "0.1" in cond.describe()


@pytest.mark.parametrize(
    "lambdas",
    ["bimodel", [1.0] * 9, [1.0] * 11, [1.0] * 9 + [0.0], [1.0] * 9 + [-2.0], [1.0] * 9 + [float("nan")],
     [1.0] * 9 + [True], 3.0],
)
def test_bad_lambdas(lambdas):
    with pytest.raises(ValueError, match=r"dgp\.conditional\.lambdas"):
        Anisotropic(Sphere(10), lambdas=lambdas)


@pytest.mark.parametrize("space, shell", [(Sphere(10), 0.0), (Sphere(10), -0.1), (Euclidean(10), 0.1),
                                          (Box(10), 0.1)])
def test_bad_shell(space, shell):
    with pytest.raises(ValueError, match=r"dgp\.conditional\.shell"):
        Anisotropic(space, shell=shell)
