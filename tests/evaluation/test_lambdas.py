import math

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from identifiable_cl.evaluation import lambda_recovery


def test_scaled_and_permuted_concentrations_are_recovered():
    true = [25.0] * 5 + [5.0] * 5
    perm = [7, 2, 9, 0, 4, 1, 8, 3, 6, 5]
    learned = [0.0] * 10
    for i, j in enumerate(perm):
        learned[j] = 0.5 * true[i]
    result = lambda_recovery(torch.tensor(learned), torch.tensor(true), list(enumerate(perm)))
    assert result["relative_error"] == pytest.approx(0.0, abs=1e-12)
    assert result["max_relative_error"] == pytest.approx(0.0, abs=1e-12)
    assert result["scale"] == pytest.approx(2.0)
    assert result["rank_correlation"] == pytest.approx(1.0)
    assert result["pairs"] == [[i, j] for i, j in enumerate(perm)]


def test_hand_computed_case():
    result = lambda_recovery([1.0, 1.0, 1.0], [1.0, 2.0, 4.0], [(0, 0), (1, 1), (2, 2)])
    # r = [1, 1/2, 1/4]; s = Σr / Σr² = 1.75 / 1.3125 = 4/3; errors = [1/3, 1/3, 2/3]
    assert result["scale"] == pytest.approx(4.0 / 3.0)
    assert result["relative_error_per_dim"] == pytest.approx([1 / 3, 1 / 3, 2 / 3])
    assert result["relative_error"] == pytest.approx(math.sqrt(6.0 / 27.0))
    assert result["max_relative_error"] == pytest.approx(2 / 3)
    assert result["rank_correlation"] is None


def test_rank_correlation_matches_scipy_with_ties():
    rng = np.random.default_rng(0)
    true = np.array([25.0] * 5 + [5.0] * 5)
    learned = true * rng.uniform(0.5, 1.5, size=10)
    result = lambda_recovery(learned, true, [(i, i) for i in range(10)])
    assert result["rank_correlation"] == pytest.approx(spearmanr(learned, true).statistic, abs=1e-12)


def test_only_matched_pairs_are_compared():
    result = lambda_recovery([9.0, 2.0, 4.0, 100.0], [1.0, 2.0, 3.0], [(0, 1), (1, 2)])
    assert result["relative_error"] == pytest.approx(0.0, abs=1e-12)
    assert result["scale"] == pytest.approx(0.5)


@pytest.mark.parametrize(
    "learned, true, matching, message",
    [
        ([1.0, 2.0], [1.0, 0.0], [(0, 0), (1, 1)], "concentrations must be > 0"),
        ([1.0, float("nan")], [1.0, 2.0], [(0, 0), (1, 1)], "lambda_learned contains 1 NaN"),
        ([1.0, 2.0], [1.0, 2.0], [(0, 0), (1, 2)], r"contains \(1, 2\)"),
        ([1.0, 2.0], [1.0, 2.0], [(0, 0), (1, 0)], "uses a representation dimension twice"),
        ([1.0, 2.0], [1.0, 2.0], [], "matching is empty"),
        ([1.0, 2.0], [1.0, 2.0], [(0,)], "matching=.* is invalid"),
        ([0.0, 0.0], [1.0, 2.0], [(0, 0), (1, 1)], "no scale can be fitted"),
    ],
)
def test_bad_input(learned, true, matching, message):
    with pytest.raises(ValueError, match=message):
        lambda_recovery(learned, true, matching)
