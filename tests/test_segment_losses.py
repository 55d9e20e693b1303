"""The losses that read each anchor's segment (``tcl``, ``gcl``) in a run: what the check refuses, the segments they
take from the process, and a stacked pack that steps them as each run steps alone."""

from types import SimpleNamespace

import pytest
import torch

from identifiable_cl.components import build, load_config
from identifiable_cl.rules import check_aux
from identifiable_cl.losses import LOSSES
from identifiable_cl.solvers.packed import StackedPack
from tests.tiny import TINY, tiny_config

SEGMENTS = {"dgp.space.name": "euclidean", "dgp.marginal.name": "segments", "dgp.conditional.name": "same_segment"}
NAMES = ("tcl", "gcl")


@pytest.mark.parametrize("name", NAMES)
def test_a_process_without_segments_is_refused_naming_the_loss_and_the_marginal(name):
    with pytest.raises(ValueError, match=rf"^loss\.name='{name}' is invalid: it reads each anchor's segment u, and "
                                         r"dgp\.marginal\.name='uniform' draws none") as raised:
        load_config(None, {**TINY, "loss.name": name})
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("name", NAMES)
def test_the_loss_takes_the_marginals_segments_and_refuses_others(name):
    config = load_config(None, {**TINY, **SEGMENTS, "dgp.marginal.segments": 7, "loss.name": name})
    assert config["loss"]["segments"] == 7
    assert load_config(None, {**TINY, **SEGMENTS, "loss.name": name})["loss"].get("segments") is None
    with pytest.raises(ValueError, match=r"^loss\.segments=5 is invalid: the process draws 7 segments "
                                         r"\(dgp\.marginal\.segments\)"):
        load_config(None, {**TINY, **SEGMENTS, "dgp.marginal.segments": 7, "loss.name": name, "loss.segments": 5})


@pytest.mark.parametrize("name", NAMES)
def test_positives_that_leave_the_segment_are_refused(name):
    with pytest.raises(ValueError, match=r"^dgp\.conditional\.name='laplace' is invalid: loss '\w+' reads each "
                                         "positive as an observation of its anchor's segment"):
        load_config(None, {**TINY, **SEGMENTS, "dgp.conditional.name": "laplace", "loss.name": name})


def test_views_are_refused_for_a_loss_that_reads_segments():
    """A plugin's marginal with segments and named blocks could have views: each view's pairing carries no u."""
    config = load_config(None, {**TINY, **SEGMENTS, "loss.name": "tcl"})
    process = build(config).process
    viewed = SimpleNamespace(marginal=process.marginal, conditional=process.conditional, view_count=2)
    with pytest.raises(ValueError, match=r"^loss\.name='tcl' is invalid: .*a process with 2 views \(dgp\.views\)"):
        check_aux(config, viewed, LOSSES.build({"name": "tcl"}, key="loss", dim=10))


def test_an_ensemble_member_that_reads_segments_is_refused_by_its_key():
    with pytest.raises(ValueError, match=r"^loss\.members\[0\]\.name='tcl' is invalid: it reads each anchor's segment "
                                         "u, and none was given"):
        load_config(None, {**TINY, **SEGMENTS, "loss.name": "ensemble", "loss.members": [{"name": "tcl"}]})


@pytest.mark.parametrize("name", NAMES)
def test_a_stacked_pack_steps_each_run_as_alone(name):
    configs = [tiny_config(**{**SEGMENTS, "loss.name": name, "dgp.dtype": "float64", "seed": seed,
                              "optim.lr": lr}) for seed, lr in ((0, 1e-3), (1, 3e-3))]
    alone = [build(c) for c in configs]
    pack = StackedPack([build(c) for c in configs])
    for _ in range(4):
        together = pack.step()
        for c, value in zip(alone, together):
            torch.testing.assert_close(value, c.step(), rtol=1e-10, atol=0)
    pack.release()
    for c, p in zip(alone, pack.solvers):
        for mine, theirs in zip(c.loss.parameters(), p.loss.parameters()):
            torch.testing.assert_close(mine, theirs, rtol=1e-9, atol=1e-12)
            assert mine.grad is not None


def test_a_plugin_loss_that_reads_segments_without_saying_how_many_is_refused_in_one_line():
    """A loss declaring uses_aux must carry its number of segments (an int); without one the check says so, instead
    of an AttributeError from inside the check."""
    config = tiny_config(**SEGMENTS)
    process = build(config).process
    reader = SimpleNamespace(uses_aux=True)
    for segments in (None, "20", True):
        if segments is not None:
            reader.segments = segments
        with pytest.raises(ValueError, match=r"^loss 'infonce' declares uses_aux .* must say how many segments it "
                                             r"tells apart: segments="):
            check_aux(config, process, reader)
