"""Processes with views: multimodal latents (c, s, m_1, m_2), a mixing per view, sampling checked against an
independent assembly of the views and against the closed forms of the latents' law."""

import numpy as np
import pytest
import torch

import dgp
from dgp.process import resolve_config

MULTIMODAL = {
    "dim": 20,
    "dtype": "float64",
    "space": "euclidean",
    "marginal": {"name": "content_style", "content_dim": 5, "modality_dim": 5},
    "conditional": {"name": "content_style", "content_dim": 5, "modality_dim": 5},
    "mixing": {"name": "mlp", "cond_draws": 200},
    "views": {"name": "subsets", "latents": [["content", "style", "m1"], ["content", "style", "m2"]]},
}
C, S, M1, M2 = slice(0, 5), slice(5, 10), slice(10, 15), slice(15, 20)


def multimodal(**changes):
    config = {**MULTIMODAL, **changes}
    return dgp.build_process(config, seed=changes.pop("seed", 0))


def test_blocks_and_view_sizes():
    process = multimodal()
    assert process.blocks == {"content": list(range(5)), "style": list(range(5, 10)), "m1": list(range(10, 15)),
                              "m2": list(range(15, 20))}
    assert process.view_count == 2 and process.observed_dims == [15, 15]
    assert "2 views, a mixing per view" in process.describe()


def test_views_are_the_mixings_of_the_seen_blocks():
    """x_1 = f_1(c, s, m_1) of the anchor, x_2 = f_2(c, s̃, m_2) of the positive, assembled here by hand."""
    process = multimodal()
    batch = process.sample(64, process.make_generator(1))
    z, z_pos = batch.z, batch.z_pos
    assert torch.equal(batch.views[0], batch.x) and torch.equal(batch.views[1], batch.x_pos)
    torch.testing.assert_close(batch.x, process.mixing(torch.cat([z[:, C], z[:, S], z[:, M1]], 1)), rtol=0, atol=0)
    torch.testing.assert_close(batch.x_pos, process.view_mixings[0](torch.cat([z_pos[:, C], z_pos[:, S], z_pos[:, M2]], 1)),
                               rtol=0, atol=0)
    # the positive keeps content and the modality-specific blocks, and changes every style coordinate (p_change 1)
    assert torch.equal(z_pos[:, C], z[:, C]) and torch.equal(z_pos[:, 10:], z[:, 10:])
    assert (z_pos[:, S] != z[:, S]).all()
    # the mixings are inverted back to the latents each view saw
    back = process.view_mixings[0].inverse(batch.x_pos)
    torch.testing.assert_close(back, torch.cat([z[:, C], z_pos[:, S], z[:, M2]], 1), rtol=0, atol=1e-9)


def test_two_mixings_differ_and_shared_mixing_is_one():
    own = multimodal()
    assert not torch.equal(own.mixing.weight, own.view_mixings[0].weight)
    views = {**MULTIMODAL["views"], "shared_mixing": True}
    shared = multimodal(views=views)
    assert shared.view_mixings[0] is shared.mixing
    # view 1's mixing is drawn from the stream a single view uses, so sharing changes only view 2's
    assert torch.equal(shared.mixing.weight, own.mixing.weight)
    assert shared.fingerprint() != own.fingerprint()


def test_latent_law_matches_the_closed_form_covariance():
    """z = (c, s, m_1, m_2) under Wishart dependence and content-dependent style: sample covariance against
    the marginal's closed form [[Σ_c, Σ_c Bᵀ, 0], [B Σ_c, Σ_s + B Σ_c Bᵀ, 0], [0, 0, diag(Σ_m1, Σ_m2)]]."""
    marginal = {**MULTIMODAL["marginal"], "dependence": True, "content_dependent_style": True}
    process = multimodal(marginal=marginal)
    cov = process.marginal.covariance().numpy()
    assert np.allclose(cov[10:15, 10:15], process.marginal.sigma_m1.numpy())
    assert np.allclose(cov[:10, 10:], 0.0) and np.allclose(cov[10:15, 15:], 0.0)
    z = torch.cat([process.sample_latents(20000, process.make_generator(s)) for s in range(5)]).numpy()
    chol_inv = np.linalg.inv(np.linalg.cholesky(cov))
    white = chol_inv @ np.cov(z.T) @ chol_inv.T
    assert np.abs(white - np.eye(20)).max() < 0.05  # 5σ of a 100,000-sample covariance entry is about 0.016·√2
    assert np.abs(z.mean(0) - np.concatenate([np.zeros(5), process.marginal.style_offset.numpy(), np.zeros(10)])).max() < 0.1


def test_style_change_is_standard_normal_with_rate_p_change():
    conditional = {**MULTIMODAL["conditional"], "p_change": 0.75}
    process = multimodal(conditional=conditional)
    z = process.sample_latents(20000, process.make_generator(3))
    step = (process.conditional.sample(z, process.make_generator(4)) - z)[:, S].numpy()
    changed = step != 0
    assert abs(changed.mean() - 0.75) < 5 * np.sqrt(0.75 * 0.25 / changed.size)
    moved = step[changed]
    assert abs(moved.mean()) < 5 / np.sqrt(moved.size) and abs(moved.var() - 1.0) < 5 * np.sqrt(2 / moved.size)


def test_negatives_are_seen_by_every_view():
    """View v of a negative z⁻ observes its own positive of z⁻: view 2 of the negatives inverts to (c⁻, s̃⁻, m⁻_2)."""
    process = multimodal(negatives={"name": "marginal", "num": 40})
    batch = process.sample(8, process.make_generator(5))
    assert [tuple(v.shape) for v in batch.views_neg] == [(40, 15), (40, 15)]
    assert torch.equal(batch.views_neg[0], batch.x_neg)
    torch.testing.assert_close(batch.x_neg, process.mixing(torch.cat([batch.z_neg[:, :10], batch.z_neg[:, M1]], 1)),
                               rtol=0, atol=0)
    seen = process.view_mixings[0].inverse(batch.views_neg[1])
    torch.testing.assert_close(seen[:, :5], batch.z_neg[:, C], rtol=0, atol=1e-9)
    torch.testing.assert_close(seen[:, 10:], batch.z_neg[:, M2], rtol=0, atol=1e-9)
    assert (seen[:, 5:10] - batch.z_neg[:, S]).abs().min() > 0


def test_saved_and_loaded_with_every_mixing():
    process = multimodal()
    again = dgp.load_process(process.to_dict())
    assert again.fingerprint() == process.fingerprint()
    g1, g2 = process.make_generator(9), again.make_generator(9)
    assert all(torch.equal(a, b) for a, b in zip(process.sample(16, g1).views, again.sample(16, g2).views))


def test_single_view_configs_are_unchanged():
    """``views: single`` is the default and leaves the resolved config (so the fingerprint) as it was; the
    modality-specific options at 0 draw nothing, so the content-style process is the same, draw for draw."""
    plain = {"dim": 10, "space": "euclidean", "marginal": {"name": "content_style", "dependence": True,
             "content_dependent_style": True}, "conditional": {"name": "content_style", "dependence": True},
             "mixing": {"name": "mlp", "cond_draws": 200}}
    assert "views" not in resolve_config(plain)
    assert resolve_config({**plain, "views": "single"}) == resolve_config(plain)
    a = dgp.build_process(plain, seed=2)
    b = dgp.build_process({**plain, "views": {"name": "single"},
                           "marginal": {**plain["marginal"], "modality_dim": 0, "modalities": 3},
                           "conditional": {**plain["conditional"], "modality_dim": 0}}, seed=2)
    assert a.state_dict().keys() == b.state_dict().keys()
    assert all(torch.equal(a.state_dict()[k], b.state_dict()[k]) for k in a.state_dict())
    ba, bb = a.sample(32, a.make_generator(1)), b.sample(32, b.make_generator(1))
    assert torch.equal(ba.x, bb.x) and torch.equal(ba.x_pos, bb.x_pos) and ba.views is None
    assert a.view_count == 1 and a.observed_dims == [10] and not list(a.view_mixings)


@pytest.mark.parametrize("views, key, message", [
    ({"name": "subsets", "latents": [["content", "style"]]}, "dgp.views.latents", "at least 2 views"),
    ({"name": "subsets", "latents": [["content", "colour"], ["content"]]}, "dgp.views.latents", "'colour'"),
    ({"name": "subsets", "latents": [["content", "content"], ["style"]]}, "dgp.views.latents", "twice"),
    ({"name": "subsets", "latents": [["content"], ["content", "style"]], "shared_mixing": True},
     "dgp.views.shared_mixing", "5, 10 dimensions"),
    ({"name": "subsets", "latents": [["content"], ["style"]], "shared_mixing": "yes"}, "dgp.views.shared_mixing", ""),
    ({"name": "prism"}, "dgp.views.name", "unknown name 'prism'"),
])
def test_bad_views_name_the_key(views, key, message):
    with pytest.raises(ValueError, match=key) as error:
        multimodal(views=views)
    assert message in str(error.value)


def test_views_need_named_blocks():
    with pytest.raises(ValueError, match="dgp.views.latents.*name none"):
        dgp.build_process({"views": {"name": "subsets", "latents": [["a"], ["b"]]}})


@pytest.mark.parametrize("options, message", [
    ({"modality_dim": -1}, "dgp.marginal.modality_dim=-1"),
    ({"modality_dim": 10}, "leave fewer than 2"),
    ({"modalities": 0, "modality_dim": 2}, "dgp.marginal.modalities=0"),
    ({"content_dim": 10, "modality_dim": 5}, "must lie in 1..9 (10 content and style dimensions)"),
])
def test_bad_modality_options(options, message):
    with pytest.raises(ValueError) as error:
        multimodal(marginal={"name": "content_style", **options}, conditional="content_style", views="single")
    assert message in str(error.value)


def test_conditional_and_marginal_must_agree_on_modality_blocks():
    with pytest.raises(ValueError, match=r"dgp.conditional.modality_dim=0 is invalid: the marginal's is \d+ "
                                         r"\(dgp.marginal.modality_dim\)"):
        multimodal(conditional={"name": "content_style", "content_dim": 5})
