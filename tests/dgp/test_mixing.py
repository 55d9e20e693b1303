import numpy as np
import pytest
import torch

from dgp.mixing import IdentityMixing, InvertibleMLP, LinearMixing
from dgp import MIXINGS


def rng(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def mlp(seed: int = 0, dim: int = 10, **options) -> InvertibleMLP:
    options.setdefault("cond_draws", 500)
    options.setdefault("cond_ratio", 0.05)
    return InvertibleMLP(dim, rng(seed), **options)


def numpy_forward(weights: np.ndarray, z: np.ndarray, slope: float) -> np.ndarray:
    h = z
    for i, w in enumerate(weights):
        h = h @ w.T
        if i < len(weights) - 1:
            h = np.where(h > 0, h, slope * h)
    return h


def test_forward_matches_numpy_reference():
    g = mlp(0, slope=0.3)
    z = torch.randn(256, 10, generator=rng(1), dtype=torch.float64)
    expected = numpy_forward(g.weight.numpy(), z.numpy(), 0.3)
    np.testing.assert_allclose(g(z).numpy(), expected, rtol=1e-12, atol=1e-12)


def test_layers_have_unit_columns_and_uniform_entries():
    g = mlp(2, layers=4)
    w = g.weight.numpy()
    assert w.shape == (4, 10, 10)
    np.testing.assert_allclose(np.linalg.norm(w, axis=1), 1.0, atol=1e-12)
    assert np.all(np.abs(w) <= 1.0)


def test_inverse_float64_tight():
    g = mlp(3)
    z = torch.randn(2000, 10, generator=rng(4), dtype=torch.float64)
    assert torch.allclose(g.inverse(g(z)), z, atol=1e-10, rtol=0)
    x = torch.randn(2000, 10, generator=rng(5), dtype=torch.float64)
    assert torch.allclose(g(g.inverse(x)), x, atol=1e-10, rtol=0)


def test_inverse_float32_loose():
    g = mlp(3).to(torch.float32)
    z = torch.randn(2000, 10, generator=rng(4))
    rec = g.inverse(g(z))
    assert rec.dtype == torch.float32
    assert (rec - z).abs().max() < 1e-4 * z.abs().max()


def test_nonlinear():
    g = mlp(6)
    z = torch.randn(100, 10, generator=rng(7), dtype=torch.float64)
    assert not torch.allclose(g(-z), -g(z), atol=1e-3)


def test_every_layer_within_threshold():
    for seed in range(3):
        g = mlp(seed, cond_ratio=0.05, cond_draws=2000)
        conds = np.linalg.cond(g.weight.numpy())
        assert len(g.condition_numbers()) == 3
        np.testing.assert_allclose(g.condition_numbers(), conds, rtol=1e-9)
        assert np.all(conds <= g.threshold * (1 + 1e-12))


def test_threshold_is_the_order_statistic_of_reference_draws():
    draws, ratio, n = 2000, 0.1, 6
    g = InvertibleMLP(n, rng(11), cond_ratio=ratio, cond_draws=draws)
    raw = torch.rand(draws, n, n, generator=rng(11), dtype=torch.float64).numpy() * 2 - 1
    mats = raw / np.sqrt((raw**2).sum(axis=1, keepdims=True))
    expected = np.sort(np.linalg.cond(mats))[int(draws * ratio)]
    assert g.threshold == pytest.approx(expected, rel=1e-10)


def test_threshold_ratio_zero_default_draws():
    """Z21/R24 setting: best of 25,000 draws at n = 10 (official R24 log: 3.61; 3.0-4.4 over seeds)."""
    g = InvertibleMLP(10, rng(0))
    assert 3.0 <= g.threshold <= 4.5
    assert max(g.condition_numbers()) <= g.threshold


def test_threshold_ratio_vk21():
    g = InvertibleMLP(10, rng(1), cond_ratio=0.001, cond_draws=25000)
    assert 4.8 <= g.threshold <= 5.5


def test_same_seed_same_weights_different_seed_different():
    a, b, c = mlp(21), mlp(21), mlp(22)
    assert torch.equal(a.weight, b.weight)
    assert a.threshold == b.threshold
    assert not torch.allclose(a.weight, c.weight)


def test_state_dict_round_trip():
    a, b = mlp(31), mlp(32)
    z = torch.randn(64, 10, generator=rng(0), dtype=torch.float64)
    assert not torch.allclose(a(z), b(z))
    b.load_state_dict(a.state_dict())
    assert torch.equal(a(z), b(z))
    assert torch.equal(a.inverse(z), b.inverse(z))
    assert b.threshold == a.threshold
    assert {"weight", "weight_inverse", "cond_threshold"} <= set(a.state_dict())


def test_linear_mixing():
    g = LinearMixing(8, rng(5), cond_draws=500)
    z = torch.randn(300, 8, generator=rng(6), dtype=torch.float64)
    np.testing.assert_allclose(g(z).numpy(), z.numpy() @ g.weight[0].numpy().T, rtol=1e-12, atol=1e-12)
    assert torch.allclose(g.inverse(g(z)), z, atol=1e-11)
    assert len(g.condition_numbers()) == 1
    assert g.condition_numbers()[0] <= g.threshold


def test_identity_mixing():
    g = IdentityMixing(5)
    z = torch.randn(10, 5, generator=rng(0))
    assert torch.equal(g(z), z)
    assert torch.equal(g.inverse(z), z)
    assert g.condition_numbers() == []


def test_registry_builds_all_three():
    def build(spec):
        return MIXINGS.build(spec, 4, rng(0), key="dgp.mixing")

    assert isinstance(build({"name": "mlp", "layers": 2, "cond_draws": 300, "cond_ratio": 0.05}), InvertibleMLP)
    assert isinstance(build({"name": "linear", "cond_draws": 300, "cond_ratio": 0.05}), LinearMixing)
    assert isinstance(build({"name": "identity"}), IdentityMixing)


@pytest.mark.parametrize(
    "options, key",
    [
        ({"cond_ratio": 1.0}, "dgp.mixing.cond_ratio"),
        ({"cond_ratio": -0.1}, "dgp.mixing.cond_ratio"),
        ({"cond_draws": 0}, "dgp.mixing.cond_draws"),
        ({"layers": 0}, "dgp.mixing.layers"),
        ({"slope": 0.0}, "dgp.mixing.slope"),
    ],
)
def test_bad_options(options, key):
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        mlp(0, **options)
