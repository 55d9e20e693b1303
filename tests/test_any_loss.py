"""Any registered loss, plugins included, swapped into the default config or a preset with ``--loss.name=NAME``
trains: the encoder's normalisation follows what the loss needs (``encoder.normalize: auto``) and a process
that draws separate negatives hands them to a loss that takes them."""

import pytest
import yaml

from identifiable_cl.cli import main
from identifiable_cl.components import load_config
from identifiable_cl.rules import with_cross_defaults
from identifiable_cl.config import preset_names
from identifiable_cl.losses import LOSSES
from tests.tiny import TINY, tiny_args

SMALL = {k: v for k, v in TINY.items() if not k.startswith("eval.") or k == "eval.nonlinear"}
"""The tiny preset's sizes that a preset's own settings (its encoder, batch, evaluation) give way to."""


SEGMENTS = {"dgp.space.name": "euclidean", "dgp.marginal.name": "segments", "dgp.conditional.name": "same_segment"}
"""The process a loss that reads each anchor's segment (its ``uses_aux``) is swapped into instead of the default's."""


def loss_names(aux: bool | None = None) -> list[str]:
    """The registered losses; with ``aux`` given, those that read the anchors' segments (True) or not (False)."""
    LOSSES.load_entry_points()
    return [n for n in LOSSES.names() if aux is None or getattr(LOSSES.get(n), "uses_aux", False) == aux]


@pytest.mark.parametrize("name", loss_names())
def test_every_loss_trains_from_the_default_config(name, tmp_path, capsys):
    process = SEGMENTS if name in loss_names(aux=True) else {}
    assert main(["train", f"--loss.name={name}", *tiny_args(**{"train.steps": 2, **process}), "--quiet",
                 "--run-dir", str(tmp_path / "run")]) == 0, capsys.readouterr().err
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert saved["loss"]["name"] == name and saved["encoder"]["normalize"] in ("none", "sphere")


@pytest.mark.parametrize("preset", preset_names())
@pytest.mark.parametrize("name", loss_names(aux=False))
def test_every_loss_is_accepted_on_every_preset(name, preset):
    config = load_config(preset, {**SMALL, "loss.name": name})
    assert config["loss"]["name"] == name


@pytest.mark.parametrize("preset", preset_names())
@pytest.mark.parametrize("name", loss_names(aux=True))
def test_a_loss_that_reads_segments_is_refused_on_a_preset_whose_process_draws_none(name, preset):
    """Refused in one line by a key of the loss or the process (the first rule broken: the segments, or separate
    negatives it does not use)."""
    with pytest.raises(ValueError, match=r"^(loss|dgp)\.[a-z.]+=\S+ is invalid: ") as raised:
        load_config(preset, {**SMALL, "loss.name": name})
    assert f"'{name}'" in str(raised.value) and "\n" not in str(raised.value)


@pytest.mark.slow
@pytest.mark.parametrize("preset", preset_names())
@pytest.mark.parametrize("name", loss_names(aux=False))
def test_every_loss_trains_on_every_preset(name, preset, tmp_path, capsys):
    args = [f"--{k}={v}".replace(" ", "") for k, v in {**SMALL, "train.steps": 2}.items()]
    assert main(["train", preset, f"--loss.name={name}", *args, "--quiet", "--run-dir", str(tmp_path / "run")]) == 0, (
        capsys.readouterr().err)


@pytest.mark.parametrize("loss,normalize", [("infonce", "none"), ("nce", "sphere"), ("aninfonce", "sphere"),
                                            ("margin", "none"), ("triplet", "sphere")])
def test_auto_normalisation_follows_the_loss(loss, normalize):
    assert load_config(None, {**TINY, "loss.name": loss})["encoder"]["normalize"] == normalize


def test_auto_normalisation_follows_the_options_and_an_ensembles_members():
    cosine = load_config(None, {**TINY, "loss.similarity": "cosine"})
    assert cosine["encoder"]["normalize"] == "sphere"
    raw = load_config(None, {**TINY, "loss.name": "triplet", "loss.normalize": False})
    assert raw["encoder"]["normalize"] == "none"
    headed = load_config(None, {**TINY, "loss.name": "ensemble",
                                "loss.members": [{"name": "nce", "head": [8, 4]}, {"name": "infonce", "similarity": "l2"}]})
    assert headed["encoder"]["normalize"] == "none"  # a member on its own head normalises nothing the encoder gives


def test_a_given_normalisation_is_kept_and_checked():
    assert load_config(None, {**TINY, "encoder.normalize": "sphere"})["encoder"]["normalize"] == "sphere"
    with pytest.raises(ValueError, match="encoder.normalize='none' is invalid: loss 'nce' compares unit vectors"):
        load_config(None, {**TINY, "loss.name": "nce", "encoder.normalize": "none"})


def test_auto_normalisation_draws_the_same_encoder_as_the_value_it_resolves_to():
    import torch

    from identifiable_cl.components import build

    auto = build(load_config(None, {**TINY, "loss.name": "nce"}))
    given = build(load_config(None, {**TINY, "loss.name": "nce", "encoder.normalize": "sphere"}))
    assert auto.config == given.config
    for (k, a), (_, b) in zip(auto.encoder.state_dict().items(), given.encoder.state_dict().items()):
        assert torch.equal(a, b), k


def test_separate_negatives_reach_a_swapped_loss_that_takes_them():
    config = load_config("content_style", {**SMALL, "loss.name": "margin"})
    assert config["loss"] == {"name": "margin", "negatives": "independent"}
    ensemble = load_config("content_style", {**SMALL, "loss.name": "ensemble"})
    assert [m["negatives"] for m in ensemble["loss"]["members"]] == ["independent", "independent"]
    given = load_config("content_style", {**SMALL, "loss.name": "margin", "loss.negatives": "independent"})
    assert given["loss"] == config["loss"]
    with pytest.raises(ValueError, match="dgp.negatives.name='marginal' is invalid: loss 'margin' does not use"):
        load_config("content_style", {**SMALL, "loss.name": "margin", "loss.negatives": "symmetric"})


def test_without_separate_negatives_nothing_is_filled_in():
    config = load_config(None, TINY)
    assert with_cross_defaults(config) == config and "negatives" not in config["loss"]


def test_an_ensemble_that_already_uses_the_separate_negatives_is_left_as_it_is():
    members = [{"name": "infonce", "negatives": "independent"}, {"name": "aninfonce"}]
    config = load_config("content_style", {**SMALL, "loss.name": "ensemble", "loss.members": members})
    assert config["loss"]["members"] == members
