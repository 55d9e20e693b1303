"""The components' contracts: each kind's base class declares what the project reads of it, its registry checks
a component once built (one line naming the component and the attribute), and the check of a process refuses
draws outside the space."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import dgp
from dgp.base import (CONDITIONAL_CONTRACT, MARGINAL_CONTRACT, MIXING_CONTRACT, NEGATIVES_CONTRACT, SPACE_CONTRACT,
                      VIEWS_CONTRACT, Conditional, Marginal, Mixing, Negatives, Space, Views)
from dgp.conditionals import CONDITIONALS
from dgp.marginals import MARGINALS
from dgp.mixing import MIXINGS
from dgp.negatives import NEGATIVES
from dgp.spaces import SPACES
from dgp.views import VIEWS
from identifiable_cl.encoders import ENCODER_CONTRACT, ENCODERS, Encoder

ROOT = Path(__file__).resolve().parents[2]


def box(dim: int = 3):
    return SPACES.build("box", dim, torch.Generator().manual_seed(0), key="dgp.space")


class FullSpace(Space):
    def __init__(self, dim, rng=None):
        torch.nn.Module.__init__(self)
        self.dim = dim

    def contains(self, z, atol=1e-5):
        return torch.isfinite(z).all(-1)

    def project(self, z):
        return z

    def describe(self):
        return "R^n"


class FullMarginal(Marginal):
    def __init__(self, space, rng=None):
        torch.nn.Module.__init__(self)
        self.space = space

    def sample(self, batch, generator):
        return torch.rand(batch, self.space.dim, generator=generator)

    def describe(self):
        return "uniform"


class FullConditional(Conditional):
    def __init__(self, space, rng=None):
        torch.nn.Module.__init__(self)
        self.space = space

    def sample(self, z, generator):
        return z

    def describe(self):
        return "the anchor itself"


class FullNegatives(Negatives):
    def __init__(self, space, rng=None):
        torch.nn.Module.__init__(self)

    def sample(self, z, marginal, generator):
        return None

    def describe(self):
        return "none"


class FullMixing(Mixing):
    def __init__(self, dim, rng=None):
        torch.nn.Module.__init__(self)

    def forward(self, z):
        return z

    def inverse(self, x):
        return x

    def describe(self):
        return "identity"


class FullViews(Views):
    def __init__(self, blocks, dim):
        torch.nn.Module.__init__(self)
        self.dims = [list(range(dim))]

    def describe(self):
        return "one view"


class FullEncoder(Encoder):
    def __init__(self, *, input_dim, latent_dim):
        torch.nn.Module.__init__(self)
        self.output_dim = latent_dim
        self.linear = torch.nn.Linear(input_dim, latent_dim)

    def forward(self, x):
        return self.linear(x)


KINDS = {  # registry, contract, a complete component, how a build calls it
    "space": (SPACES, SPACE_CONTRACT, FullSpace, lambda: (3, None)),
    "marginal": (MARGINALS, MARGINAL_CONTRACT, FullMarginal, lambda: (box(), None)),
    "conditional": (CONDITIONALS, CONDITIONAL_CONTRACT, FullConditional, lambda: (box(), None)),
    "negatives": (NEGATIVES, NEGATIVES_CONTRACT, FullNegatives, lambda: (box(), None)),
    "mixing": (MIXINGS, MIXING_CONTRACT, FullMixing, lambda: (3, None)),
    "views": (VIEWS, VIEWS_CONTRACT, FullViews, lambda: ({}, 3)),
}


def build(kind: str, cls: type):
    registry, _, _, args = KINDS[kind] if kind != "encoder" else (ENCODERS, None, None, None)
    registry.register("contract_plugin")(cls)
    try:
        if kind == "encoder":
            return ENCODERS.build({"name": "contract_plugin"}, key="encoder", input_dim=3, latent_dim=2)
        return registry.build({"name": "contract_plugin"}, *args(), key=f"dgp.{kind}")
    finally:
        registry._entries.pop("contract_plugin")


@pytest.mark.parametrize("kind", [*KINDS, "encoder"])
def test_a_component_that_defines_only_what_it_must_takes_every_default(kind):
    cls = FullEncoder if kind == "encoder" else KINDS[kind][2]
    built = build(kind, cls)
    assert isinstance(built, cls)


def test_the_defaults_are_the_base_classes_and_read_as_plain_attributes():
    conditional = build("conditional", FullConditional)
    assert (conditional.keeps_segment, conditional.log_density, conditional.changed_blocks(), conditional.blocks(),
            conditional.lambda_true()) == (False, None, [], {}, None)
    assert "no normalised log-density" in conditional.mutual_information(build("marginal", FullMarginal)).note
    marginal = build("marginal", FullMarginal)
    assert (marginal.segments, marginal.tilt_limit, marginal.sample_tilted, marginal.blocks()) == (None, None, None, {})
    assert build("views", FullViews).contrasted is None and build("encoder", FullEncoder).unit_norm is False


REQUIRED = [(kind, method) for kind, (_, contract, _, _) in KINDS.items() for method in contract.required] + [
    ("encoder", method) for method in ENCODER_CONTRACT.required]


@pytest.mark.parametrize("kind, method", REQUIRED)
def test_a_component_lacking_a_method_it_must_define_is_refused_in_one_line(kind, method):
    full = FullEncoder if kind == "encoder" else KINDS[kind][2]
    lacking = type(f"Lacking_{method}", (full.__bases__[0],), {k: v for k, v in vars(full).items() if k != method})
    with pytest.raises(ValueError) as raised:
        build(kind, lacking)
    said = str(raised.value)
    assert re.match(rf"{kind} 'contract_plugin' \(.*Lacking_{method}\) does not define {method}\(", said), said
    assert "\n" not in said


@pytest.mark.parametrize("kind", [*KINDS, "encoder"])
def test_a_component_that_does_not_derive_from_its_base_is_refused(kind):
    full = FullEncoder if kind == "encoder" else KINDS[kind][2]
    plain = type("Plain", (torch.nn.Module,), {k: v for k, v in vars(full).items() if not k.startswith("__")}
                 | {"__init__": lambda self, *a, **k: torch.nn.Module.__init__(self)})
    with pytest.raises(ValueError, match=rf"^{kind} 'contract_plugin' \(.*Plain\) does not derive from "
                                         rf"(dgp\.base|identifiable_cl\.encoders)\.\w+, the base class that declares"):
        build(kind, plain)


@pytest.mark.parametrize("kind, attributes, said", [
    ("conditional", {"keeps_segment": "yes"}, "keeps_segment='yes' is invalid: expected bool"),
    ("conditional", {"blocks": {"content": [0]}}, "blocks={'content': [0]} is invalid: expected blocks() ->"),
    ("conditional", {"log_density": 1.0}, "log_density=1.0 is invalid: expected None or log_density(z_pos, z)"),
    ("marginal", {"segments": 1}, "segments=1 is invalid: expected None or an int >= 2"),
    ("marginal", {"tilt_limit": 2.0}, "tilt_limit=2.0 is invalid: expected None or tilt_limit() -> float"),
    ("space", {"dim": 0}, "dim=0 is invalid: expected int >= 1"),
    ("views", {"shared_mixing": 1}, "shared_mixing=1 is invalid: expected bool"),
    ("views", {"contrasted": [[0, 1]]}, "contrasted=[[0, 1]] is invalid: expected None or a list of (views"),
    ("encoder", {"unit_norm": 1}, "unit_norm=1 is invalid: expected bool"),
])
def test_an_attribute_the_component_cannot_hold_is_refused_naming_it(kind, attributes, said):
    full = FullEncoder if kind == "encoder" else KINDS[kind][2]
    if kind == "space":  # set in the constructor
        crafted = type("Crafted", (full,), {"__init__": lambda self, dim, rng=None: (Space.__init__(self),
                                                                                        setattr(self, "dim", 0))[0]})
    else:
        crafted = type("Crafted", (full,), attributes)
    with pytest.raises(ValueError) as raised:
        build(kind, crafted)
    assert str(raised.value).startswith(f"{kind} 'contract_plugin' (") and said in str(raised.value), str(raised.value)


class StudentT(Marginal):
    """Heavy-tailed draws that leave the box."""

    def __init__(self, space, rng=None):
        torch.nn.Module.__init__(self)
        self.space = space

    def sample(self, batch, generator):
        return torch.distributions.StudentT(2.0).sample((batch, self.space.dim)) * 3

    def describe(self):
        return "Student-t"


class OffSphere(FullConditional):
    """Positives scaled off the unit sphere."""

    def sample(self, z, generator):
        return 1.5 * z


@pytest.mark.parametrize("key, cls, space, said", [
    ("marginal", StudentT, "box", "dgp.marginal.name='leaving_plugin' is invalid: "),
    ("conditional", OffSphere, "sphere", "dgp.conditional.name='leaving_plugin' is invalid: 256 of 256 of its "
                                         "positives lie outside the space, "),
])
def test_draws_outside_the_space_are_refused_by_the_check(key, cls, space, said):
    registry = MARGINALS if key == "marginal" else CONDITIONALS
    registry.register("leaving_plugin")(cls)
    try:
        with pytest.raises(ValueError) as raised:
            dgp.check_process({"space": space, key: "leaving_plugin"})
    finally:
        registry._entries.pop("leaving_plugin")
    message = str(raised.value)
    assert message.startswith(said) and f"a {key} must draw points of the space it is given" in message, message
    assert "\n" not in message


DECLARED = sorted({name for contract in [c for _, c, _, _ in KINDS.values()] + [ENCODER_CONTRACT]
                   for name in [*contract.required, *contract.attributes]} - {"forward", "sample", "describe"})


def test_the_project_reads_declared_attributes_as_plain_attributes():
    """No ``getattr(x, "keeps_segment", ...)`` or ``hasattr(x, "log_density")`` probing of a declared attribute:
    the base classes hold every default."""
    probes = re.compile(r"(getattr|hasattr)\([^,]+,\s*[\"'](" + "|".join(DECLARED) + r")[\"']")
    found = [f"{path.relative_to(ROOT)}:{i}" for folder in ("identifiable_cl", "dgp") for path in (ROOT / folder).rglob("*.py")
             for i, line in enumerate(path.read_text().splitlines(), 1) if probes.search(line)]
    assert found == []
