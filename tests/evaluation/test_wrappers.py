import json

import numpy as np
import pytest
import torch

from identifiable_cl.evaluation import evaluate, identity_baseline, linear_readout, metrics, random_rotation_reference
from identifiable_cl.evaluation.catalog import reference_generator


class FakeProcess:
    """A 4-latent Gaussian process mixed by a fixed rotation followed by an elementwise cube-plus-identity."""

    def __init__(self, blocks=None, lambda_groups=None, dim=4):
        g = torch.Generator().manual_seed(123)
        q, _ = torch.linalg.qr(torch.randn(dim, dim, generator=g, dtype=torch.float64))
        self.q = q
        self.dim = dim
        self.blocks = {"content": [0, 1], "style": [2, 3]} if blocks is None else blocks
        self.lambda_groups = lambda_groups
        self.sampled = []
        self.mixed_rows = 0

    def sample_latents(self, n, generator):
        self.sampled.append(n)
        return torch.randn(n, self.dim, generator=generator, dtype=torch.float64)

    def mix(self, z):
        self.mixed_rows += z.shape[0]
        u = z @ self.q
        return u + u**3 / 3

    def unmix(self, x):
        """Inverse of mix: solve u + u³/3 = x per coordinate (Cardano), then rotate back."""
        r = torch.sqrt(9 * x**2 / 4 + 1)
        u = torch.sign(x) * ((1.5 * x.abs() + r) ** (1 / 3) - (r - 1.5 * x.abs()).clamp_min(0) ** (1 / 3))
        return u @ self.q.T


SMALL = dict(n_fit=1500, n_test=1500, batch_size=500)
BASE_KEYS = {
    "r2_linear", "r2_linear_per_dim", "r2_nonlinear", "r2_nonlinear_per_dim", "mcc_pearson", "mcc_pearson_per_dim",
    "mcc_matching", "mcc_spearman", "mcc_spearman_per_dim", "effective_rank", "singular_values", "r2_orthogonal",
    "r2_orthogonal_per_dim",
}


def test_inverse_encoder_scores_one_and_keys_are_flat():
    process = FakeProcess(lambda_groups=[[0, 1], [2, 3]])
    out = evaluate(process.unmix, process, torch.Generator().manual_seed(0), **SMALL)
    blocks = {"r2_linear_content", "r2_linear_style", "r2_nonlinear_content", "r2_nonlinear_style"}
    aware = {"mcc_block_aware", "mcc_block_aware_per_dim", "mcc_block_aware_random_rotation"}
    assert set(out) == BASE_KEYS | blocks | aware
    for key in ("r2_linear", "r2_nonlinear", "r2_orthogonal", "mcc_pearson", "mcc_spearman", "mcc_block_aware",
                "r2_linear_style"):
        assert out[key] == pytest.approx(1.0, abs=1e-3), key
    assert out["mcc_matching"] == [[0, 0], [1, 1], [2, 2], [3, 3]]
    assert out["effective_rank"] > 3.9
    json.dumps(out)
    assert process.sampled == [1500, 1500]


def test_identity_baseline_scores_the_mixing_itself():
    process = FakeProcess()
    out = identity_baseline(process, torch.Generator().manual_seed(0), **SMALL)
    assert set(out) == {f"identity_{k}" for k in BASE_KEYS | {"r2_linear_content", "r2_linear_style",
                                                             "r2_nonlinear_content", "r2_nonlinear_style"}}
    assert out["identity_r2_linear"] < 0.95
    assert out["identity_r2_nonlinear"] > out["identity_r2_linear"]
    assert out["identity_mcc_pearson"] < 0.95


def test_encoder_runs_in_batches_without_gradients():
    process = FakeProcess()
    calls = []

    def encode(x):
        calls.append((x.shape[0], torch.is_grad_enabled()))
        return x

    evaluate(encode, process, torch.Generator().manual_seed(0), n_fit=300, n_test=450, batch_size=100, nonlinear=False)
    assert [n for n, _ in calls] == [100] * 3 + [100] * 4 + [50]
    assert not any(grad for _, grad in calls)
    assert process.mixed_rows == 750


def test_in_sample_draws_only_the_fit_sample():
    process = FakeProcess(blocks={})
    out = evaluate(lambda x: x, process, torch.Generator().manual_seed(0), n_fit=400, nonlinear=False, in_sample=True)
    assert process.sampled == [400]
    assert "r2_nonlinear" not in out and "mcc_block_aware" not in out
    assert not any(k.startswith("r2_linear_") and k != "r2_linear_per_dim" for k in out)


def test_same_generator_seed_gives_identical_metrics():
    process = FakeProcess(lambda_groups=[[0], [1], [2], [3]])
    a = evaluate(lambda x: x, process, torch.Generator().manual_seed(5), **SMALL)
    b = evaluate(lambda x: x, process, torch.Generator().manual_seed(5), **SMALL)
    assert a == b
    assert a["mcc_block_aware"] == pytest.approx(a["mcc_pearson"], abs=1e-10)


def test_metrics_from_arrays(gaussian):
    z = gaussian(1000, 3, 0)
    out = metrics(z[:500], z[:500], z[500:], z[500:], blocks={"a": [0], "b": [1, 2]}, nonlinear=False)
    assert out["r2_linear_a"] == pytest.approx(1.0) and out["mcc_spearman"] == pytest.approx(1.0)


def test_linear_readout_shapes():
    process = FakeProcess()
    z, z_hat, per_dim = linear_readout(process.unmix, process, torch.Generator().manual_seed(0), n_fit=300, n_test=200)
    assert isinstance(z, np.ndarray) and z.shape == z_hat.shape == (200, 4)
    np.testing.assert_allclose(z_hat, z, atol=1e-6)
    assert per_dim == pytest.approx([1.0] * 4, abs=1e-9)


def test_bad_input():
    process = FakeProcess()
    g = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="eval.n_fit=0 is invalid"):
        evaluate(lambda x: x, process, g, n_fit=0)
    with pytest.raises(ValueError, match="eval.nonlinear='yes' is invalid"):
        evaluate(lambda x: x, process, g, n_fit=100, n_test=100, nonlinear="yes")
    with pytest.raises(ValueError, match=r"encode returned \(50,\) for a batch of 50 observations"):
        evaluate(lambda x: x[:, 0], process, g, n_fit=50, n_test=50)

    def nan_in_first_row(x):
        h = x.clone()
        h[0, 1] = float("nan")
        return h

    with pytest.raises(ValueError, match="h_fit contains 1 NaN or infinite entries"):
        evaluate(nan_in_first_row, process, g, n_fit=50, n_test=50)
    broken = FakeProcess(blocks={"content": [0, 1], "style": [1, 2, 3]})
    with pytest.raises(ValueError, match="latent dimension 1 appears in both"):
        evaluate(lambda x: x, broken, g, n_fit=50, n_test=50, nonlinear=False)


def test_random_rotation_reference_is_added_without_changing_the_other_draws(gaussian):
    z = gaussian(1200, 4, 20)
    h = z @ gaussian(4, 4, 21) + 0.3 * gaussian(1200, 4, 22)
    groups = [[0, 1], [2, 3]]
    halves = (z[:600], h[:600], z[600:], h[600:])
    runs = {}
    for name, lambda_groups in (("plain", None), ("grouped", groups)):
        g = torch.Generator().manual_seed(3)
        runs[name] = metrics(*halves, lambda_groups=lambda_groups, generator=g), g
    (plain, after_plain), (grouped, after) = runs["plain"], runs["grouped"]
    assert "mcc_block_aware_random_rotation" not in plain
    assert {k: grouped[k] for k in plain} == plain  # the nonlinear R² drew the same numbers
    assert torch.equal(after_plain.get_state(), after.get_state())  # the reference leaves the caller's generator alone
    assert set(grouped) - set(plain) == {"mcc_block_aware", "mcc_block_aware_per_dim", "mcc_block_aware_random_rotation"}
    # seeded from the generator as the nonlinear R² left it, which is where metrics leaves it
    own = random_rotation_reference(z[600:], groups, reference_generator(after))
    assert grouped["mcc_block_aware_random_rotation"] == own.mean
    assert 0.0 < own.mean < 1.0


def test_random_rotation_reference_in_metrics_is_deterministic(gaussian):
    z = gaussian(800, 4, 23)
    groups = [[0, 2], [1, 3]]
    options = dict(lambda_groups=groups, nonlinear=False)

    def reference(generator):
        return metrics(z[:400], z[:400], z[400:], z[400:], generator=generator, **options)["mcc_block_aware_random_rotation"]

    assert reference(None) == reference(None)
    assert reference(torch.Generator().manual_seed(8)) == reference(torch.Generator().manual_seed(8))
    assert reference(torch.Generator().manual_seed(8)) != reference(torch.Generator().manual_seed(9))
    in_sample = metrics(z[:400], z[:400], in_sample=True, **options)["mcc_block_aware_random_rotation"]
    assert in_sample == random_rotation_reference(z[:400], groups, reference_generator(None)).mean


def test_identity_baseline_carries_the_reference_too():
    process = FakeProcess(lambda_groups=[[0, 1], [2, 3]])
    out = identity_baseline(process, torch.Generator().manual_seed(0), **SMALL, nonlinear=False)
    assert 0.5 < out["identity_mcc_block_aware_random_rotation"] < 1.0


def test_reference_generator_copies_a_generator_on_any_device(device):
    g = torch.Generator(device=device).manual_seed(12)
    before = g.get_state()
    first, second = reference_generator(g), reference_generator(g)
    assert torch.equal(g.get_state(), before)
    assert first.device.type == "cpu" and first.initial_seed() == second.initial_seed()
    torch.rand(1, generator=g, device=device)
    assert reference_generator(g).initial_seed() != first.initial_seed()  # seeded by the generator's state


def test_metrics_fits_nonlinear_r2_on_the_given_number_of_centres(gaussian):
    from identifiable_cl.evaluation.regression import nonlinear_r2

    z = gaussian(600, 3, 0)
    h = torch.tanh(z @ gaussian(3, 3, 1))
    fit, test = (z[:400], h[:400]), (z[400:], h[400:])
    for m in (20, 120):
        got = metrics(*fit, *test, n_centres=m, generator=torch.Generator().manual_seed(5))
        want = nonlinear_r2(*fit, *test, n_centres=m, generator=torch.Generator().manual_seed(5))
        assert got["r2_nonlinear_per_dim"] == want.per_dim
    few = metrics(*fit, *test, n_centres=20, generator=torch.Generator().manual_seed(5))
    many = metrics(*fit, *test, n_centres=120, generator=torch.Generator().manual_seed(5))
    assert few["r2_nonlinear"] != many["r2_nonlinear"]
    assert few["r2_linear"] == many["r2_linear"]  # only the kernel regression depends on the centres
