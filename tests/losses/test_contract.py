"""The loss contract: every attribute the project reads from a loss is declared in one place, checked when the loss
is built, and read nowhere else."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from torch import nn

from identifiable_cl.components import load_config
from identifiable_cl.losses import LOSSES
from identifiable_cl.losses.contract import DECLARED, Traits, traits
from tests.tiny import TINY

ROOT = Path(__file__).resolve().parents[2]
SEGMENTS = {"dgp.space.name": "euclidean", "dgp.marginal.name": "segments", "dgp.conditional.name": "same_segment",
            "dgp.negatives.name": "none"}


class Plain(nn.Module):
    """A plugin loss that declares nothing: every default holds."""

    def forward(self, h, h_pos, h_neg=None):
        return (h - h_pos).pow(2).sum(1).mean()


@pytest.mark.parametrize("name", LOSSES.names())
def test_every_registered_loss_meets_the_contract(name):
    config = load_config(None, {**TINY, "loss.name": name, **(SEGMENTS if LOSSES.get(name).uses_aux else {})})
    loss = LOSSES.build(config["loss"], key="loss", dim=10)
    declared = traits(loss, name)
    assert isinstance(declared, Traits) and (declared.mi_bound is None) == (declared.mi_bound_key is None
                                                                           or declared.mi_bound is None)


def test_a_loss_that_declares_nothing_takes_every_default():
    assert traits(Plain()) == Traits()


@pytest.mark.parametrize("attributes, said", [
    ({"uses_aux": True}, "loss 'Crafted' declares uses_aux (it reads each anchor's segment u), and a loss that does "
                         "must say how many segments it tells apart: segments=None"),
    ({"uses_aux": True, "segments": 1}, "segments=1; expected int >= 2"),
    ({"uses_aux": "yes"}, "loss 'Crafted': uses_aux='yes' is invalid: expected bool"),
    ({"lr": -1.0}, "loss 'Crafted': lr=-1.0 is invalid: expected float > 0 or None"),
    ({"mi_bound": lambda value, batch, separate: (batch, value)},
     "loss 'Crafted' has mi_bound, and mi_bound_key=None is not a bound's metric key: allowed: mi_infonce_bound"),
    ({"logs": {"tau": 1.0}}, "loss 'Crafted': logs={'tau': 1.0} is invalid: expected logs() ->"),
])
def test_a_declaration_the_loss_cannot_keep_is_one_line_naming_it(attributes, said):
    crafted = type("Crafted", (Plain,), attributes)()
    with pytest.raises(ValueError) as raised:
        traits(crafted)
    assert said in str(raised.value) and "\n" not in str(raised.value), str(raised.value)


def test_a_registered_loss_is_checked_when_the_run_is_built():
    """As a plugin that says it reads segments but not how many: refused by the run's check, before any step."""

    class Segmented(Plain):
        uses_aux = True

        def __init__(self, *, dim: int):
            super().__init__()
            self.scale = nn.Parameter(torch.ones(()))

    LOSSES.register("segmented_plugin")(Segmented)
    try:
        with pytest.raises(ValueError, match="loss 'segmented_plugin' declares uses_aux .* segments=None"):
            load_config(None, {**TINY, **SEGMENTS, "loss.name": "segmented_plugin"})
    finally:
        LOSSES._entries.pop("segmented_plugin")


def test_the_project_reads_loss_attributes_only_through_the_contract():
    """No ``getattr(loss, "uses_aux", ...)``-style probing of a declared attribute outside the contract module (a
    loss's own options, such as its similarity, are read as options)."""
    declared = "|".join(DECLARED)
    probes = []
    for path in (ROOT / "identifiable_cl").rglob("*.py"):
        if path.name == "contract.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(rf"(getattr|hasattr)\([\w.]*, [\"'](?:{declared})[\"']", line):
                probes.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert probes == []


def test_the_plugin_guide_lists_every_declared_attribute():
    guide = (ROOT / "docs" / "plugins.md").read_text()
    assert [name for name in DECLARED if f"`{name}`" not in guide] == []
