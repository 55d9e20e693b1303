import math

import numpy as np
import pytest
import torch

from identifiable_cl.evaluation import effective_rank, spectrum


def reference_effective_rank(s):
    p = np.asarray(s, dtype=float) / np.sum(s)
    p = p[p > 0]
    return float(np.exp(-(p * np.log(p)).sum()))


def test_effective_rank_closed_forms():
    assert effective_rank([1.0, 1.0, 1.0]) == pytest.approx(3.0)
    assert effective_rank([2.0, 0.0, 0.0]) == pytest.approx(1.0)
    assert effective_rank([0.0, 0.0]) == 0.0
    s = [3.0, 1.0, 0.5, 0.01]
    assert effective_rank(s) == pytest.approx(reference_effective_rank(s))
    with pytest.raises(ValueError, match="singular_values=.* is invalid"):
        effective_rank([1.0, -1.0])


def test_spectrum_matches_numpy(gaussian):
    h = gaussian(500, 4, 0) @ gaussian(4, 4, 1) + 2.0
    x = h.numpy()
    x = (x - x.mean(0)) / x.std(0)
    expected = np.linalg.svd(x / math.sqrt(len(x)), compute_uv=False)
    result = spectrum(h)
    np.testing.assert_allclose(result.singular_values, expected, atol=1e-12)
    assert result.effective_rank == pytest.approx(reference_effective_rank(expected))
    raw = spectrum(h, standardise=False).singular_values
    centred = h.numpy() - h.numpy().mean(0)
    np.testing.assert_allclose(raw, np.linalg.svd(centred / math.sqrt(len(x)), compute_uv=False), atol=1e-12)


def test_isotropic_representation_has_full_effective_rank(gaussian):
    result = spectrum(gaussian(20000, 6, 2))
    assert result.singular_values == pytest.approx([1.0] * 6, abs=0.03)
    assert result.effective_rank > 5.99


def test_collapsed_representation(device, gaussian):
    h = (gaussian(2000, 2, 3) @ gaussian(2, 6, 4)).to(device)
    result = spectrum(h)
    assert all(s < 1e-6 for s in result.singular_values[2:])
    assert 1.0 <= result.effective_rank <= 2.0 + 1e-6
    constant = spectrum(torch.ones(50, 3))
    assert constant.singular_values == [0.0, 0.0, 0.0] and constant.effective_rank == 0.0


def test_bad_input(gaussian):
    with pytest.raises(ValueError, match="h has 4 samples: at least 6 are needed"):
        spectrum(gaussian(4, 5, 5))
    with pytest.raises(ValueError, match="h contains 1 NaN"):
        spectrum(torch.tensor([[1.0, float("nan")], [2.0, 3.0], [4.0, 5.0]]))
