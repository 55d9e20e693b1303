import pytest
import torch

from identifiable_cl.evaluation import block_aware_mcc, block_r2, linear_r2, mcc, split_by_block
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
