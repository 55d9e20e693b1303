"""The one full check of a config: every run ``icl train`` would reject, ``icl sweep check`` rejects
with the same message, quickly and before anything is written."""

import sys

import pytest
import yaml

import dgp
from identifiable_cl.cli import main
from identifiable_cl.components import load_config

BAD = [
    ({"loss.similarity": "cosine", "encoder.normalize": "none"}, "encoder.normalize='none' is invalid"),
    ({"dgp.negatives.name": "marginal", "loss.negatives": "symmetric"}, "dgp.negatives.name='marginal' is invalid"),
    ({"loss.negatives": "independent"}, "dgp.negatives.name='none' is invalid"),
    ({"loss.similarity": "cosin"}, "loss.similarity='cosin' is invalid"),
    ({"loss.tau": -1}, "loss.tau=-1 is invalid"),
    ({"dgp.space.name": "sphere", "dgp.conditional.name": "anisotropic", "dgp.conditional.lambdas": "bimodel"},
     "dgp.conditional.lambdas='bimodel' is invalid"),
    ({"optim.lr": float("nan")}, "optim.lr=nan is invalid"),
    ({"optim.lr": float("inf")}, "optim.lr=inf is invalid"),
    ({"train.batch_size": 1}, "train.batch_size=1 is invalid"),
    ({"eval.final_n_fit": 1}, "eval.final_n_fit=1 is invalid"),
    ({"dgp.space.name": "euclidean", "dgp.marginal.name": "content_style", "dgp.marginal.content_dim": 3,
      "dgp.conditional.name": "content_style", "dgp.conditional.content_dim": 4},
     "dgp.conditional.content_dim=4 is invalid"),
    ({"dgp.conditional.scale": "wide"}, "dgp.conditional.scale='wide' is invalid"),
    ({"dgp.mixing.cond_ratio": 1.5}, "dgp.mixing.cond_ratio=1.5 is invalid"),
]


@pytest.mark.parametrize("overrides, message", BAD, ids=[m.split(" ")[0] for _, m in BAD])
def test_load_config_rejects_what_cannot_train(overrides, message):
    with pytest.raises(ValueError) as info:
        load_config(None, overrides)
    assert message in str(info.value)


@pytest.mark.parametrize("overrides, message", BAD, ids=[m.split(" ")[0] for _, m in BAD])
def test_sweep_check_gives_the_same_message_as_train(overrides, message, tmp_path, capsys):
    args = [f"--{k}={v}" for k, v in overrides.items()]
    assert main(["train", *args, "--out", str(tmp_path / "runs")]) == 2
    train_error = capsys.readouterr().err.strip()
    assert message in train_error and not (tmp_path / "runs").exists()
    sweep = tmp_path / "bad.yaml"
    sweep.write_text(yaml.safe_dump({
        "method": "grid", "command": ["${env}", "icl", "train", "${args}"],
        "parameters": {k: {"value": v} for k, v in overrides.items()},
    }))
    assert main(["sweep", "check", str(sweep), "--out", str(tmp_path / "out")]) == 1
    check_error = capsys.readouterr().err
    assert train_error.split("error: ", 1)[1] in check_error
    assert not (tmp_path / "out").exists()


def test_the_check_skips_the_mixing_search(monkeypatch):
    """The condition-number search is the one expensive draw; the check validates its options only."""
    def search(*args, **kwargs):
        raise AssertionError("the check must not run the condition-number search")

    monkeypatch.setattr(dgp.mixing, "condition_threshold", search)
    load_config(None, {"dgp.mixing.cond_draws": 100_000})  # the most allowed: seconds of draws, were they run
    with pytest.raises(ValueError, match="dgp.mixing.cond_draws=0 is invalid"):
        load_config(None, {"dgp.mixing.cond_draws": 0})
    with pytest.raises(AssertionError):
        dgp.build_process({}, seed=0)


def test_check_process_holds_placeholders_but_the_same_structure():
    real = dgp.build_process({"mixing": {"name": "mlp", "cond_draws": 300}}, seed=0)
    checked = dgp.check_process({"mixing": {"name": "mlp", "cond_draws": 300}}, seed=0)
    assert real.state_dict().keys() == checked.state_dict().keys()
    assert not dgp.checks.only_checking()


def test_empty_and_garbage_config_files_name_the_file(tmp_path):
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    with pytest.raises(ValueError, match="empty.yaml' is empty"):
        load_config(empty)
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00\x81")
    with pytest.raises(ValueError, match="binary.yaml' cannot be read as text"):
        load_config(binary)
    listing = tmp_path / "list.yaml"
    listing.write_text("- 1\n- 2\n")
    with pytest.raises(ValueError, match="must hold a mapping"):
        load_config(listing)


MACROS = {
    "${args}": ["--loss.tau=0.25", "--seed=3"],
    "${args_no_hyphens}": ["loss.tau=0.25", "seed=3"],
    "${args_no_equals}": ["--loss.tau", "0.25", "--seed", "3"],
    "${args_append_hydra}": ["+loss.tau=0.25", "+seed=3"],
    "${args_override_hydra}": ["++loss.tau=0.25", "++seed=3"],
}


@pytest.mark.parametrize("macro", list(MACROS))
def test_every_readable_macro_reaches_icl_train_and_is_checked(macro, tmp_path, monkeypatch):
    from identifiable_cl.cli import train
    from identifiable_cl.sweeps.plan import plan_runs, run_config
    from identifiable_cl.sweeps.render import render_command
    from identifiable_cl.sweeps.spec import load_sweep

    sweep = tmp_path / "s.yaml"
    sweep.write_text(yaml.safe_dump({
        "method": "grid", "command": ["${env}", "icl", "train", macro],
        "parameters": {"loss.tau": {"value": 0.25}, "seed": {"value": 3}},
    }))
    spec = load_sweep(sweep)
    (run,) = plan_runs(spec, tmp_path / "out")
    assert render_command(spec.command, run.params, environ={})[3:] == MACROS[macro]
    config = run_config(spec, run.params)
    assert config["loss"]["tau"] == 0.25 and config["seed"] == 3
    received = []
    monkeypatch.setattr(train, "run", lambda args: received.append(args) or 0)
    assert main(["train", *MACROS[macro]]) == 0
    assert load_config(None, train.parse_overrides(received[0].overrides)) == config

    sweep.write_text(yaml.safe_dump({
        "method": "grid", "command": ["${env}", "icl", "train", macro],
        "parameters": {"loss.tau": {"value": -0.25}},
    }))
    with pytest.raises(ValueError, match="loss.tau=-0.25 is invalid"):
        plan_runs(load_sweep(sweep), tmp_path / "out")


@pytest.mark.parametrize("macro", ["${args_no_boolean_flags}", "${args_json}", "${args_json_file}"])
def test_macros_icl_train_cannot_read_are_rejected(macro, tmp_path):
    from identifiable_cl.sweeps.spec import load_sweep

    sweep = tmp_path / "s.yaml"
    sweep.write_text(yaml.safe_dump({
        "method": "grid", "command": [sys.executable, "-m", "identifiable_cl.cli", "train", macro],
        "parameters": {"eval.nonlinear": {"values": [True, False]}},
    }))
    with pytest.raises(ValueError, match=r"command\[4\]: `icl train` cannot read"):
        load_sweep(sweep)
