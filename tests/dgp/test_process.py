import re

import pytest
import torch

import dgp
from dgp.process import load_process

SMALL_MLP = {"name": "mlp", "cond_draws": 500}
CONFIGS = {
    "sphere_vmf": {"space": "sphere", "conditional": {"name": "vmf", "kappa": 5.0}, "mixing": SMALL_MLP},
    "box_laplace": {"space": "box", "conditional": "laplace", "mixing": SMALL_MLP},
    "aniso": {"space": "sphere", "conditional": {"name": "anisotropic", "lambdas": "bimodal"}, "mixing": SMALL_MLP},
    "content_style": {
        "space": "euclidean",
        "marginal": {"name": "content_style", "content_dim": 4, "dependence": True, "content_dependent_style": True},
        "conditional": {"name": "content_style", "content_dim": 4, "p_change": 0.75, "dependence": True},
        "mixing": SMALL_MLP,
    },
}


def state_equal(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_same_seed_same_process_and_samples(name):
    a = dgp.build_process(CONFIGS[name], seed=3)
    b = dgp.build_process(CONFIGS[name], seed=3)
    assert state_equal(a, b)
    assert a.fingerprint() == b.fingerprint()
    ba, bb = a.sample(64, a.make_generator(7)), b.sample(64, b.make_generator(7))
    for field in ("z", "z_pos", "x", "x_pos"):
        assert torch.equal(getattr(ba, field), getattr(bb, field))
    assert ba.x.shape == (64, 10) and ba.x.dtype == torch.float32


@pytest.mark.parametrize("name", list(CONFIGS))
def test_different_seed_different_parameters(name):
    a = dgp.build_process(CONFIGS[name], seed=0)
    b = dgp.build_process(CONFIGS[name], seed=1)
    assert a.fingerprint() != b.fingerprint()
    assert not torch.equal(a.mixing(torch.ones(1, 10)), b.mixing(torch.ones(1, 10)))


@pytest.mark.parametrize("name", list(CONFIGS))
def test_parameters_fixed_across_batches(name):
    """Regression: DGP parameters were re-drawn every batch in a reference code."""
    p = dgp.build_process(CONFIGS[name], seed=0)
    before = {k: v.clone() for k, v in p.state_dict().items()}
    fp = p.fingerprint()
    g = p.make_generator(0)
    for _ in range(5):
        p.sample(32, g)
    assert all(torch.equal(before[k], v) for k, v in p.state_dict().items())
    assert p.fingerprint() == fp


def test_state_dict_round_trip_and_load_uses_saved_parameters():
    """Regression: evaluation rebuilt the decoder from the RNG instead of loading the saved one."""
    p = dgp.build_process(CONFIGS["content_style"], seed=0)
    saved = p.to_dict()
    saved["state"] = {k: v.clone() for k, v in saved["state"].items()}
    torch.manual_seed(123)  # the global RNG must not matter
    q = load_process(saved)
    assert state_equal(p, q) and q.fingerprint() == p.fingerprint()
    z = p.sample_latents(16, p.make_generator(0))
    assert torch.equal(p.mix(z), q.mix(z))
    tampered = dict(saved, state={k: v + 1 if v.is_floating_point() else v for k, v in saved["state"].items()})
    with pytest.raises(ValueError, match="fingerprint"):
        load_process(tampered)


@pytest.mark.parametrize("mixing", ["mlp", "linear", "identity"])
def test_loading_a_saved_process_draws_nothing(mixing, monkeypatch):
    """The saved parameters are the process: loading skips the condition-number search (which can take
    minutes for an unlucky seed) and still gives the very same buffers, fingerprint and observations."""
    p = dgp.build_process({"space": "box", "conditional": "laplace", "mixing": {**SMALL_MLP, "name": mixing}}
                          if mixing != "identity" else {"mixing": "identity"}, seed=4)
    saved = p.to_dict()

    def no_search(*args, **kwargs):
        raise AssertionError("load_process searched for well-conditioned layers")

    monkeypatch.setattr("dgp.mixing.condition_threshold", no_search)
    monkeypatch.setattr("dgp.mixing.well_conditioned_matrix", no_search)
    q = load_process(saved)
    assert state_equal(p, q) and q.fingerprint() == p.fingerprint()
    bp, bq = p.sample(32, p.make_generator(1)), q.sample(32, q.make_generator(1))
    assert all(torch.equal(getattr(bp, f), getattr(bq, f)) for f in ("z", "z_pos", "x", "x_pos"))
    assert torch.equal(p.mixing.inverse(bp.x), q.mixing.inverse(bq.x))


def test_float64_and_inverse():
    p = dgp.build_process({"dtype": "float64", "mixing": SMALL_MLP}, seed=0)
    batch = p.sample(128, p.make_generator(0))
    assert batch.x.dtype == torch.float64
    assert torch.allclose(p.mixing.inverse(batch.x), batch.z, atol=1e-9)


def test_negatives_shapes():
    shared = dgp.build_process({"negatives": {"name": "marginal", "num": 5}, "mixing": SMALL_MLP}, seed=0)
    b = shared.sample(8, shared.make_generator(0))
    assert b.z_neg.shape == (5, 10) and b.x_neg.shape == (5, 10)
    assert torch.allclose(b.x_neg, shared.mix(b.z_neg))
    tilted = dgp.build_process({"negatives": {"name": "tilted", "beta": 2.0, "num": 3}, "mixing": SMALL_MLP}, seed=0)
    b = tilted.sample(8, tilted.make_generator(0))
    assert b.z_neg.shape == (8, 3, 10) and b.x_neg.shape == (8, 3, 10)
    assert torch.allclose(b.x_neg, tilted.mix(b.z_neg), atol=1e-6)


def test_blocks_and_lambda_groups():
    aniso = dgp.build_process(CONFIGS["aniso"], seed=0)
    assert aniso.lambda_groups == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
    assert sorted(map(sorted, aniso.blocks.values())) == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
    cs = dgp.build_process(CONFIGS["content_style"], seed=0)
    assert cs.blocks["content"] == [0, 1, 2, 3] and cs.blocks["style"] == list(range(4, 10))
    assert cs.lambda_groups is None


def test_describe_mentions_every_part():
    text = dgp.build_process(CONFIGS["sphere_vmf"], seed=0).describe().lower()
    assert "sphere" in text and ("von mises" in text or "vmf" in text)


@pytest.mark.parametrize(
    "config, key",
    [
        ({"dimension": 3}, "dgp.dimension"),
        ({"conditional": {"name": "vnf"}}, "dgp.conditional.name"),
        ({"space": "sphere", "conditional": {"name": "vmf", "kappa": 0.0}}, "dgp.conditional.kappa"),
        ({"space": "sphere", "conditional": {"name": "vmf", "kapa": 1.0}}, "dgp.conditional"),
        ({"dim": 0}, "dgp.dim"),
        ({"space": "sphere", "dim": 1}, "dgp.dim"),
        ({"space": {"name": "sphere", "radius": -1.0}}, "dgp.space.radius"),
        ({"space": {"name": "box", "low": 1.0, "high": 0.0}}, "dgp.space.low"),
        ({"dtype": "float16"}, "dgp.dtype"),
        ({"space": "sphere", "conditional": {"name": "anisotropic", "lambdas": [1.0, 2.0]}}, "dgp.conditional.lambdas"),
        ({"space": "sphere", "conditional": {"name": "anisotropic", "lambdas": [1.0] * 9 + [0.0]}}, "dgp.conditional.lambdas"),
    ],
)
def test_bad_config_names_the_key(config, key):
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        dgp.build_process({**config, "mixing": "identity"} if "mixing" not in config else config, seed=0)


@pytest.mark.parametrize("call, message", [
    (lambda p: p.sample(-1, p.make_generator(0)), "batch_size=-1 is invalid"),
    (lambda p: p.sample(2.5, p.make_generator(0)), "batch_size=2.5 is invalid: expected an integer"),
    (lambda p: p.sample(8, None), "generator=None is invalid: a torch.Generator"),
    (lambda p: p.sample_latents(0, p.make_generator(0)), "n=0 is invalid"),
    (lambda p: dgp.build_process({"space": 5}), "dgp.space=5 is invalid"),
    (lambda p: dgp.build_process([1, 2]), "dgp=[1, 2] is invalid"),
    (lambda p: dgp.load_process({}), "a saved process is a mapping with keys config, seed, fingerprint, state"),
    (lambda p: dgp.load_process({**p.to_dict(), "state": {"nonsense": torch.zeros(1)}}), "parameters do not fit"),
])
def test_the_python_api_rejects_bad_arguments_clearly(call, message):
    process = dgp.build_process({"mixing": "identity"}, seed=0)
    with pytest.raises(ValueError, match=re.escape(message)):
        call(process)


def test_fingerprints_hash_canonical_numbers():
    as_int = dgp.build_process({"space": "sphere", "conditional": {"name": "vmf", "kappa": 10}, "mixing": SMALL_MLP}, seed=0)
    as_float = dgp.build_process({"space": "sphere", "conditional": {"name": "vmf", "kappa": 10.0}, "mixing": SMALL_MLP}, seed=0)
    assert as_int.fingerprint() == as_float.fingerprint()
    other = dgp.build_process({"space": "sphere", "conditional": {"name": "vmf", "kappa": 10.5}, "mixing": SMALL_MLP}, seed=0)
    assert other.fingerprint() != as_float.fingerprint()


def test_marginal_and_conditional_must_agree_on_the_content_block():
    config = {
        "space": "euclidean", "mixing": "identity",
        "marginal": {"name": "content_style", "content_dim": 3},
        "conditional": {"name": "content_style", "content_dim": 4},
    }
    with pytest.raises(ValueError, match="dgp.conditional.content_dim=4 is invalid: the marginal's content block has 3"):
        dgp.build_process(config)


def test_a_config_s_own_seed_wins_and_leaves_the_config_as_without_it():
    own = dgp.build_process({"seed": 3, "mixing": {"name": "mlp", "cond_draws": 20}}, seed=0)
    given = dgp.build_process({"mixing": {"name": "mlp", "cond_draws": 20}}, seed=3)
    unset = dgp.build_process({"seed": None, "mixing": {"name": "mlp", "cond_draws": 20}}, seed=3)
    assert own.seed == given.seed == unset.seed == 3 and "seed" not in own.config
    assert own.fingerprint() == given.fingerprint() == unset.fingerprint()


@pytest.mark.parametrize("conditional, key, given, marginals", [
    ({"modality_dim": 3}, "modality_dim", 3, 5), ({"modality_dim": 5, "modalities": 3}, "modalities", 3, 2),
    ({}, "modality_dim", 0, 5)])
def test_marginal_and_conditional_must_agree_on_the_modality_blocks_named_by_their_key(conditional, key, given,
                                                                                        marginals):
    config = {"dim": 20, "space": "euclidean", "mixing": "identity",
              "marginal": {"name": "content_style", "content_dim": 5, "modality_dim": 5},
              "conditional": {"name": "content_style", "content_dim": 5, **conditional}}
    with pytest.raises(ValueError, match=rf"^dgp.conditional.{key}={given} is invalid: the marginal's is {marginals} "
                                         rf"\(dgp.marginal.{key}\), and both describe one layout"):
        dgp.check_process(config)
