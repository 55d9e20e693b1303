import pytest

from identifiable_cl.config import DEFAULTS, parse_overrides
from identifiable_cl.components import load_config


def test_defaults_validate():
    config = load_config()
    assert config["loss"]["name"] == DEFAULTS["loss"]["name"]


def test_overrides_parse_like_a_sweep_agent():
    assert parse_overrides(["--optim.lr=1e-05", "--optim.loss_lr=1E3"]) == {"optim.lr": 1e-05, "optim.loss_lr": 1000.0}
    out = parse_overrides(["--loss.tau=0.1", "--eval.nonlinear=False", "--wandb.tags=[a, b]", "--wandb.name=two words"])
    assert out == {"loss.tau": 0.1, "eval.nonlinear": False, "wandb.tags": ["a", "b"], "wandb.name": "two words"}


def test_yaml_then_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("seed: 4\ntrain:\n  steps: 7\ndgp:\n  space: sphere\n  conditional: {name: vmf, kappa: 3.0}\n")
    config = load_config(path, ["--train.steps=9", "--dgp.conditional.kappa=5"])
    assert config["seed"] == 4 and config["train"]["steps"] == 9
    assert config["dgp"]["conditional"] == {"name": "vmf", "kappa": 5}


def test_changing_a_component_name_drops_the_old_options(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("dgp:\n  conditional: {name: vmf, kappa: 3.0}\n")
    config = load_config(path, ["--dgp.conditional.name=normal", "--dgp.conditional.sigma=0.1"])
    assert config["dgp"]["conditional"] == {"name": "normal", "sigma": 0.1}


@pytest.mark.parametrize(
    "overrides, key",
    [
        (["--train.stepz=3"], "train.stepz"),
        (["--train.steps=0"], "train.steps"),
        (["--train.steps=1.5"], "train.steps"),
        (["--optim.lr=-1"], "optim.lr"),
        (["--device=tpu"], "device"),
        (["--loss.name=nope"], "loss.name"),
        (["--loss.temperature=1"], "loss.temperature"),
        (["--dgp.conditional.kapa=1"], "dgp.conditional.kapa"),
        (["--eval.nonlinear=maybe"], "eval.nonlinear"),
        (["--seed.x=1"], "seed.x"),
    ],
)
def test_bad_overrides_name_the_key(overrides, key):
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        load_config(None, overrides)


def test_malformed_argument():
    with pytest.raises(ValueError, match="--dotted.key=value"):
        parse_overrides(["loss.tau"])


def test_missing_file():
    with pytest.raises(ValueError, match="does not exist and is not a packaged preset"):
        load_config("/nonexistent/config.yaml")


def test_presets_resolve_by_name():
    sphere = load_config("sphere")
    assert sphere["dgp"]["space"]["name"] == "sphere" and sphere["loss"]["similarity"] == "cosine"
    assert sphere["encoder"]["widths"] is None  # the reference encoder
    switched = load_config("sphere", ["--loss.name=aninfonce"])
    assert switched["loss"] == {"name": "aninfonce"}
    assert load_config("content_style")["loss"]["negatives"] == "independent"
