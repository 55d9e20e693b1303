"""Discoverable configuration: ``icl config``, ``icl plugins`` with options, ``icl evaluate`` with eval
overrides, and ``icl results --format latex``."""

import json
from pathlib import Path

import pytest
import yaml

from dgp.registry import option_docs
from identifiable_cl import rundir
from identifiable_cl.arguments import split
from identifiable_cl.aggregate import FORMATS, FORMATTERS, Run, format_latex, group_runs, latex_escape
from identifiable_cl.cli import main
from identifiable_cl.config import COMPONENT_SECTIONS, LEAVES
from identifiable_cl.components import load_config
from identifiable_cl.sweeps.local import write_params



def printed_config(capsys, args):
    assert main(["config", *args]) == 0
    return yaml.safe_load(capsys.readouterr().out)


# icl config


def test_config_prints_the_default_config(capsys):
    assert printed_config(capsys, []) == load_config(None)


def test_config_with_a_preset_and_overrides_in_every_form(capsys):
    args = ["--loss.tau=0.5", "train.steps=7", "+eval.nonlinear=False", "++seed=3", "--dgp.conditional.kappa", "5",
            "--encoder.widths=[8, 8]"]
    printed = printed_config(capsys, ["sphere", *args])
    assert printed == load_config("sphere", split(args)[1])
    assert printed["loss"]["tau"] == 0.5 and printed["train"]["steps"] == 7 and printed["seed"] == 3
    assert printed["dgp"]["conditional"] == {"name": "vmf", "kappa": 5} and printed["encoder"]["widths"] == [8, 8]
    assert printed["eval"]["nonlinear"] is False and printed["dgp"]["space"]["name"] == "sphere"


def test_config_with_a_yaml_file_and_a_component_change(capsys, tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("loss: {name: infonce, tau: 0.2}\ntrain: {steps: 11}\n")
    args = ["--loss.name=aninfonce", "--encoder.normalize=sphere"]
    printed = printed_config(capsys, [str(path), *args])
    assert printed == load_config(path, args)
    assert printed["loss"] == {"name": "aninfonce"} and printed["train"]["steps"] == 11


@pytest.mark.parametrize("args", [
    ["--loss.tau=-1"],
    ["--train.steps=0"],
    ["--loss.bogus=1"],
    ["--trian.steps=5"],
    ["--dgp.conditional.name=nope"],
    ["--encoder.normalize=none", "--loss.similarity=cosine"],
    ["no_such_preset"],
])
def test_a_bad_override_gives_the_message_icl_train_gives(capsys, tmp_path, monkeypatch, args):
    monkeypatch.chdir(tmp_path)
    assert main(["train", *args]) == 2
    train_err = capsys.readouterr().err
    assert main(["config", *args]) == 2
    config_err = capsys.readouterr().err
    assert train_err.startswith("icl train: error: ") and config_err.startswith("icl config: error: ")
    assert config_err.removeprefix("icl config: ") == train_err.removeprefix("icl train: ")
    assert len(config_err.strip().splitlines()) == 1
    assert not any(tmp_path.iterdir())  # icl train wrote nothing


def test_config_keys_lists_every_key_with_type_default_allowed_and_doc(capsys):
    assert main(["config", "--keys"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines()[1:]}
    for key, leaf in LEAVES.items():
        assert key in rows, key
        assert leaf.doc in rows[key] and leaf.describe() in rows[key]
    for section in COMPONENT_SECTIONS:
        assert f"{section}.name" in rows, section
    assert "int" in rows["train.steps"] and "3000" in rows["train.steps"] and ">= 1" in rows["train.steps"]
    assert "float | null" in rows["optim.grad_clip"] and "null" in rows["optim.grad_clip"]
    assert "fp32 | tf32 | bf16" in rows["train.precision"]
    # a component section: the names it allows, then its default component's options with their defaults
    assert "infonce" in rows["loss.name"] and "aninfonce | ensemble" in rows["loss.name"]
    assert rows["loss.tau"].split()[1:3] == ["float", "0.1"] and "temperature" in rows["loss.tau"]
    assert rows["loss.learn_tau"].split()[1:3] == ["bool", "false"]
    assert rows["dgp.conditional.scale"].split()[1:3] == ["float", "0.1"]
    assert rows["dgp.mixing.cond_draws"].split()[1:3] == ["int", "25000"]
    assert "loss.dim" not in rows and "encoder.input_dim" not in rows  # supplied when built, not configurable


@pytest.mark.parametrize("args", [["--keys", "sphere"], ["sphere", "--keys"], ["--keys", "--loss.tau=1"]])
def test_config_keys_takes_nothing_else(capsys, args):
    assert main(["config", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("icl config: error: --keys lists every config key and takes nothing else")


def test_config_is_listed_after_train_in_the_help(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "config" in out and out.index("train") < out.index("config") < out.index("evaluate")


# icl plugins


def component_block(out, name):
    """The option lines printed below ``  NAME  ORIGIN`` (the first component of that name)."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"  {name} "))
    block = []
    for line in lines[start + 1:]:
        if not line.startswith("    "):
            break
        block.append(line.strip())
    return block


def test_plugins_shows_options_with_defaults_and_docs(capsys):
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    infonce = component_block(out, "infonce")
    tau = next(line for line in infonce if line.startswith("tau "))
    assert tau.startswith("tau = 1.0") and "temperature > 0" in tau
    assert any(line.startswith("similarity = cosine") for line in infonce)
    assert any(line.startswith("lr = null") for line in infonce)
    assert "dim (set by icl)" in infonce
    vmf = component_block(out, "vmf")
    assert len(vmf) == 1 and vmf[0].startswith("kappa = 1.0") and "concentration" in vmf[0]
    assert any(line.startswith("members = [{name: infonce, tau: 1.0}, {name: infonce, tau: 0.1}]")
               for line in component_block(out, "ensemble"))
    assert component_block(out, "uniform") == []  # a component without options


def test_plugins_kind_shows_one_registry(capsys):
    assert main(["plugins", "--kind", "losses"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("losses:\n") and "  infonce " in out and "  aninfonce " in out
    headers = [line for line in out.splitlines() if not line.startswith(" ")]
    assert headers == ["losses:"]
    assert "vmf" not in out


def test_plugins_unknown_kind_lists_the_kinds(capsys):
    assert main(["plugins", "--kind", "loss"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("icl plugins: error: --kind 'loss' is not a kind of component; kinds: ")
    for kind in ("conditionals", "encoders", "losses", "marginals", "mixings", "negatives", "spaces"):
        assert kind in err


def test_option_docs_are_declared_and_inherited():
    class Base:
        OPTION_DOCS = {"alpha": "the first option", "beta": "(int >= 1) the second"}

        def __init__(self, *, alpha=1, beta=2, **options):
            pass

    class Child(Base):
        """Docstrings are prose: ``gamma`` (> 0) mentioned here is not read."""

        OPTION_DOCS = {"gamma": "(> 0) its own", "alpha": "overridden here"}

        def __init__(self, *, gamma=1.0, delta=0, **options):
            super().__init__(**options)

    docs = option_docs(Child)
    assert docs == {"gamma": "(> 0) its own", "alpha": "overridden here", "beta": "(int >= 1) the second"}
    assert list(docs) == ["gamma", "alpha", "beta"]  # signature order; delta has no text

    def make(*, a=1, b=2):
        pass

    make.OPTION_DOCS = {"a": "known"}
    assert option_docs(make) == {"a": "known"}
    assert option_docs(Base.__init__) == {} and option_docs(len) == {} and option_docs(3) == {}


def test_option_docs_naming_no_option_are_refused_at_registration():
    from dgp.registry import Registry

    class Stray:
        OPTION_DOCS = {"kappa": "concentration", "kapa": "a typo"}

        def __init__(self, *, kappa=1.0):
            pass

    registry = Registry("test_stray_docs")
    with pytest.raises(ValueError, match=r"test_stray_docs 'stray' \(.*Stray\): OPTION_DOCS documents kapa, which "
                                         r"are not options of it \(its options: kappa\)"):
        registry.register("stray")(Stray)
    assert "stray" not in registry


def test_every_registered_option_is_documented():
    from dgp.registry import REGISTRIES, option_parameters

    supplied = {"dim", "input_dim", "latent_dim"}  # passed by icl when it builds the component
    for kind, registry in REGISTRIES.items():
        for entry in registry:
            if entry.origin.startswith("entry point"):
                continue
            undocumented = set(option_parameters(entry.obj)[0]) - set(option_docs(entry.obj)) - supplied
            assert not undocumented, (kind, entry.name, undocumented)


# icl evaluate




def test_evaluate_uses_eval_overrides(run, capsys, tiny, evaluation_calls):
    sizes = evaluation_calls("n_fit", "n_test")
    config = (run / rundir.CONFIG).read_bytes()
    assert main(["evaluate", str(run), "--eval.final_n_fit=256", "eval.final_n_test=96"]) == 0
    assert sorted(sizes) == [("evaluate", 256, 96), ("identity_baseline", 256, 96)]
    out = capsys.readouterr().out
    assert f"written to {run / rundir.EVALUATION}" in out
    summary = json.loads((run / rundir.EVALUATION).read_text())
    assert summary["steps"] == tiny["train.steps"] and "r2_linear" in summary and "identity_r2_linear" in summary
    assert (run / rundir.CONFIG).read_bytes() == config  # the run's own config is unchanged

    sizes.clear()
    assert main(["evaluate", str(run)]) == 0
    assert ("evaluate", tiny["eval.final_n_fit"], tiny["eval.final_n_test"]) in sizes


@pytest.mark.parametrize("override", ["--loss.tau=1", "--train.steps=40", "--device=cpu", "--seed=1"])
def test_evaluate_rejects_other_keys(run, capsys, override):
    before = sorted(p.name for p in run.iterdir())
    assert main(["evaluate", str(run), override]) == 2
    err = capsys.readouterr().err
    key = override[2:].split("=")[0]
    assert err.startswith(f"icl evaluate: error: {key}=")
    assert "only eval.* keys can be overridden when evaluating" in err
    assert sorted(p.name for p in run.iterdir()) == before


def test_evaluate_checks_eval_overrides(run, capsys):
    assert main(["evaluate", str(run), "--eval.final_n_fit=1"]) == 2
    assert "eval.final_n_fit=1 is invalid: must be >= 2" in capsys.readouterr().err
    assert main(["evaluate", str(run), "--eval.bogus=1"]) == 2
    assert "eval.bogus=1 is invalid: unknown config key" in capsys.readouterr().err


# icl results --format latex


def make_run(path, params, r2=None, mcc=None):
    summary = None if r2 is None else {"r2_linear": r2, **({} if mcc is None else {"mcc_pearson": mcc})}
    return Run(Path(path), params, tuple(params), summary, None if summary else "no summary.json")


def test_latex_table(tmp_path):
    runs = [
        make_run("a0", {"loss.name": "infonce", "seed": 0}, 0.91, 0.5),
        make_run("a1", {"loss.name": "infonce", "seed": 1}, 0.95, 0.7),
        make_run("a2", {"loss.name": "infonce", "seed": 2}),
        make_run("b0", {"loss.name": "aninfonce", "seed": 0}, 0.99),
    ]
    keys, metrics = ["loss.name"], ["r2_linear", "mcc_pearson"]
    text = FORMATTERS["latex"](group_runs(runs, keys), keys, metrics)
    assert "latex" in FORMATS
    lines = text.splitlines()
    assert lines[:4] == [r"\begin{tabular}{lrrrr}", r"\toprule", r"loss.name & r2\_linear & mcc\_pearson & n & failed \\",
                         r"\midrule"]
    assert lines[4] == r"infonce & 0.930 $\pm$ 0.028 & 0.600 $\pm$ 0.141 & 2 & 1 \\"
    assert lines[5] == r"aninfonce & 0.990 & --- & 1 & 0 \\"
    assert lines[6:8] == [r"\bottomrule", r"\end{tabular}"]
    assert lines[8:] == ["% 1 failed run(s):", "% - a2: no summary.json"]


@pytest.mark.parametrize("raw, escaped", [
    ("a_b", r"a\_b"), ("50%", r"50\%"), ("x&y", r"x\&y"), ("#1", r"\#1"),
    ("$5", r"\$5"), ("{k}", r"\{k\}"), ("~", r"\textasciitilde{}"), ("^", r"\textasciicircum{}"),
    ("a\\b", r"a\textbackslash{}b"), ("plain text 1.5", "plain text 1.5"),
])
def test_latex_escapes_keys_and_labels(raw, escaped):
    assert latex_escape(raw) == escaped
    runs = [make_run("r", {raw: raw}, 0.5)]
    text = format_latex(group_runs(runs, [raw]), [raw], [f"m{raw}"])
    header, row = text.splitlines()[2], text.splitlines()[4]
    assert header == f"{escaped} & m{escaped} & n & failed \\\\"
    assert row.startswith(f"{escaped} & ")


def test_latex_from_the_command_line(tmp_path, capsys):
    for i, (tau, seed, r2) in enumerate([(0.1, 0, 0.9), (0.1, 1, 0.8), ("50%_x", 0, 0.7)]):
        folder = tmp_path / "sweep" / f"run{i}"
        folder.mkdir(parents=True)
        params = {"loss.my_tau": tau, "seed": seed}
        write_params(folder / "params.yaml", params)
        (folder / "status.json").write_text(json.dumps({"index": i, "exit_code": 0, "state": "finished", "run_dir": "run"}))
        (folder / "run").mkdir()
        (folder / "run" / "config.yaml").write_text(yaml.safe_dump({"seed": seed}))
        (folder / "run" / "summary.json").write_text(json.dumps({"r2_linear": r2}))
    assert main(["results", str(tmp_path / "sweep"), "--format", "latex"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == r"\begin{tabular}{lrrr}" and out[2] == r"loss.my\_tau & r2\_linear & n & failed \\"
    assert out[4] == r"0.1 & 0.850 $\pm$ 0.071 & 2 & 0 \\"
    assert out[5] == r"50\%\_x & 0.700 & 1 & 0 \\"
    assert out[-1] == r"\end{tabular}"
