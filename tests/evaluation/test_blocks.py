import numpy as np
import pytest
import torch
from scipy.linalg import orthogonal_procrustes
from scipy.optimize import linear_sum_assignment
from scipy.stats import ortho_group

from identifiable_cl.evaluation import (
    block_aware_mcc,
    block_r2,
    haar_orthogonal,
    linear_r2,
    mcc,
    random_rotation_reference,
    split_by_block,
)
from identifiable_cl.evaluation.records import R2Result

BLOCKS = {"content": [0, 1, 2], "style": [3, 4, 5]}


def content_only(gaussian, make_rotation, n=4000):
    z = gaussian(n, 6, 0)
    h = torch.cat([z[:, :3] @ make_rotation(3, 1), gaussian(n, 2, 2)], dim=1)
    return z[: n // 2], h[: n // 2], z[n // 2 :], h[n // 2 :]


@pytest.mark.parametrize("nonlinear", [False, True])
def test_block_r2_content_isolated(nonlinear, gaussian, make_rotation):
    result = block_r2(*content_only(gaussian, make_rotation, n=2400), blocks=BLOCKS, nonlinear=nonlinear)
    assert set(result) == {"content", "style"}
    assert result["content"].mean > 0.999
    assert abs(result["style"].mean) < 0.02
    assert len(result["content"].per_dim) == 3


def test_split_by_block_averages_the_block_dimensions():
    result = R2Result(mean=0.5, per_dim=[0.1, 0.2, 0.3, 0.4, 0.5, 0.6])
    parts = split_by_block(result, {"a": [0, 5], "b": [1, 2, 3, 4]})
    assert parts["a"] == R2Result(mean=pytest.approx(0.35), per_dim=[0.1, 0.6])
    assert parts["b"].mean == pytest.approx(0.35)


def test_block_r2_equals_separate_block_regressions(gaussian, make_rotation):
    z_fit, h_fit, z_test, h_test = content_only(gaussian, make_rotation)
    result = block_r2(z_fit, h_fit, z_test, h_test, blocks=BLOCKS)
    for name, dims in BLOCKS.items():
        alone = linear_r2(z_fit[:, dims], h_fit, z_test[:, dims], h_test)
        assert result[name].mean == pytest.approx(alone.mean, abs=1e-12)


@pytest.mark.parametrize(
    "blocks, message",
    [
        ({"a": [0, 1, 2], "b": [2, 3, 4, 5]}, "latent dimension 2 appears in both 'a' and 'b'"),
        ({"a": [0, 1, 2], "b": [3, 4]}, r"leaves latent dimension\(s\) \[5\] out"),
        ({"a": [0, 1, 2], "b": [3, 4, 6]}, r"contains 6: latent indices must lie in \[0, 5\]"),
        ({"a": [0, 1, 2, 3, 4, 5], "b": []}, "is empty"),
        ({"": [0, 1, 2], "c": [3, 4, 5]}, "names must be non-empty strings"),
        ({"per_dim": [0, 1, 2], "c": [3, 4, 5]}, "names must be non-empty strings other than 'per_dim'"),
        ({"a": [0, 1.5, 2], "b": [3, 4, 5]}, "expected integer latent indices"),
    ],
)
def test_blocks_must_partition_the_latents(blocks, message, gaussian, make_rotation):
    with pytest.raises(ValueError, match=message):
        block_r2(*content_only(gaussian, make_rotation, n=200), blocks=blocks)


def test_block_indices_may_be_numpy_or_tensor_integers(gaussian, make_rotation):
    import numpy as np

    blocks = {"lambda_2.5": np.arange(3), "lambda_7": list(torch.arange(3, 6))}
    result = block_r2(*content_only(gaussian, make_rotation, n=400), blocks=blocks)
    assert set(result) == {"lambda_2.5", "lambda_7"}


def test_one_block_rotation(gaussian, make_rotation):
    z = gaussian(4000, 5, 3)
    h = z @ make_rotation(5, 4)
    assert mcc(z, h).mean < 0.9
    aligned = block_aware_mcc(z, h, [list(range(5))])
    assert aligned.mean == pytest.approx(1.0, abs=1e-4)
    assert aligned.assignment == [[0, 1, 2, 3, 4]]


def test_rotations_inside_groups_are_forgiven_but_not_across(gaussian, make_rotation):
    z = gaussian(6000, 5, 5)
    groups = [[0, 3], [1, 2, 4]]
    inside = torch.zeros(5, 5, dtype=torch.float64)
    inside[[[0], [3]], [0, 3]] = make_rotation(2, 6)
    inside[[[1], [2], [4]], [1, 2, 4]] = make_rotation(3, 7)
    h = (z @ inside)[:, [4, 2, 0, 1, 3]] * torch.tensor([1.0, -2.0, 3.0, 0.5, 1.0], dtype=torch.float64)
    assert mcc(z, h).mean < 0.95
    aligned = block_aware_mcc(z, h, groups)
    assert aligned.mean == pytest.approx(1.0, abs=1e-3)
    assert [sorted(a) for a in aligned.assignment] == [[2, 4], [0, 1, 3]]
    across = block_aware_mcc(z, z @ make_rotation(5, 8), groups)
    assert across.mean < 0.95


def test_single_dimension_groups_give_plain_mcc(gaussian):
    z = gaussian(3000, 4, 9)
    h = z @ gaussian(4, 4, 10) + 0.5 * gaussian(3000, 4, 11)
    plain = mcc(z, h)
    aligned = block_aware_mcc(z, h, [[0], [1], [2], [3]])
    assert aligned.per_dim == pytest.approx(plain.per_dim, abs=1e-10)


def test_block_aware_mcc_with_fewer_representation_dimensions(gaussian, make_rotation):
    z = gaussian(3000, 4, 12)
    h = z[:, :2] @ make_rotation(2, 13)
    aligned = block_aware_mcc(z, h, [[0, 1], [2, 3]])
    assert aligned.per_dim[:2] == pytest.approx([1.0, 1.0], abs=1e-3)
    assert aligned.per_dim[2:] == [0.0, 0.0]
    assert aligned.assignment == [[0, 1], []]


def test_block_aware_mcc_bad_groups(gaussian):
    z = gaussian(100, 4, 14)
    with pytest.raises(ValueError, match=r"leaves latent dimension\(s\) \[3\] out"):
        block_aware_mcc(z, z, [[0, 1], [2]])
    with pytest.raises(ValueError, match="expected a list of lists"):
        block_aware_mcc(z, z, "0123")


BIMODAL = [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
"""R24's bimodal Λ = [25]*5 + [5]*5: two groups of five latents."""


def on_sphere(n, dim, seed):
    """n points uniform on S^(dim-1), numpy float64 (the latents of R24)."""
    x = np.random.default_rng(seed).normal(size=(n, dim))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def independent_block_aware_mcc(z, h, groups):
    """Block-aware MCC written again with numpy and scipy only: dimensions given to groups by assignment
    on their multiple correlation with the group, then scipy's orthogonal Procrustes inside each group."""
    zs = (z - z.mean(0)) / z.std(0)
    hs = (h - h.mean(0)) / h.std(0)
    corr = zs.T @ hs / len(z)
    slots, owner = [], []
    for k, dims in enumerate(groups):
        inner = np.linalg.pinv(zs[:, dims].T @ zs[:, dims] / len(z))
        fit = np.einsum("aj,ab,bj->j", corr[dims], inner, corr[dims])
        slots += [np.sqrt(np.clip(fit, 0.0, 1.0))] * len(dims)
        owner += [k] * len(dims)
    rows, cols = linear_sum_assignment(-np.stack(slots, axis=1))
    scores = []
    for k, dims in enumerate(groups):
        chosen = [j for j, slot in zip(rows, cols) if owner[slot] == k]
        rotation, _ = orthogonal_procrustes(hs[:, chosen], zs[:, dims])
        aligned = hs[:, chosen] @ rotation
        scores += [np.corrcoef(aligned[:, i], zs[:, d])[0, 1] for i, d in enumerate(dims)]
    return float(np.mean(scores))


def test_haar_orthogonal_is_orthogonal_and_uniform():
    g = torch.Generator().manual_seed(30)
    draws = torch.stack([haar_orthogonal(3, g) for _ in range(3000)])
    eye = torch.eye(3, dtype=torch.float64)
    assert torch.allclose(draws.transpose(1, 2) @ draws, eye.expand_as(draws), atol=1e-12)
    # Haar: every entry has mean 0 and variance 1/3; QR without the sign correction has Q[0, 0] < 0 always
    se = (1 / 3 / len(draws)) ** 0.5
    assert draws.mean(dim=0).abs().max() < 5 * se
    assert (draws.pow(2).mean(dim=0) - 1 / 3).abs().max() < 0.03


def test_block_orthogonal_map_scores_one_while_the_random_rotation_reference_stays_near_0_78(make_rotation):
    n, draws, independent_draws = 4096, 64, 300
    z = on_sphere(n, 10, 31)
    inside = torch.zeros(10, 10, dtype=torch.float64)
    inside[:5, :5] = make_rotation(5, 32)
    inside[5:, 5:] = make_rotation(5, 33)
    h = torch.as_tensor(z) @ inside
    assert block_aware_mcc(z, h, BIMODAL).mean == pytest.approx(1.0, abs=1e-3)

    ours = random_rotation_reference(z, BIMODAL, torch.Generator().manual_seed(34), draws=draws)
    assert len(ours.values) == draws and ours.std == pytest.approx(np.std(ours.values, ddof=1))
    rng = np.random.default_rng(35)
    theirs = [independent_block_aware_mcc(z, z @ ortho_group.rvs(10, random_state=rng), BIMODAL)
              for _ in range(independent_draws)]
    spread = np.std(theirs, ddof=1)
    # two Monte-Carlo means of the same quantity: their difference has this standard error
    se = spread * (1 / draws + 1 / independent_draws) ** 0.5
    assert abs(ours.mean - np.mean(theirs)) < 4 * se
    assert abs(ours.std - spread) < 0.5 * spread
    # the documented "about 0.78" (two decimals) within the independent estimate's error
    assert abs(np.mean(theirs) - 0.78) < 0.005 + 4 * spread / independent_draws**0.5
    assert ours.mean + 4 * ours.std < 1.0 - 1e-3


def test_one_group_of_all_dimensions_forgives_every_rotation(gaussian):
    z = gaussian(3000, 6, 36)
    ref = random_rotation_reference(z, [list(range(6))], torch.Generator().manual_seed(37), draws=5)
    assert ref.mean == pytest.approx(1.0, abs=1e-3) and ref.std < 1e-3


def test_single_dimension_groups_give_the_plain_mcc_of_a_random_rotation(gaussian):
    z = gaussian(2000, 5, 38)
    ref = random_rotation_reference(z, [[i] for i in range(5)], torch.Generator().manual_seed(39), draws=6)
    g = torch.Generator().manual_seed(39)
    plain = [mcc(z, z @ haar_orthogonal(5, g)).mean for _ in range(6)]
    assert ref.values == pytest.approx(plain, abs=1e-10)
    assert ref.mean == pytest.approx(float(np.mean(plain)), abs=1e-10)


def test_random_rotation_reference_is_determined_by_the_generator(gaussian):
    z = gaussian(1000, 4, 40)
    groups = [[0, 1], [2, 3]]
    a = random_rotation_reference(z, groups, torch.Generator().manual_seed(41), draws=4)
    b = random_rotation_reference(z.numpy(), groups, torch.Generator().manual_seed(41), draws=4)
    c = random_rotation_reference(z, groups, torch.Generator().manual_seed(42), draws=4)
    assert a == b and a.values != c.values
    one = random_rotation_reference(z, groups, torch.Generator().manual_seed(41), draws=1)
    assert one.values == a.values[:1] and one.std == 0.0


def test_random_rotation_reference_on_the_device_of_the_latents(device, gaussian):
    z = gaussian(1000, 4, 43)
    groups = [[0, 1], [2, 3]]
    on_device = random_rotation_reference(z.to(device), groups, torch.Generator().manual_seed(44), draws=3)
    on_cpu = random_rotation_reference(z, groups, torch.Generator().manual_seed(44), draws=3)
    assert on_device.values == pytest.approx(on_cpu.values, abs=1e-9)


def test_random_rotation_reference_bad_input(gaussian):
    z = gaussian(100, 4, 45)
    g = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="draws=0 is invalid"):
        random_rotation_reference(z, [[0, 1], [2, 3]], g, draws=0)
    with pytest.raises(ValueError, match="expected a torch.Generator"):
        random_rotation_reference(z, [[0, 1], [2, 3]], 0)
    with pytest.raises(ValueError, match=r"leaves latent dimension\(s\) \[3\] out"):
        random_rotation_reference(z, [[0, 1], [2]], g)
