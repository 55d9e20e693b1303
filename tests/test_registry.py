import sys
import textwrap

import pytest
import torch

from dgp.registry import Registry, accepts_var_kwargs, user_options


def test_register_get_and_origin():
    reg = Registry("widgets_test")

    @reg.register("a")
    class A:
        def __init__(self, *, size: int = 1):
            self.size = size

    assert reg.get("a") is A
    assert reg.names() == ["a"]
    assert "test_registry" in reg.entry("a").origin
    assert reg.build({"name": "a", "size": 3}, key="w").size == 3


def test_unknown_name_lists_available():
    reg = Registry("gadgets_test")
    reg.register("alpha")(type("Alpha", (), {}))
    reg.register("beta")(type("Beta", (), {}))
    with pytest.raises(ValueError, match=r"thing.name: unknown .*'gamma'.*alpha, beta"):
        reg.get("gamma", "thing.name")


def test_unknown_option_names_the_key_and_allowed():
    reg = Registry("things_test")

    @reg.register("t")
    class T:
        def __init__(self, *, kappa: float = 1.0):
            pass

    with pytest.raises(ValueError, match=r"dgp\.conditional\.kapa: unknown option\(s\) for .*allowed: kappa"):
        reg.build({"name": "t", "kapa": 2}, key="dgp.conditional")


def test_a_required_option_left_out_is_named_with_its_description():
    reg = Registry("required_test")

    @reg.register("r")
    class R:
        OPTION_DOCS = {"parts": "list of the parts it joins"}

        def __init__(self, *, dim: int, parts: list, weight: float = 1.0):
            self.parts = parts

    with pytest.raises(ValueError, match=r"^loss\.parts: required by required_test 'r' and not given; "
                                         r"parts: list of the parts it joins$"):
        reg.build({"name": "r"}, key="loss", dim=3)
    assert reg.build({"name": "r", "parts": [1]}, key="loss", dim=3).parts == [1]


def test_name_clash_is_an_error():
    reg = Registry("clash_test")
    reg.register("x")(type("X1", (), {}))
    with pytest.raises(ValueError, match="already registered"):
        reg.register("x")(type("X2", (), {}))


def test_entry_point_from_separate_distribution(tmp_path, monkeypatch):
    """A component declared by another distribution's entry point is found by name."""
    pkg = tmp_path / "icl_test_plugin"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        textwrap.dedent(
            """
            import torch
            from dgp.base import Conditional

            class Jitter(Conditional):
                def __init__(self, space, rng, *, scale: float = 0.1):
                    super().__init__()
                    self.space, self.scale = space, scale

                def sample(self, z, generator):
                    return z + self.scale * torch.randn(z.shape, generator=generator, dtype=z.dtype)

                def describe(self):
                    return "jitter"
            """
        )
    )
    info = tmp_path / "icl_test_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: icl-test-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[identifiable_cl.conditionals]\njitter = icl_test_plugin:Jitter\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import dgp

    dgp.CONDITIONALS.load_entry_points(force=True)
    try:
        entry = dgp.CONDITIONALS.entry("jitter")
        assert "icl-test-plugin 0.1" in entry.origin
        process = dgp.build_process(
            {"space": "euclidean", "marginal": "normal", "conditional": {"name": "jitter", "scale": 0.5}, "mixing": "identity"}, seed=0
        )
        batch = process.sample(8, process.make_generator(0))
        assert batch.z_pos.shape == (8, 10)
    finally:
        dgp.CONDITIONALS._entries.pop("jitter", None)
        sys.modules.pop("icl_test_plugin", None)


def test_options_are_collected_along_the_class_hierarchy():
    from identifiable_cl.losses import LOSSES
    from identifiable_cl.losses.hard_negative import HardNegativeInfoNCE
    from identifiable_cl.losses.infonce import InfoNCE

    assert set(user_options(InfoNCE)) < set(user_options(HardNegativeInfoNCE))
    assert set(user_options(HardNegativeInfoNCE)) - set(user_options(InfoNCE)) == {"beta", "tau_plus"}
    assert not accepts_var_kwargs(HardNegativeInfoNCE)
    with pytest.raises(ValueError, match=r"loss\.bta: unknown option.*allowed: beta, tau_plus, similarity, tau, learn_tau"):
        LOSSES.build({"name": "hard_negative", "bta": 1.0}, key="loss", dim=3)
    loss = LOSSES.build({"name": "hard_negative", "beta": 0.5, "tau": 0.2}, key="loss", dim=3)
    assert loss.beta == 0.5 and float(loss.temperature.value()) == pytest.approx(0.2)


def test_a_function_with_var_keywords_accepts_any_option():
    def make(*, dim, **options):
        return options

    assert user_options(make) == ["dim"] and accepts_var_kwargs(make)


def test_a_component_names_its_options_bare_and_the_registry_keys_them_in_full():
    from dgp import checks

    reg = Registry("keyed_test", "dgp.thing")

    @reg.register("outer")
    class Outer:
        def __init__(self, *, scale: float = 1.0, inner: dict | None = None, dim: int = 2):
            checks.positive("scale", scale)
            checks.integer("dgp.dim", dim, minimum=2)  # another section's key stays as written
            if inner is not None:
                reg.build(inner, key="inner")

    @reg.register("make")
    def make(*, p: float = 1.0):
        return checks.probability("p", p)

    cases = [
        (lambda: Outer(scale=0), r"^dgp\.thing\.scale=0 is invalid: must be > 0$"),
        (lambda: reg.build({"name": "outer", "scale": -1}, key="view"), r"^view\.scale=-1 is invalid"),
        (lambda: Outer(dim=1), r"^dgp\.dim=1 is invalid"),
        (lambda: Outer(inner={"name": "outer", "scale": 0}), r"^dgp\.thing\.inner\.scale=0 is invalid"),
        (lambda: Outer(inner={"name": "nope"}), r"^dgp\.thing\.inner\.name: unknown name 'nope'"),
        (lambda: Outer(inner={"name": "make", "p": 2}), r"^dgp\.thing\.inner\.p=2 is invalid: must lie in \[0, 1\]$"),
        (lambda: reg.build({"name": "make", "p": 2}, key="x"), r"^x\.p=2 is invalid"),
    ]
    for construct, message in cases:
        with pytest.raises(checks.OptionError, match=message):
            construct()
    assert reg.build({"name": "make", "p": 0.5}, key="x") == 0.5
    assert reg.get("make").__wrapped__ is not None and reg.get("outer") is Outer


def test_a_loss_knows_the_config_key_it_was_built_under():
    from identifiable_cl.losses import LOSSES

    ensemble = LOSSES.build({"name": "ensemble", "members": [{"name": "infonce"}, {"name": "infonce"}]}, key="loss", dim=3)
    assert ensemble.config_key == "loss"
    assert [m.config_key for m in ensemble.members] == ["loss.members[0]", "loss.members[1]"]
    with pytest.raises(ValueError, match=r"^loss\.members\[0\]\.negatives='symmetric' draws negatives from the batch"):
        ensemble(*torch.randn(2, 1, 3))
