"""Latents for partial observability (Yao et al. 2024): Gaussian latents in named blocks with an optional
Wishart-drawn dependence, the positive that keeps everything, and the paper's four views of six latents; draws
checked against the closed-form law."""

import math

import pytest
import torch
from scipy import stats

import dgp
from dgp.conditionals import CONDITIONALS
from dgp.marginals import MARGINALS
from dgp.content_style import wishart_identity
from dgp.partial import GaussianBlocks
from dgp.spaces import Euclidean

PAPER_VIEWS = [["z0", "z1", "z2", "z3", "z4"], ["z0", "z1", "z2", "z4", "z5"], ["z0", "z1", "z2", "z3", "z5"],
               ["z0", "z1", "z3", "z4", "z5"]]
PARTIAL = {
    "dim": 6,
    "dtype": "float64",
    "space": "euclidean",
    "marginal": {"name": "gaussian_blocks"},
    "conditional": "keep",
    "negatives": "marginal",
    "mixing": {"name": "mlp", "cond_draws": 200},
    "views": {"name": "subsets", "latents": PAPER_VIEWS},
}


def partial(seed=0, **changes):
    return dgp.build_process({**PARTIAL, **changes}, seed=seed)


def test_a_block_per_latent_or_blocks_of_chosen_sizes():
    process = partial()
    assert process.blocks == {f"z{i}": [i] for i in range(6)}
    assert process.view_count == 4 and process.observed_dims == [5, 5, 5, 5]
    assert process.views.dims[1] == [0, 1, 2, 4, 5]
    sized = partial(marginal={"name": "gaussian_blocks", "sizes": [2, 3, 1]},
                    views={"name": "subsets", "latents": [["z0", "z1"], ["z0", "z2"]]})
    assert sized.blocks == {"z0": [0, 1], "z1": [2, 3, 4], "z2": [5]}
    assert sized.observed_dims == [5, 3] and sized.views.dims[1] == [0, 1, 5]


def test_every_view_observes_the_same_latent_through_its_own_mixing():
    process = partial()
    batch = process.sample(64, process.make_generator(1))
    assert batch.z_pos is batch.z
    for v, seen in enumerate(PAPER_VIEWS):
        dims = [int(name[1:]) for name in seen]
        mixing = process.mixing if v == 0 else process.view_mixings[v - 1]
        torch.testing.assert_close(batch.views[v], mixing(batch.z[:, dims]), rtol=0, atol=0)
        torch.testing.assert_close(batch.views_neg[v], mixing(batch.z_neg[:, dims]), rtol=0, atol=0)
    assert not torch.equal(process.view_mixings[0].state_dict()["weight"],
                           process.view_mixings[1].state_dict()["weight"])


@pytest.mark.parametrize("dependent", [0, 4, 6])
def test_draws_follow_the_closed_form_gaussian(dependent):
    """The sample covariance of N = 200,000 draws within 5 standard errors of Σ in every entry (the standard error of
    entry (i, j) is sqrt((Σ_ii Σ_jj + Σ_ij²) / N)), and the whitened coordinates L⁻¹z pass a Kolmogorov–Smirnov
    test against N(0, 1)."""
    process = partial(marginal={"name": "gaussian_blocks", "dependent_dims": dependent}, seed=3)
    sigma = process.marginal.covariance()
    expected = torch.eye(6, dtype=torch.float64)
    if dependent:
        expected[:dependent, :dependent] = sigma[:dependent, :dependent]
        assert not torch.equal(sigma[:dependent, :dependent], torch.eye(dependent, dtype=torch.float64))
    torch.testing.assert_close(sigma, expected, rtol=0, atol=0)
    n = 200_000
    z = process.sample_latents(n, process.make_generator(4))
    cov = z.T @ z / n
    stderr = ((torch.diagonal(sigma)[:, None] * torch.diagonal(sigma)[None, :] + sigma**2) / n).sqrt()
    assert ((cov - sigma).abs() / stderr).max() < 5
    white = torch.linalg.solve_triangular(process.marginal.chol, z.T, upper=False).T
    for i in range(6):
        assert stats.kstest(white[:, i].numpy(), "norm").pvalue > 1e-3, i


def test_the_wishart_draw_has_mean_k_identity():
    """E W = k I_k for W ~ Wishart(df = k, I_k); Var W_ij = k (1 + δ_ij): over 4,000 draws of the marginal's
    Wishart sampler every entry of the mean lies within 5 standard errors (the marginal's own Σ is that sampler's
    draw: checked on one seed)."""
    k, draws = 3, 4000
    rng = torch.Generator().manual_seed(0)
    mean = sum(wishart_identity(k, rng) for _ in range(draws)) / draws
    own = GaussianBlocks(Euclidean(5), torch.Generator().manual_seed(7), dependent_dims=k).sigma[:k, :k]
    assert torch.equal(own, wishart_identity(k, torch.Generator().manual_seed(7)).to(own))
    stderr = (k * (1 + torch.eye(k, dtype=torch.float64)) / draws).sqrt()
    assert ((mean - k * torch.eye(k, dtype=torch.float64)).abs() / stderr).max() < 5


def test_the_wishart_draw_comes_from_the_marginal_stream():
    a = partial(marginal={"name": "gaussian_blocks", "dependent_dims": 3}, seed=5)
    b = partial(marginal={"name": "gaussian_blocks", "dependent_dims": 3}, seed=5)
    c = partial(marginal={"name": "gaussian_blocks", "dependent_dims": 3}, seed=6)
    assert torch.equal(a.marginal.sigma, b.marginal.sigma) and a.fingerprint() == b.fingerprint()
    assert not torch.equal(a.marginal.sigma, c.marginal.sigma)
    independent = partial(seed=5)
    assert torch.equal(independent.mixing.state_dict()["weight"], a.mixing.state_dict()["weight"])


def test_keep_is_infinite_information_and_changes_no_block():
    process = partial()
    info = process.mutual_information()
    assert math.isinf(info.nats) and info.method == "closed form"
    assert process.conditional.changed_blocks() == []


def test_saved_and_loaded():
    process = partial(marginal={"name": "gaussian_blocks", "dependent_dims": 2}, dtype="float32")
    again = dgp.load_process(process.to_dict())
    assert again.fingerprint() == process.fingerprint()
    g1, g2 = process.make_generator(9), again.make_generator(9)
    assert all(torch.equal(a, b) for a, b in zip(process.sample(16, g1).views, again.sample(16, g2).views))


@pytest.mark.parametrize("changes, message", [
    ({"marginal": {"name": "gaussian_blocks", "sizes": [2, 2]}}, "dgp.marginal.sizes=[2, 2] is invalid: the block "
     "sizes must add up to dgp.dim=6"),
    ({"marginal": {"name": "gaussian_blocks", "sizes": [3, 0, 3]}}, "dgp.marginal.sizes=[3, 0, 3] is invalid"),
    ({"marginal": {"name": "gaussian_blocks", "dependent_dims": 7}}, "dgp.marginal.dependent_dims=7 is invalid: "
     "must lie in 0..6"),
    ({"marginal": {"name": "gaussian_blocks", "dependent_dims": -1}}, "dgp.marginal.dependent_dims=-1 is invalid"),
    ({"space": "sphere", "views": "single"}, "dgp.space.name='sphere' is invalid"),
    ({"views": {"name": "subsets", "latents": [["z0", "z6"], ["z1"]]}}, "view 1 names the block 'z6'"),
    ({"views": {"name": "subsets", "latents": PAPER_VIEWS, "contrast": [[1]]}}, "dgp.views.contrast=[[1]] is "
     "invalid: [1] is not a subset of >= 2 distinct view numbers 1..4"),
    ({"views": {"name": "subsets", "latents": PAPER_VIEWS, "contrast": [[1, 5]]}}, "[1, 5] is not a subset"),
    ({"views": {"name": "subsets", "latents": PAPER_VIEWS, "contrast": [[1, 2], [2, 1]]}}, "[2, 1] is listed twice"),
    ({"views": {"name": "subsets", "latents": [["z0"], ["z1"], ["z0", "z2"]], "contrast": [[1, 2]]}},
     "dgp.views.contrast=[[1, 2]] is invalid: views [1, 2] share no latent block"),
    ({"views": {"name": "subsets", "latents": [["z0"], ["z1"]], "contrast": "all"}}, "no two views share"),
    ({"views": {"name": "subsets", "latents": PAPER_VIEWS, "contrast": "some"}}, "null, all, or a list of subsets"),
    ({"views": {"name": "subsets", "latents": PAPER_VIEWS, "selection": "gumbel"}}, "dgp.views.selection='gumbel' "
     "is invalid: selects the coordinates of contrasted subsets: set contrast too"),
    ({"views": {"name": "subsets", "latents": PAPER_VIEWS, "contrast": "all", "selection": "learned"}},
     "dgp.views.selection='learned' is invalid: allowed: 'ground_truth', 'gumbel', 'concat'"),
])
def test_bad_options_name_the_key(changes, message):
    with pytest.raises(ValueError) as error:
        partial(**changes)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_contrasted_subsets_and_their_shared_blocks():
    """Every subset of >= 2 of the paper's views shares z0 and z1; by size, then in order (the code's powerset)."""
    views = partial(views={"name": "subsets", "latents": PAPER_VIEWS, "contrast": "all"}).views
    assert [s for s, _ in views.contrasted] == [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3), (0, 1, 2), (0, 1, 3),
                                                (0, 2, 3), (1, 2, 3), (0, 1, 2, 3)]
    shared = dict(views.contrasted)
    assert shared[(0, 1)] == [0, 1, 2, 4] and shared[(1, 2, 3)] == [0, 1, 5] and shared[(0, 1, 2, 3)] == [0, 1]
    assert views.selection == "ground_truth"
    listed = partial(views={"name": "subsets", "latents": PAPER_VIEWS, "contrast": [[4, 2], [1, 2, 3, 4]],
                            "selection": "concat"}).views
    assert listed.contrasted == [((1, 3), [0, 1, 4, 5]), ((0, 1, 2, 3), [0, 1])] and listed.selection == "concat"
    plain = partial().views
    assert plain.contrasted is None and plain.selection is None


def test_registered_by_name():
    assert "gaussian_blocks" in MARGINALS.names() and "keep" in CONDITIONALS.names()
